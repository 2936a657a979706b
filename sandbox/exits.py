"""The end of a detached process, heard as it happens rather than at the next look.

hangar observes a running agent every `run_watch_interval_seconds` (its progress is read
at that pace too), so an agent that ends waits up to an interval before hangar pushes
its work. Where the provider names the process's host pid (local sandboxes, and docker
when its engine runs on this host), a pidfd becomes readable the moment that process
ends: the waiter then calls back, and the engine looks at once.

This only makes a look earlier. What a look finds (`Provider.observe`) stays the truth:
a waiter that cannot start (no host pid, a kernel without pidfd, a pid from another
host) or that is cancelled changes nothing but the latency.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


async def process_ended(provider: Any, sb: Any, process_id: str) -> bool:
    """Wait until the detached process ends: True once it has, False at once when its end
    cannot be waited for here (then only the engine's periodic look will see it)."""
    try:
        pids = await asyncio.to_thread(provider.host_pids, sb, process_id)
    except Exception:  # a provider that cannot say: the periodic look will
        log.debug("no host pid to wait on", exc_info=True)
        return False
    if not pids:
        return False
    try:
        fd = os.pidfd_open(pids[0])
    except (OSError, AttributeError):  # gone already, or no pidfd on this kernel
        return False
    loop = asyncio.get_running_loop()
    ended = loop.create_future()

    def readable() -> None:
        if not ended.done():
            ended.set_result(None)

    try:
        loop.add_reader(fd, readable)
        await ended
        return True
    finally:
        loop.remove_reader(fd)
        os.close(fd)


class ExitWaits:
    """One waiter per detached process, each calling `then` once its process ends; a
    process asked for again while its waiter runs keeps that one."""

    def __init__(self) -> None:
        self._waiting: dict[str, asyncio.Task[None]] = {}

    def watch(self, key: str, provider: Any, sb: Any, process_id: str,
              then: Callable[[], None]) -> None:
        task = self._waiting.get(key)
        if task is not None and not task.done():
            return
        self._waiting[key] = asyncio.get_running_loop().create_task(
            self._wait(key, provider, sb, process_id, then), name=f"exit:{key}")

    async def _wait(self, key: str, provider: Any, sb: Any, process_id: str,
                    then: Callable[[], None]) -> None:
        try:
            if await process_ended(provider, sb, process_id):
                then()
        except Exception:  # the periodic look still sees the end
            log.exception("waiting for a process's end failed")
        finally:
            if self._waiting.get(key) is asyncio.current_task():
                del self._waiting[key]

    def waiting(self) -> list[str]:
        return [key for key, task in self._waiting.items() if not task.done()]

    async def close(self) -> None:
        """Cancel every waiter and let each close its pidfd."""
        tasks = list(self._waiting.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._waiting.clear()
