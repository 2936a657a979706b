"""The fakehub world the loop's benches run hangar in: acme/widgets with add() broken,
hangar registered and installed, and hangar's settings for it (the local provider, the
script agent that fixes add(), the tests as verification, run once).

    from bench.world import REPO, hangar_on_fakehub
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.settings import Settings
from tests.e2e.conftest import FIX_AGENT, REPO_FILES, VERIFY, free_port

REPO = "acme/widgets"


def hangar_on_fakehub(hub: Any, tmp: Path, *, writers: tuple[str, ...] = ("mona",),
                      permissions: dict[str, str] | None = None) -> tuple[Any, Settings]:
    """The App (fakehub's AppInfo) and the settings for hangar to serve it; each of
    `writers` is a person with write access to REPO."""
    port = free_port()
    app = hub.create_app(name="hangar", webhook_url=f"http://127.0.0.1:{port}/webhook",
                         permissions=permissions)
    for login in ("acme", *writers):
        hub.create_user(login)
    hub.create_repo("acme", "widgets", dict(REPO_FILES))
    for login in writers:
        hub.grant(REPO, login, "write")
    hub.install(app.id, "acme", [REPO])
    envs = tmp / "envs"
    envs.mkdir()
    (envs / "default.yaml").write_text(
        "name: default\nprovider: local\nharness: script\n"
        "agent_script: |\n" + "".join(f"  {line}\n" for line in FIX_AGENT.splitlines())
        + f"verify: {{command: '{VERIFY}', retries: 0}}\n")
    settings = Settings(
        app_id=app.id, private_key_file=app.private_key_path,
        webhook_secret=app.webhook_secret, data_dir=tmp / "hangar",
        github_url=hub.api_url, port=port, envs_dir=envs, log_level="WARNING",
        run_watch_interval_seconds=0.5)
    return app, settings
