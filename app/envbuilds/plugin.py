"""What environment builds register with the engine: the build row and its step, and
queueing the builds whose inputs drifted while hangar was down."""

from __future__ import annotations

from app.engine import NEVER, Registrations, RowKind
from app.envbuilds.rows import BUILD, EnvBuildRow
from app.envbuilds.steps import advance_build, rebuild_stale


def register(engine: Registrations) -> None:
    # A build waits for a slot: a queued build, and the end of one, wake the queued.
    engine.register(RowKind("envbuild", BUILD, EnvBuildRow, advance_build,
                            next_at=lambda _row: NEVER))
    engine.at_start("queueing stale environment builds", rebuild_stale)
