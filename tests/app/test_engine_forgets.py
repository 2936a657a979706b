"""What the engine keeps of a row only while it works on it: its step's task, and
`engine.lock(key)` (one holder at a time). A long-lived hangar kept both for every row
it ever stepped (the status comment takes a lock per job)."""

from __future__ import annotations

import asyncio

from pydantic import BaseModel

from app.engine import NEVER, Engine, RowKind
from app.metrics import Metrics
from app.store import Store


class Row(BaseModel):
    id: str


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


async def test_a_steps_task_is_kept_only_while_it_runs(settings):
    engine = Engine(settings=settings, store=Store(settings.db_path), auth=None,
                    metrics=Metrics(), tokens=None)
    stepped: list[str] = []
    hold = asyncio.Event()

    async def step(_engine: Engine, row_id: str) -> None:
        if row_id == "row-held":
            await hold.wait()
        stepped.append(row_id)

    engine.register(RowKind("row", "row", Row, step, next_at=lambda _row: NEVER))
    try:
        for n in range(50):
            engine._schedule(f"row-{n}", "row", step, f"row-{n}")
        engine._schedule("row-held", "row", step, "row-held")
        tasks = dict(engine._tasks)
        await asyncio.wait([task for key, task in tasks.items() if key != "row-held"])
        await asyncio.sleep(0)  # the tasks' ends are heard
        assert list(engine._tasks) == ["row-held"]  # still running: kept
        hold.set()
        await tasks["row-held"]
        await asyncio.sleep(0)
        assert engine._tasks == {}
        # A row stepped again takes its key afresh, and is forgotten again at its end.
        engine._schedule("row-1", "row", step, "row-1")
        await engine._tasks["row-1"]
        await asyncio.sleep(0)
        assert engine._tasks == {}
        assert stepped.count("row-1") == 2
    finally:
        engine.store.close()
