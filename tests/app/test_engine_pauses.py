"""A stop does not wait out a step's pause before it asks GitHub again (a retry's backoff,
the spacing between writes): the step holds nothing in flight, so it is cancelled at
once. A step at work is still given its grace."""

from __future__ import annotations

import asyncio
import time

import aiohttp

from app.engine import Engine
from app.github.client import AppAuth, RetryPolicy
from app.metrics import Metrics
from app.pauses import pause
from app.store import Store
from tests.app.conftest import private_key_pem

GRACE_S = 20.0


def engine_for(settings) -> Engine:
    changed = settings.model_copy(update={"shutdown_grace_seconds": GRACE_S})
    return Engine(settings=changed, store=Store(changed.db_path), auth=None,
                  metrics=Metrics(), tokens=None)


async def stopped_in(engine: Engine) -> float:
    """Stop the engine; how long the stop took."""
    started = time.monotonic()
    try:
        await engine.stop()
        return time.monotonic() - started
    finally:
        engine._loop_task.cancel()
        engine.store.close()


async def test_a_stop_cancels_a_pausing_step_at_once_and_waits_for_one_at_work(settings):
    engine = engine_for(settings)
    engine.start()
    seen: list[str] = []
    working = asyncio.Event()

    async def pausing(_engine, row_id: str) -> None:
        seen.append(f"{row_id} paused")
        await pause(3600)
        seen.append(f"{row_id} resumed")

    async def at_work_then_pausing(_engine, row_id: str) -> None:
        working.set()
        await asyncio.sleep(0.3)  # its work: a call that is in flight as the stop begins
        seen.append(f"{row_id} worked")
        await pause(3600)  # a pause that begins once the stop has begun ends at once
        seen.append(f"{row_id} resumed")

    async def at_work(_engine, row_id: str) -> None:
        await asyncio.sleep(0.3)
        seen.append(f"{row_id} worked")

    engine._schedule("row:a", "test", pausing, "a")
    engine._schedule("row:b", "test", at_work_then_pausing, "b")
    engine._schedule("row:c", "test", at_work, "c")
    tasks = dict(engine._tasks)
    await working.wait()
    took = await stopped_in(engine)
    assert sorted(seen) == ["a paused", "b worked", "c worked"]
    assert tasks["row:a"].cancelled() and tasks["row:b"].cancelled()
    assert not tasks["row:c"].cancelled()
    assert took < GRACE_S / 2, took


async def test_a_stop_ends_a_step_backing_off_from_an_unreachable_github(settings):
    """The GitHub client's own backoff is such a pause: here, minting a token from a
    GitHub that refuses connections, with 30 s between tries."""
    engine = engine_for(settings)
    engine.start()
    tried = asyncio.Event()
    async with aiohttp.ClientSession() as session:
        auth = AppAuth(1, private_key_pem().decode(), api_url="http://127.0.0.1:9/api/v3",
                       session=session,
                       retry=RetryPolicy(attempts=3, base_delay_s=30, max_delay_s=30))

        async def asks_github(_engine, _row_id: str) -> None:
            tried.set()
            await auth.installation_token(1)

        engine._schedule("row:gh", "test", asks_github, "gh")
        task = engine._tasks["row:gh"]
        await tried.wait()  # its pause begins before or after the stop: both end it
        took = await stopped_in(engine)
    assert task.cancelled()
    assert took < GRACE_S / 2, took


async def test_outside_a_step_a_pause_is_a_sleep():
    started = time.monotonic()
    await pause(0.05)
    assert time.monotonic() - started >= 0.05
