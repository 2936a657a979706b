"""Group commit for webhook deliveries.

Every delivery must be durable before GitHub hears 2xx. Under load, many requests are in
flight at once: they join one batch, one transaction stores them all, and each request is
answered when its batch is on disk. SQLite runs on a worker thread (it releases the GIL),
so the event loop keeps reading and checking the next requests meanwhile. An idle
service pays one loop iteration of latency.
"""

from __future__ import annotations

import asyncio

from app.store import Delivery, Store


class DeliveryWriter:
    def __init__(self, store: Store):
        self.store = store
        self._pending: list[tuple[Delivery, str | None, asyncio.Future[bool]]] = []
        self._flushing = False

    async def add(self, delivery: Delivery, raw: str | None) -> bool:
        """Store the delivery; False when its id was stored before."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._pending.append((delivery, raw, future))
        if not self._flushing:
            self._flushing = True
            asyncio.get_running_loop().create_task(self._flush())
        return await future

    async def _flush(self) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending, []
                try:
                    fresh = await asyncio.to_thread(
                        self.store.add_deliveries, [(d, raw) for d, raw, _ in batch])
                except Exception as exc:
                    for _, _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                for (_, _, future), new in zip(batch, fresh, strict=True):
                    if not future.done():
                        future.set_result(new)
        finally:
            self._flushing = False
