"""What fan-out registers with the engine: try and pick, the grading row that waits for
CI on the attempts' heads, and ranking the attempts once every run of a job ended."""

from __future__ import annotations

from app.engine import Registrations, RowKind
from app.fanout.commands import ACTIONS
from app.fanout.grading import TABLE, Grading
from app.fanout.steps import advance_grading, rank_attempts
from app.models import follows_repo


def register(engine: Registrations) -> None:
    engine.on_command(ACTIONS)
    # A fan-out's ranking waits for CI on its attempts' heads: CI's events wake it, else
    # its deadline.
    engine.register(RowKind("fanout_grading", TABLE, Grading, advance_grading,
                            next_at=lambda row: row.due_at, follows_rename=follows_repo()))
    # Once every attempt of `/hangar try N` has finished, fan-out ranks them.
    engine.when_runs_end(rank_attempts)
