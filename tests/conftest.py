"""Shared fixtures. Each area keeps its own fixtures in its own conftest or plugin."""

pytest_plugins = ["fakehub.pytest_plugin"]


def hangar_permissions() -> dict[str, str]:
    """What hangar's App manifest asks for: every test's App is granted exactly this."""
    import json
    from pathlib import Path

    manifest = Path(__file__).resolve().parents[1] / "manifests" / "github-app.json"
    return dict(json.loads(manifest.read_text())["default_permissions"])
