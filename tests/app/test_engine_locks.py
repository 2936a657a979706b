"""`engine.lock(key)`: one holder at a time, and nothing kept once no one holds or waits
for it (the status comment takes one per job: a long-lived hangar kept them all)."""

from __future__ import annotations

import asyncio

from app.engine import Engine
from app.metrics import Metrics
from app.store import Store


async def test_a_lock_has_one_holder_at_a_time_and_is_forgotten_when_none_wants_it(settings):
    engine = Engine(settings=settings, store=Store(settings.db_path), auth=None,
                    metrics=Metrics(), tokens=None)
    order: list[str] = []
    first_in = asyncio.Event()
    let_go = asyncio.Event()

    async def first() -> None:
        async with engine.lock("status:job-1"):
            order.append("first in")
            first_in.set()
            await let_go.wait()
            order.append("first out")

    async def second() -> None:
        await first_in.wait()
        async with engine.lock("status:job-1"):
            order.append("second in")

    try:
        tasks = [asyncio.create_task(first()), asyncio.create_task(second())]
        await first_in.wait()
        await asyncio.sleep(0.05)  # the second is waiting now, not holding it
        assert order == ["first in"]
        let_go.set()
        await asyncio.gather(*tasks)
        assert order == ["first in", "first out", "second in"]
        for n in range(100):
            async with engine.lock(f"status:job-{n}"):
                pass
        assert engine._locks == {}

        # A holder cancelled while it waits lets its place go too.
        async with engine.lock("status:job-1"):
            waiting = asyncio.create_task(second())
            await asyncio.sleep(0.05)
            waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        assert engine._locks == {}
    finally:
        engine.store.close()
