"""Signed webhook deliveries, posted in the background and recorded.

A REST call that causes an event only queues it; one worker posts deliveries in the
order they happened, like GitHub's hookshot, and records each request and response.
With a `Disorder` set, it posts them as GitHub may: some twice (the same
X-GitHub-Delivery) and out of order within a short window.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import random
import time
import uuid
from dataclasses import dataclass, replace
from typing import Any

import aiohttp

from fakehub.state import App, Delivery, Store, now

log = logging.getLogger("fakehub.webhooks")

# GitHub gives a receiver 10 seconds before recording the delivery as failed.
DELIVERY_TIMEOUT = 10.0

# The node of this fakehub's delivery ids: random, with the multicast bit RFC 9562 asks of
# a node that is no network card's address.
_NODE = random.getrandbits(48) | 1 << 40


def delivery_guid() -> str:
    """An X-GitHub-Delivery as GitHub makes it: a time-based UUID (version 1), as every
    delivery id in GitHub's REST description is (0b989ba4-242f-11e5-81e1-…,
    58474f00-b361-11eb-836d-…). Ids made close in time begin alike, so a receiver that
    keys its deliveries by id writes them close together."""
    return str(uuid.uuid1(node=_NODE))


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Disorder:
    """How far deliveries stray from "once each, in order" (GitHub promises neither)."""

    duplicate_rate: float = 0.0  # share of deliveries posted a second time, same GUID
    reorder_window: float = 0.0  # seconds; deliveries queued within it go out shuffled
    seed: int = 0

    @property
    def on(self) -> bool:
        return self.duplicate_rate > 0 or self.reorder_window > 0


class Deliverer:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.disorder = Disorder()
        self._random = random.Random(0)
        self._queue: asyncio.Queue[Delivery] = asyncio.Queue()
        self._worker: asyncio.Task | None = None
        self._session: aiohttp.ClientSession | None = None
        self._idle = asyncio.Event()
        self._idle.set()

    async def start(self) -> None:
        self._session = aiohttp.ClientSession()
        self._worker = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._worker:
            self._worker.cancel()
            try:
                await self._worker
            except asyncio.CancelledError:
                pass
        if self._session:
            await self._session.close()

    def enqueue(
        self,
        app: App,
        event: str,
        payload: dict[str, Any],
        *,
        installation_id: int | None,
        repository_id: int | None,
    ) -> Delivery:
        body = json.dumps(payload).encode()
        guid = delivery_guid()
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "GitHub-Hookshot/fakehub",
            "X-GitHub-Event": event,
            "X-GitHub-Delivery": guid,
            "X-GitHub-Hook-ID": str(app.id),
            "X-GitHub-Hook-Installation-Target-Type": "integration",
            "X-GitHub-Hook-Installation-Target-ID": str(app.id),
            "X-Hub-Signature-256": signature(app.webhook_secret, body),
            "X-Hub-Signature": "sha1="
            + hmac.new(app.webhook_secret.encode(), body, hashlib.sha1).hexdigest(),
        }
        delivery = Delivery(
            id=self.store.next_id(),
            guid=guid,
            event=event,
            action=payload.get("action"),
            app_id=app.id,
            installation_id=installation_id,
            repository_id=repository_id,
            body=body,
            request_headers=headers,
            delivered_at=now(),
        )
        self.store.deliveries.append(delivery)
        self._submit(delivery)
        return delivery

    def redeliver(self, guid: str) -> Delivery:
        """Post a recorded delivery again, with the same X-GitHub-Delivery."""
        original = next((d for d in self.store.deliveries if d.guid == guid), None)
        if original is None:
            raise KeyError(guid)
        again = Delivery(
            id=self.store.next_id(),
            guid=original.guid,
            event=original.event,
            action=original.action,
            app_id=original.app_id,
            installation_id=original.installation_id,
            repository_id=original.repository_id,
            body=original.body,
            request_headers=dict(original.request_headers),
            delivered_at=now(),
            redelivery=True,
        )
        self.store.deliveries.append(again)
        self._submit(again)
        return again

    def set_disorder(self, disorder: Disorder) -> None:
        self.disorder = disorder
        self._random = random.Random(disorder.seed)

    def _submit(self, delivery: Delivery) -> None:
        self._idle.clear()
        self._queue.put_nowait(delivery)

    async def wait_idle(self) -> None:
        await self._idle.wait()

    async def _run(self) -> None:
        while True:
            batch = [await self._queue.get()]
            if self.disorder.reorder_window > 0:
                await asyncio.sleep(self.disorder.reorder_window)
            while not self._queue.empty():
                batch.append(self._queue.get_nowait())
            for delivery in self._disordered(batch):
                try:
                    await self._post(delivery)
                except Exception:  # one bad delivery must not stop the others
                    log.exception("delivery %s failed", delivery.guid)
            for _ in batch:
                self._queue.task_done()
            if self._queue.empty():
                self._idle.set()

    def _disordered(self, batch: list[Delivery]) -> list[Delivery]:
        """The batch in the order it goes out: shuffled, with some deliveries twice."""
        if not self.disorder.on:
            return batch
        out = list(batch)
        if self.disorder.reorder_window > 0:
            self._random.shuffle(out)
        for delivery in batch:
            if self._random.random() < self.disorder.duplicate_rate:
                again = replace(delivery, id=self.store.next_id(), delivered_at=now(),
                                request_headers=dict(delivery.request_headers))
                self.store.deliveries.append(again)
                # the second copy comes later, sometimes after deliveries queued behind it
                first = out.index(delivery)
                out.insert(self._random.randint(first + 1, len(out)), again)
        return out

    async def _post(self, delivery: Delivery) -> None:
        app = self.store.apps[delivery.app_id]
        url = app.webhook_url
        if not url or self._session is None:
            delivery.error = "no webhook URL configured"
            return
        started = time.monotonic()
        try:
            async with self._session.post(
                url,
                data=delivery.body,
                headers=delivery.request_headers,
                timeout=aiohttp.ClientTimeout(total=DELIVERY_TIMEOUT),
            ) as resp:
                delivery.status_code = resp.status
                delivery.response_body = (await resp.text(errors="replace"))[:4096]
        except TimeoutError:
            delivery.error = "timed out"
        except aiohttp.ClientError as exc:
            delivery.error = f"{type(exc).__name__}: {exc}"
        delivery.duration = time.monotonic() - started
        log.info(
            "delivered %s %s to app %s: %s",
            delivery.event,
            delivery.guid,
            app.id,
            delivery.status_code or delivery.error,
        )
