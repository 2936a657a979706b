"""What the repositories concern registers with the engine: the rebuild from GitHub,
retried while one is owed; and the end of an installation's work when a step finds that
GitHub mints it no token (it was suspended or uninstalled while hangar was not listening)."""

from __future__ import annotations

from app.engine import REBUILD_RETRY_S, Chore, Registrations
from app.repositories.moves import stop_installation
from app.repositories.rebuild import run_pending_rebuild


def register(engine: Registrations) -> None:
    engine.add_chore(Chore("rebuild", run_pending_rebuild,
                           every=lambda _engine: REBUILD_RETRY_S,
                           wanted=lambda engine: engine.rebuilding))
    engine.when_installation_ends(stop_installation)
