"""Pauses a stop cuts short.

A step that waits before it asks GitHub again (a retry's backoff, the spacing between
writes, a push tried again) holds nothing in flight: nothing was sent that the wait
protects. When hangar stops, such a step is cancelled at once, as its pause begins or
while it lasts, rather than holding the stop for its whole grace; the step is taken up
again from its row after the restart, as any step cut by a stop is.

Outside an engine's step (the CLI, a test), a pause is a plain sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
from contextvars import ContextVar

_STOPPING: ContextVar[asyncio.Event | None] = ContextVar("hangar_stopping", default=None)


def stop_with(stopping: asyncio.Event) -> None:
    """The current task's pauses end, the task cancelled, once `stopping` is set (called
    by the engine as each step begins: a task's context is its own)."""
    _STOPPING.set(stopping)


async def pause(seconds: float) -> None:
    """Sleep `seconds`; within a step of a stopping engine, be cancelled instead."""
    stopping = _STOPPING.get()
    if stopping is None:
        await asyncio.sleep(seconds)
        return
    if not stopping.is_set():
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(seconds, 0)):
                await stopping.wait()
    if stopping.is_set():
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        await asyncio.sleep(0)  # the cancel lands here
