"""What jobs and runs register with the engine: the run and job rows and their steps,
their commands, the sandboxes this hangar holds at its start, and waking a job when one
of its runs moved."""

from __future__ import annotations

from app.engine import NEVER, Registrations, RowKind
from app.models import Job, Run, follows_thread
from app.runs.commands import ACTIONS
from app.runs.jobs import (
    advance_job,
    count_held_sandboxes,
    end_abandoned_sandboxes,
    give_up,
    reap_orphans,
    wake_job,
)
from app.runs.steps import advance_run, note_failure


def register(engine: Registrations) -> None:
    engine.on_command(ACTIONS)
    engine.register(
        RowKind("run", "run", Run, advance_run, next_at=lambda row: row.retry_at,
                counts_failures=note_failure),
        # A job waits for its runs (a finished run wakes it), its folded status edit, and
        # is due at once when another concern asked for an edit.
        RowKind("job", "job", Job, advance_job,
                next_at=lambda row: 0.0 if row.status_asked else row.status_due_at or NEVER,
                give_up=give_up, follows_rename=follows_thread),
    )
    engine.at_start("reaping orphan sandboxes", reap_orphans)
    engine.at_start("ending sandboxes whose hangar is gone", end_abandoned_sandboxes)
    # What the reaper kept (a run still going) counts against HANGAR_MAX_SANDBOXES.
    engine.at_start("counting the sandboxes this hangar holds", count_held_sandboxes)
    # A finished run may be its job's last: the job looks at its runs.
    engine.after_step("run", wake_job)
