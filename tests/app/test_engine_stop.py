"""A stopping engine gives its in-flight steps and then its replica tasks one shutdown
grace between them, not one each: what runs hangar (Kubernetes: 30 s by default) kills
a stop that takes longer, cutting what the grace was for."""

from __future__ import annotations

import asyncio
import time

from app.engine import CANCEL_MOMENT_S, Engine
from app.metrics import Metrics
from app.store import Store

GRACE_S = 1.0


async def test_a_stop_takes_one_grace_for_its_steps_and_its_replica_tasks(settings):
    changed = settings.model_copy(update={"shutdown_grace_seconds": GRACE_S})
    engine = Engine(settings=changed, store=Store(changed.db_path), auth=None,
                    metrics=Metrics(), tokens=None)
    engine.start()

    async def slow_to_take_its_cancel() -> None:  # a call blocked in the database's driver
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            await asyncio.sleep(GRACE_S)
            raise

    # A step that outlives the grace, and a replica task (listen, lead, leases) as above.
    step = asyncio.create_task(asyncio.sleep(3600))
    engine._tasks["row:hung"] = step
    engine._replica_tasks = [asyncio.create_task(slow_to_take_its_cancel())]
    started = time.monotonic()
    try:
        await engine.stop()
        took = time.monotonic() - started
    finally:
        engine._loop_task.cancel()
        engine.store.close()
    await asyncio.sleep(0)
    assert step.cancelled()
    # one grace and the moment a cancel is given; a second grace would make it 2 s
    assert GRACE_S <= took < GRACE_S + CANCEL_MOMENT_S + 0.6, took
    for task in engine._replica_tasks:  # it is still taking its first cancel: end it now
        task.cancel()
    await asyncio.wait(engine._replica_tasks, timeout=2 * GRACE_S)
