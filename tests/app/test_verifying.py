"""A verification runs as a task beside the step that started it: however that step
ends, the task's end is taken, never left for the loop to report."""

from __future__ import annotations

import asyncio
import gc

from app.runs.verify import Verifying


async def test_a_verification_that_failed_while_its_step_failed_is_not_left_to_the_loop():
    loop = asyncio.get_running_loop()
    reported: list[dict] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))

    async def fails() -> None:
        raise OSError("database or disk is full")

    verifying = Verifying(asyncio.ensure_future(fails()))
    await asyncio.wait({verifying.task})  # it ended before its step read it
    await verifying.stop()  # the step failed on its own, then stopped it
    del verifying
    gc.collect()
    assert reported == []


async def test_stop_cancels_one_still_running():
    verifying = Verifying(asyncio.ensure_future(asyncio.sleep(30)))
    await verifying.stop()
    assert verifying.task.cancelled()
