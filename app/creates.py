"""What hangar creates on GitHub only once: a status comment, a check run, a thread reply.

A create is marked on its row before it is sent (by which replica, when), in the same
transaction that reads the row; its id is saved once GitHub answers. Whoever finds a mark
without an id looks on GitHub first, since the create may have been made:

- no mark: nothing was sent, so it is created at once (one call), unless the job is
  older than this hangar (a restored backup may not remember what was made since);
- this replica's own mark: an earlier step of this replica (or the replica before a
  restart) sent it and is over, so what it made is there to be found;
- another replica's mark younger than IN_FLIGHT_S: its create may still be on its way
  (that replica stalled past its lease and this one took the row over). When the look
  finds nothing, the step waits until the mark is that old rather than create a second;
- an older mark: any create it stood for has landed or failed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

from pydantic import BaseModel

# A write waits at most 5 s for its place (RetryPolicy.max_inline_wait_s) and 30 s for
# its answer (request_timeout_s): twice that bounds a create another replica sent.
IN_FLIGHT_S = 70.0

K = TypeVar("K")


class Mark(BaseModel):
    """A create that may have been sent: by which replica, and when."""

    by: str = ""  # "": written before marks named their replica (taken as long done)
    at: float = 0.0


class Plan(StrEnum):
    CREATE = "create"  # nothing was sent: create it
    LOOK = "look"  # look for it, and create it if it is not there
    LOOK_ONLY = "look only"  # look for it; if it is not there, wait (CreateInFlight)


class CreateInFlight(Exception):
    """Another replica may be creating this on GitHub now: the step waits, without
    counting a failure, until its mark is old enough to look again."""

    def __init__(self, what: str, until: float):
        super().__init__(f"another replica may still be creating {what}")
        self.until = until


@dataclass(frozen=True)
class Creating:
    """How one replica creates what belongs to one job."""

    replica: str
    inherited: bool  # the job is older than this hangar's start

    def mark(self) -> Mark:
        return Mark(by=self.replica, at=time.time())

    def plan(self, mark: Mark | None, *, now: float | None = None) -> Plan:
        if mark is None:
            return Plan.LOOK if self.inherited else Plan.CREATE
        if mark.by == self.replica or (now or time.time()) - mark.at >= IN_FLIGHT_S:
            return Plan.LOOK
        return Plan.LOOK_ONLY

    def claim(self, marks: dict[K, Mark], key: K, *, keep: int | None = None
              ) -> tuple[dict[K, Mark], Plan]:
        """The plan for creating `key`, and the marks to write before it is sent (this
        replica's, unless another's is still in flight). `keep`: at most that many of the
        latest marks stay."""
        plan = self.plan(marks.get(key))
        if plan == Plan.LOOK_ONLY:
            return marks, plan
        kept = [(k, m) for k, m in marks.items() if k != key]
        if keep:
            kept = kept[max(0, len(kept) - keep + 1):]
        return {**dict(kept), key: self.mark()}, plan

    @staticmethod
    def in_flight(what: str, mark: Mark | None) -> CreateInFlight:
        return CreateInFlight(what, (mark.at if mark else time.time()) + IN_FLIGHT_S)


def marks_of(value: Any) -> Any:
    """Marks as older rows kept them (a list of keys, or True): each as long done."""
    if isinstance(value, list):
        return {key: Mark() for key in value}
    if value is True:
        return Mark()
    if value is False:
        return None
    return value
