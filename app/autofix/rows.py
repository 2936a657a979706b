"""Auto-fix's row: one per repository and PR, saying what was tried. Read it, make it,
change it field by field, and put it to rest when hangar gives up."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from app.autofix.rules import MAX_JUDGED, Stop, kept
from app.models import AutofixRow, Job, autofix_row_id, changed
from app.render.reasons import Why

if TYPE_CHECKING:
    from app.autofix.context import AutofixContext

__all__ = ["AutofixRow", "autofix_row_id", "ensure_row", "get_row", "give_up", "judged",
           "patch", "row_id", "save"]


row_id = autofix_row_id  # an auto-fix row is one per repository and PR


def get_row(engine: AutofixContext, autofix_id: str) -> AutofixRow | None:
    return engine.store.get("autofix", autofix_id, AutofixRow)


def ensure_row(engine: AutofixContext, job: Job, pr_number: int) -> AutofixRow:
    existing = get_row(engine, row_id(job.thread.repo, pr_number))
    if existing:
        return existing
    row = AutofixRow(id=row_id(job.thread.repo, pr_number), job_id=job.id,
                     repo=job.thread.repo, pr_number=pr_number)
    return save(engine, row)


def save(engine: AutofixContext, row: AutofixRow, *, active: bool = True) -> AutofixRow:
    engine.store.put("autofix", row.id, row, active=active)
    return row


def read_again(engine: AutofixContext, autofix_id: str) -> AutofixRow:
    """The row of a step that runs, read again: it is there (a row is never deleted)."""
    row = get_row(engine, autofix_id)
    assert row is not None, autofix_id
    return row


def patch(engine: AutofixContext, autofix_id: str, **fields: Any) -> AutofixRow:
    """Read the row fresh, change only these fields, write it back (one transaction):
    events that arrived while a step awaited GitHub, on any replica, are kept."""
    return engine.store.update("autofix", autofix_id, AutofixRow,
                               lambda row: changed(row, **fields),
                               placed=lambda _row: (True, None))


def judged(row: AutofixRow, key: str) -> list[str]:
    return [*row.seen_heads[-MAX_JUDGED:], key] if key not in row.seen_heads else row.seen_heads


def give_up(engine: AutofixContext, autofix_id: str, reason: str) -> None:
    """The step failed again and again: stop looking until an event wakes the row."""
    row = get_row(engine, autofix_id)
    if row is None:
        return
    save(engine, changed(row, **{
        "stopped": kept(Why(Stop.GAVE_UP, error=reason))}), active=False)
    engine.note(row.job_id, f"auto-fix #{row.pr_number} stopped: {reason}")
