"""Changes to hangar's rows, numbered, for clients that would otherwise poll.

The store tells `Changes` of every row it writes and every timeline note. Each becomes a
`Change` with a sequence number, kept in a ring; waiters (the API's long waits, the
event stream, the MCP server's waiting tools) are woken by the change itself, never by
a timer. A client that says "after N" gets everything since N that the ring still holds.

Numbers start, in each process, above any an earlier process gave (at its start time in
microseconds), so a client that comes back after a restart with an old number is told
it missed changes instead of waiting, silently, for the new count to pass its number.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from pydantic import BaseModel

KEEP = 5000
# Rows whose changes clients care about; deliveries, tokens and caches are not news.
KINDS = frozenset({"job", "run", "land", "autofix", "intent", "note"})


@dataclass(frozen=True)
class Change:
    seq: int
    at: float
    kind: str  # job | run | land | autofix | intent | note (a line on a job's timeline)
    id: str
    job: str | None  # the job it belongs to, when it belongs to one
    state: str | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def job_of(kind: str, row_id: str, model: BaseModel | None) -> str | None:
    if kind == "job" or (kind == "note" and row_id.startswith("job-")):
        return row_id
    return getattr(model, "job_id", None)


def state_of(model: BaseModel | None) -> str | None:
    state = getattr(model, "state", None)
    return None if state is None else str(state)


class Changes:
    def __init__(self, loop: asyncio.AbstractEventLoop, keep: int = KEEP):
        self._loop = loop
        self._thread = threading.get_ident()
        self._ring: deque[Change] = deque(maxlen=keep)
        # Below 2**53, so a JSON client reads it exactly.
        self._first = time.time_ns() // 1000
        self._seq = self._first
        self._arrived = asyncio.Event()
        self.closed = False

    @property
    def seq(self) -> int:
        """The number of the latest change; read it before reading rows to miss nothing."""
        return self._seq

    def record(self, kind: str, row_id: str, model: BaseModel | None) -> None:
        """The store's listener: may be called from any thread."""
        if kind not in KINDS:
            return
        args = (kind, row_id, job_of(kind, row_id, model), state_of(model))
        if threading.get_ident() == self._thread:
            self._append(*args)
        else:
            self._loop.call_soon_threadsafe(self._append, *args)

    def _append(self, kind: str, row_id: str, job: str | None, state: str | None) -> None:
        self._seq += 1
        self._ring.append(Change(self._seq, time.time(), kind, row_id, job, state))
        arrived, self._arrived = self._arrived, asyncio.Event()
        arrived.set()

    def close(self) -> None:
        """Wake every waiter for good (hangar is stopping)."""
        self.closed = True
        self._arrived.set()

    def since(self, after: int, match: Callable[[Change], bool] = lambda c: True) -> list[Change]:
        return [c for c in self._ring if c.seq > after and match(c)]

    def missed(self, after: int) -> bool:
        """Whether changes after `after` are not all here: they left the ring, or `after`
        is from before this process (a restart) and what came between is unknown."""
        return after < self._first or (bool(self._ring) and self._ring[0].seq > after + 1)

    async def wait(
        self, after: int, match: Callable[[Change], bool], timeout: float
    ) -> list[Change]:
        """The matching changes after `after`, as soon as there is one; [] at the timeout."""
        deadline = self._loop.time() + timeout
        while not self.closed:
            found = self.since(after, match)
            if found:
                return found
            remaining = deadline - self._loop.time()
            if remaining <= 0:
                return []
            arrived = self._arrived
            try:
                async with asyncio.timeout(remaining):
                    await arrived.wait()
            except TimeoutError:
                return []
        return []
