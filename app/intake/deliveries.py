"""Group commit for webhook deliveries.

Every delivery must be durable before GitHub hears 2xx. Under load, many requests are in
flight at once: they join one batch, one transaction stores them all (and records the
dispatcher's outcomes so far), and each request is answered when its batch is on disk.
An idle service pays one loop iteration.

Where the transaction runs depends on what its commit waits for. A SQLite commit waits
for nothing but the CPU (the WAL is synced at checkpoints, on a thread of the store's
own), so it runs on the event loop, as the store's other writes do: handing each batch
to a thread and back cost more CPU than the writes it moved (about 15% of a delivery's,
side by side in bench/webhook_intake.py). A PostgreSQL commit waits for the server's
fsync: it runs on one worker thread, and the event loop keeps reading the next requests
meanwhile.

Dispatch outcomes wait for the next batch of deliveries, or OUTCOME_LINGER_S, so a quiet
service writes one transaction per delivery, not two. A crash before they are written
dispatches those deliveries again, which handlers tolerate (intents are keyed by comment id).
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor

from app.database import SQLITE
from app.store import Delivery, Store

log = logging.getLogger(__name__)

# Well under the dispatcher's rescan (app/intake/dispatch.py RESCAN_S), which would take a
# delivery whose outcome is not yet written for one still to dispatch.
OUTCOME_LINGER_S = 0.5


class DeliveryWriter:
    def __init__(self, store: Store):
        self.store = store
        self._pending: list[tuple[Delivery, str | None, asyncio.Future[bool]]] = []
        self._outcomes: list[tuple[str, str, str | None]] = []
        self._flushing = False
        self._linger: asyncio.TimerHandle | None = None
        # One thread: writes keep their order and never wait on each other for the lock.
        self._thread = None if store.dialect == SQLITE else ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="hangar-writer")

    async def add(self, delivery: Delivery, raw: str | None) -> bool:
        """Store the delivery; False when its id was stored before."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._pending.append((delivery, raw, future))
        self._kick()
        return await future

    def record(self, outcomes: list[tuple[str, str, str | None]]) -> None:
        """Dispatch outcomes, written with the next batch or within OUTCOME_LINGER_S."""
        self._outcomes += outcomes
        if self._linger is None:
            self._linger = asyncio.get_running_loop().call_later(OUTCOME_LINGER_S, self._kick)

    def close(self) -> None:
        if self._linger is not None:
            self._linger.cancel()
        if self._thread is not None:
            self._thread.shutdown(wait=True)
        if self._outcomes:
            self.store.write_deliveries([], self._outcomes)

    def _kick(self) -> None:
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        if not self._flushing:
            self._flushing = True
            asyncio.get_running_loop().create_task(self._flush())

    async def _flush(self) -> None:
        try:
            while self._pending or self._outcomes:
                batch, self._pending = self._pending, []
                outcomes, self._outcomes = self._outcomes, []
                try:
                    await self._write(batch, outcomes)
                except Exception:
                    # One delivery the database refuses must not fail the others with it.
                    log.exception("a group commit failed; writing its parts one by one")
                    for item in batch:
                        await self._write([item], [])
                    if outcomes:
                        await self._write([], outcomes)
        finally:
            self._flushing = False

    async def _write(
        self,
        batch: list[tuple[Delivery, str | None, asyncio.Future[bool]]],
        outcomes: list[tuple[str, str, str | None]],
    ) -> None:
        """One transaction, its requests answered; raises only when it held several parts."""
        items = [(d, raw) for d, raw, _ in batch]
        try:
            if self._thread is None:
                fresh = self.store.write_deliveries(items, outcomes)
            else:
                fresh = await asyncio.get_running_loop().run_in_executor(
                    self._thread, self.store.write_deliveries, items, outcomes)
        except Exception as exc:
            if len(batch) + bool(outcomes) > 1:
                raise
            for _, _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            if outcomes:
                log.exception("recording dispatch outcomes failed; they are dispatched again")
            return
        for (_, _, future), new in zip(batch, fresh, strict=True):
            if not future.done():
                future.set_result(new)
