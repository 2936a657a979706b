"""Hands stored deliveries to the handlers, in the order they arrived.

The webhook route only stores; this loop does the rest. Deliveries stored but not
dispatched when the process stopped are dispatched on the next start, because the loop
reads from the store, not from memory.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from gidgethub import routing, sansio

from app.metrics import Metrics
from app.store import Delivery, Store

log = logging.getLogger(__name__)


class Dispatcher:
    def __init__(
        self,
        store: Store,
        router: routing.Router,
        metrics: Metrics,
        handler_kwargs: dict[str, Any],
    ):
        self.store = store
        self.router = router
        self.metrics = metrics
        self.handler_kwargs = handler_kwargs
        self._wake = asyncio.Event()
        self._stopping = False

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        while not self._stopping:
            self._wake.clear()
            batch = self.store.pending_deliveries()
            for delivery in batch:
                await self.dispatch(delivery)
            if not batch:
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout=5.0)
                except TimeoutError:
                    pass

    async def stop(self) -> None:
        self._stopping = True
        self._wake.set()

    async def dispatch(self, delivery: Delivery) -> None:
        event = sansio.Event(delivery.payload, event=delivery.event, delivery_id=delivery.id)
        fields = {"delivery_id": delivery.id, "event": delivery.event, "repo": delivery.repo,
                  "action": delivery.action}
        errors = []
        for handler in self.router.fetch(event):
            # One handler's failure never hides another's.
            try:
                await handler(event, delivery_id=delivery.id, **self.handler_kwargs)
            except Exception as exc:
                self.metrics.handler_errors.inc(handler=handler.__name__)
                errors.append(f"{handler.__name__}: {exc!r}"[:2000])
                log.exception("handler %s failed", handler.__name__, extra=fields)
        if errors:
            self.store.mark_delivery(delivery.id, "failed", "; ".join(errors))
        else:
            self.store.mark_delivery(delivery.id, "dispatched")
        log.info("dispatched", extra=fields)
