"""What landing registers with the engine: land requests, a base's overlapping PRs and
merge groups as rows, its commands, what it says in a job's status comment, and what it
does once a turn's step ended."""

from __future__ import annotations

from app.engine import NEVER, Registrations, RowKind
from app.landing.commands import handle_command, resolve
from app.landing.intake import after_run_step
from app.landing.overlaps import Overlaps, advance_overlaps, overlap_id
from app.landing.queue import MergeGroup, advance_group, group_id, wake_group
from app.landing.rows import LandRequest, follow_rename
from app.landing.steps import advance_land, give_up, status_notes
from app.models import follows_repo


def register(engine: Registrations) -> None:
    engine.on_command({"land": handle_command, "land_cancel": handle_command,
                       "resolve": resolve})
    engine.register(
        RowKind("land", "land", LandRequest, advance_land,
                next_at=lambda row: row.due_at, give_up=give_up, follows_rename=follow_rename),
        # A base's open hangar PRs that change the same files: woken by a turn's end, a
        # push, a close.
        RowKind("land_overlap", "land_overlap", Overlaps, advance_overlaps,
                next_at=lambda row: row.due_at,
                follows_rename=follows_repo(lambda row: overlap_id(row.repo, row.base))),
        # A merge group waits for its verification run (a finished run step wakes it).
        RowKind("merge_group", "merge_group", MergeGroup, advance_group,
                next_at=lambda row: row.due_at if row.state == "new" else NEVER,
                follows_rename=follows_repo(lambda row: group_id(row.repo, row.head_sha))),
    )
    # A merge group verifying with a run looks again once the run's step ends.
    engine.after_step("run", wake_group)
    # A finished turn's files are known (overlaps), its verified head may land (auto-land).
    engine.after_step("run", after_run_step)
    engine.status_notes(status_notes)
