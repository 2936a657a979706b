"""Catching missed webhooks: GitHub does not retry a failed delivery, so hangar asks.

Every `redelivery_interval_seconds` hangar lists its App's recent deliveries
(`GET /app/hook/deliveries`) and asks GitHub to deliver again
(`POST /app/hook/deliveries/{id}/attempts`) each one that failed and that hangar has not
stored — while hangar was down, say, or unreachable. A delivery is asked for at most
MAX_ASKS times. GitHub keeps deliveries for three days; hangar looks back as far as
`redelivery_window_hours`.

Deliveries hangar has handled are forgotten after `delivery_retention_days`
(`forget_old_deliveries`), so that their payloads do not fill the database.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from pydantic import BaseModel

if TYPE_CHECKING:
    from app.github.reads import GitHubReads
    from app.settings import Settings
    from app.store import Store

log = logging.getLogger(__name__)

MAX_ASKS = 3
PAGE = 100
MAX_PAGES = 20
FORGET_BATCH = 5_000  # deliveries deleted in one transaction


class RedeliveryContext(Protocol):
    """What catching missed webhooks uses of the engine, and nothing more (mypy checks
    `Engine` against it where app/wiring.py adds the chores): the App's client and JWT
    through `github`, the deliveries and asks in the store, and the settings (how often,
    how far back, how long deliveries are kept)."""

    settings: Settings
    store: Store
    github: GitHubReads


class Asked(BaseModel):
    guid: str
    asks: int = 0
    last_at: float = 0.0


def missed(deliveries: list[dict], stored: set[str], since: float) -> list[dict]:
    """Failed deliveries since `since` whose guid never reached hangar, oldest first.

    A guid counts as delivered if any attempt with it succeeded (a redelivery keeps it).
    """
    ok = {d["guid"] for d in deliveries if 200 <= int(d.get("status_code") or 0) < 300}
    chosen: dict[str, dict] = {}
    for d in deliveries:
        if d["guid"] in ok or d["guid"] in stored:
            continue
        if _at(d) < since:
            continue
        # The first attempt stands for the guid; GitHub redelivers by any attempt's id.
        if d["guid"] not in chosen or _at(d) < _at(chosen[d["guid"]]):
            chosen[d["guid"]] = d
    return sorted(chosen.values(), key=_at)


def _at(delivery: dict) -> float:
    return datetime.fromisoformat(delivery["delivered_at"].replace("Z", "+00:00")).timestamp()


async def catch_up(engine: RedeliveryContext) -> int:
    """Ask GitHub to redeliver what hangar missed; how many it asked for."""
    settings = engine.settings
    since = time.time() - settings.redelivery_window_hours * 3600
    gh = await engine.github.app_client()
    jwt = engine.github.jwt()
    recent: list[dict] = []
    # Newest first; GitHub pages with a cursor in the Link header, which getiter follows.
    async for delivery in gh.getiter(f"/app/hook/deliveries?per_page={PAGE}", jwt=jwt):
        if _at(delivery) < since or len(recent) >= PAGE * MAX_PAGES:
            break
        recent.append(delivery)
    guids = {d["guid"] for d in recent}
    stored = {g for g in guids if engine.store.delivery(g) is not None}
    asked = 0
    for delivery in missed(recent, stored, since):
        record = engine.store.get("redelivery", delivery["guid"], Asked) or Asked(
            guid=delivery["guid"])
        if record.asks >= MAX_ASKS:
            continue
        await gh.post(f"/app/hook/deliveries/{delivery['id']}/attempts", data={}, jwt=jwt)
        record.asks += 1
        record.last_at = time.time()
        engine.store.put("redelivery", record.guid, record, active=record.asks < MAX_ASKS)
        asked += 1
        log.info("asked GitHub to redeliver a missed %s delivery", delivery.get("event"),
                 extra={"delivery_id": delivery["guid"], "event": delivery.get("event")})
    return asked


async def forget_old_deliveries(engine: RedeliveryContext) -> int:
    """Delete handled deliveries older than the retention, a batch at a time off the
    event loop; how many."""
    before = time.time() - engine.settings.delivery_retention_days * 86_400
    forgotten = 0
    while True:
        batch = await asyncio.to_thread(engine.store.forget_deliveries, before, FORGET_BATCH)
        forgotten += batch
        if batch < FORGET_BATCH:
            break
    if forgotten:
        log.info("forgot %d deliveries older than %g days", forgotten,
                 engine.settings.delivery_retention_days)
    return forgotten
