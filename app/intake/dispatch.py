"""Hands stored deliveries to the handlers, in the order they arrived.

The webhook route stores a delivery and then passes it here in memory, so the common
path never reads the database back. The database stays the truth: at start, and
whenever the in-memory queue runs dry, the loop also picks up deliveries stored but not
dispatched (after a crash, say). Outcomes are recorded in one transaction per batch;
a crash before that re-dispatches the batch, which handlers tolerate (intents are keyed
by comment id).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gidgethub import sansio

from app.intake.deliveries import DeliveryWriter
from app.metrics import Metrics
from app.store import Delivery, Store

if TYPE_CHECKING:
    from handlers import Handlers

log = logging.getLogger(__name__)

RESCAN_S = 5.0


class Dispatcher:
    def __init__(
        self,
        store: Store,
        router: Handlers,
        metrics: Metrics,
        handler_kwargs: dict[str, Any],
        writer: DeliveryWriter,
    ):
        self.store = store
        self.writer = writer
        self.router = router
        self.metrics = metrics
        self.handler_kwargs = handler_kwargs
        self._queue: asyncio.Queue[Delivery] = asyncio.Queue()
        self._queued: set[str] = set()
        self._stopping = False

    def hears(self, event: str, payload: Mapping[str, Any]) -> bool:
        """Whether any handler listens for this event and action (the routers read only
        the action, which intake knows without parsing the payload)."""
        return bool(self.router.fetch(sansio.Event(payload, event=event, delivery_id="")))

    def submit(self, delivery: Delivery) -> None:
        """A freshly stored delivery, parsed already."""
        self._queued.add(delivery.id)
        self._queue.put_nowait(delivery)

    def idle(self) -> bool:
        """Every delivery submitted has been dispatched."""
        return not self._queued and self._queue.empty()

    def wake(self) -> None:
        """Look at the database now (for deliveries stored by someone else)."""
        self._queue.put_nowait(_RESCAN)

    async def run(self) -> None:
        self._rescan()
        while not self._stopping:
            try:
                async with asyncio.timeout(RESCAN_S):  # not wait_for: it can drop a cancel
                    first = await self._queue.get()
            except TimeoutError:
                self._rescan()
                continue
            batch = [first]
            while not self._queue.empty() and len(batch) < 256:
                batch.append(self._queue.get_nowait())
            try:
                await self._dispatch_batch(batch)
            except Exception:
                # The store is the truth: what was not marked is dispatched again later.
                log.exception("dispatching a batch failed")
                self._queued.clear()

    async def _dispatch_batch(self, batch: list[Delivery]) -> None:
        outcomes = []
        for delivery in batch:
            if delivery is _RESCAN:
                self._rescan()
                continue
            outcomes.append(await self.dispatch(delivery))
            self._queued.discard(delivery.id)
        if outcomes:
            # Written with the next batch of new deliveries, off the loop.
            self.writer.record(outcomes)

    async def stop(self) -> None:
        self._stopping = True
        self._queue.put_nowait(_RESCAN)

    def _rescan(self) -> None:
        for delivery in self.store.pending_deliveries():
            if delivery.id not in self._queued:
                self.submit(delivery)

    async def dispatch(self, delivery: Delivery) -> tuple[str, str, str | None]:
        """Run every handler for one delivery; (id, state, error) to record."""
        event = sansio.Event(delivery.payload, event=delivery.event, delivery_id=delivery.id)
        fields = {"delivery_id": delivery.id, "event": delivery.event, "repo": delivery.repo,
                  "action": delivery.action}
        # Every handler runs, whatever one raises (handlers.Handlers.dispatch).
        try:
            await self.router.dispatch(event, delivery_id=delivery.id, parts=delivery.parts,
                                       metrics=self.metrics, **self.handler_kwargs)
        except Exception as exc:
            log.warning("a handler failed", extra={**fields, "error": str(exc)[:500]})
            return delivery.id, "failed", str(exc) or repr(exc)
        log.debug("dispatched", extra=fields)
        return delivery.id, "dispatched", None


_RESCAN: Any = object()
