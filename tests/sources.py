"""hangar's own source, for the tests that read code (its words, its use of the engine)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "app"


def app_files(name: str) -> list[Path]:
    """The files of `app/<name>`: a module, or every module of a concern's folder."""
    module, folder = APP / f"{name}.py", APP / name
    found = [module] if module.exists() else sorted(folder.rglob("*.py"))
    assert found, f"no app/{name}.py nor a folder app/{name}/"
    return found
