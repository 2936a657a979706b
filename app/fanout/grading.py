"""Fan-out's grading: once every attempt of `/hangar try N` has ended, the ranking waits
for the repository's own CI on each attempt's head (the seed's `grading` state), at most
`HANGAR_GRADING_WAIT_SECONDS`. A check run, check suite or commit status finishing on a
waited head wakes the row; the deadline wakes it otherwise. Nothing polls."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from pydantic import BaseModel

from app.models import changed

if TYPE_CHECKING:
    from app.fanout.context import FanoutContext

TABLE = "fanout_grading"


class Grading(BaseModel):
    """One job's wait for CI before its attempts are ranked; the row's id is the job's."""

    id: str
    repo: str
    heads: dict[int, str]  # attempt -> the head sha its CI is read on
    since: float
    until: float  # past it, the attempts are ranked with whatever CI has said
    due_at: float = 0.0  # the next look: at once when woken, else the deadline
    wakes: int = 0  # CI events heard: a look that read CI before the last one looks again
    done: bool = False  # ranked


def get_row(engine: FanoutContext, job_id: str) -> Grading | None:
    return engine.store.get(TABLE, job_id, Grading)


def start(engine: FanoutContext, job_id: str, repo: str, heads: dict[int, str],
          waiting: dict[int, str], wait: float) -> Grading:
    """Wait for CI on `waiting` (of `heads`) at most `wait` seconds: the job says so, the
    row waits."""
    now = time.time()
    row = Grading(id=job_id, repo=repo, heads=heads, since=now, until=now + wait,
                  due_at=now + wait)
    engine.patch_job(job_id, grading={"until": row.until, "waiting": by_name(waiting)})
    engine.store.put(TABLE, job_id, row, active=True)
    return row


def wait_again(engine: FanoutContext, row: Grading, waiting: dict[int, str]) -> None:
    """CI was still running on `waiting` when `row` was read: sleep until an event or the
    deadline, unless an event came since (then the row stays due, to look again)."""
    engine.patch_job(row.id, grading={"until": row.until, "waiting": by_name(waiting)})
    _update(engine, row.id, lambda now: changed(now, due_at=now.until)
            if now.wakes == row.wakes else now)


def by_name(heads: dict[int, str]) -> dict[str, str]:
    """Attempt numbers as the job's JSON keeps them: text."""
    return {str(a): sha for a, sha in heads.items()}


def finish(engine: FanoutContext, row: Grading) -> None:
    _update(engine, row.id, lambda now: changed(now, done=True))


def on_ci(engine: FanoutContext, repo: str, head_sha: str, *, check: str | None = None,
          ours: bool = False) -> None:
    """CI finished something on head_sha: a grading that waits on it looks again now.
    hangar's own checks are not the repository's CI."""
    if ours:
        return
    for row in engine.store.all(TABLE, Grading, active=True):
        if row.repo == repo and head_sha in row.heads.values():
            _update(engine, row.id, lambda now: now if now.done else changed(
                now, due_at=0.0, wakes=now.wakes + 1))


def _update(engine: FanoutContext, job_id: str, change: Callable[[Grading], Grading]) -> None:
    """Change the row in one transaction: an event's wake and a step's write never undo
    each other, on one replica or several."""
    engine.store.update(TABLE, job_id, Grading, change, placed=lambda row: (not row.done, None))
