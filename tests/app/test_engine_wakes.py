"""The engine sleeps until a row is due or something wakes it: no fixed tick.

Each test runs the engine's own loop with rows of a small kind whose step records when it
ran; a loop that polled on a timer instead (1 s, as it once did) fails each of them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time

import pytest
from gidgethub.routing import Router
from gidgethub.sansio import Event
from pydantic import BaseModel

from app.engine import NEVER, Engine, RowKind
from app.metrics import Metrics
from app.models import Job, Run, RunStage, RunState, Thread
from app.store import Store
from app.wiring import register_concerns
from handlers import Handlers

MARGIN_S = 0.4  # how late "at once" and "when due" may be on a busy machine (a 1 s tick
# is later than that more often than not: each test takes several such samples)


async def until(predicate, timeout: float = 10.0) -> None:
    """Wait for what a test looks for, on a loaded machine as long as it takes."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "never happened"
        await asyncio.sleep(0.01)


class Row(BaseModel):
    id: str
    due_at: float | None = 0.0  # None: only when a wake names it
    then: str | None = None  # the row this row's step makes due
    fail: bool = False
    slow: float = 0.0  # seconds the step takes


class Steps:
    """A kind of rows whose step records (row id, when) and makes `then` due at once."""

    def __init__(self) -> None:
        self.taken: list[tuple[str, float]] = []

    async def step(self, engine: Engine, row_id: str) -> None:
        self.taken.append((row_id, time.time()))
        row = engine.store.get("row", row_id, Row)
        await asyncio.sleep(row.slow)
        if row.fail:
            raise RuntimeError("GitHub said no")
        engine.store.put("row", row_id, row.model_copy(update={"due_at": None}), active=True)
        if row.then:
            nxt = engine.store.get("row", row.then, Row)
            engine.store.put("row", row.then, nxt.model_copy(update={"due_at": 0.0}),
                             active=True)

    def times(self, row_id: str) -> list[float]:
        return [at for taken, at in self.taken if taken == row_id]


@pytest.fixture
async def running(settings):
    """Start an engine with the `row` kind; the test gets (engine, steps)."""
    engines = []

    async def start(rows: list[Row], *, rebuilding: bool = False,
                    **overrides) -> tuple[Engine, Steps]:
        changed = settings.model_copy(update=overrides)
        engine = Engine(settings=changed, store=Store(changed.db_path), auth=None,
                        metrics=Metrics(), tokens=None)
        engine.rebuilding = rebuilding
        steps = Steps()
        engine.register(RowKind("row", "row", Row, steps.step,
                                next_at=lambda row: NEVER if row.due_at is None else row.due_at,
                                waits_for_rebuild=rebuilding))
        for row in rows:
            engine.store.put("row", row.id, row, active=True)
        engines.append(engine)
        engine.start()
        await asyncio.sleep(0)
        return engine, steps

    yield start
    for engine in engines:
        await engine.stop()
        engine._loop_task.cancel()
        engine.store.close()


def later(seconds: float) -> float:
    return time.time() + seconds


async def test_an_idle_engine_with_many_waiting_rows_looks_once_and_steps_none(running):
    rows = [Row(id=f"row-{n}", due_at=later(3600)) for n in range(300)]
    engine, steps = await running(rows)
    await asyncio.sleep(1.5)
    assert steps.taken == []
    # The first look only: a loop on a 1 s timer would have looked again by now.
    assert engine.metrics.engine_looks.value() == 1


async def test_the_safety_poll_is_the_longest_sleep(running):
    engine, steps = await running([Row(id="row-1", due_at=later(3600))],
                                  engine_safety_poll_seconds=0.3)
    await asyncio.sleep(1.0)
    assert 3 <= engine.metrics.engine_looks.value() <= 5
    assert steps.taken == []


async def test_a_row_is_stepped_when_its_due_time_comes(running):
    now = time.time()
    due = {"row-a": now + 0.4, "row-b": now + 0.7, "row-c": now + 1.0}
    engine, steps = await running([Row(id=row_id, due_at=at) for row_id, at in due.items()])
    await until(lambda: all(steps.times(row_id) for row_id in due))
    for row_id, at in due.items():
        [taken] = steps.times(row_id)
        assert at <= taken < at + MARGIN_S, (row_id, taken - at)
    assert engine.metrics.engine_looks.value() <= 1 + 2 * len(due)


async def test_a_step_that_makes_another_row_due_is_seen_at_once(running):
    chain = [Row(id=f"row-{n}", due_at=None, then=f"row-{n + 1}" if n < 4 else None)
             for n in range(5)]
    engine, steps = await running([])
    await asyncio.sleep(0.1)  # after the first look, which takes the rows only a wake makes due
    for row in chain:
        engine.store.put("row", row.id, row, active=True)
    await asyncio.sleep(0.2)
    assert steps.taken == []  # written, but due only when woken
    began = time.time()
    engine.wake("row-0")
    await until(lambda: len(steps.taken) >= len(chain))
    # Five steps, each made due by the one before: on a 1 s timer this takes 4 s.
    assert [row_id for row_id, _ in steps.taken] == [row.id for row in chain]
    assert steps.taken[-1][1] - began < MARGIN_S * 2


async def test_a_look_after_a_step_or_a_write_reads_only_those_rows(running):
    """Each step's end and each write wakes the loop: with many rows waiting, reading them
    all at every wake is what once made the engine's looks cost more than the steps."""
    waiting = [Row(id=f"wait-{n}", due_at=later(3600)) for n in range(300)]
    chain = [Row(id=f"row-{n}", due_at=None, then=f"row-{n + 1}" if n < 4 else None)
             for n in range(5)]
    engine, steps = await running([*waiting, *chain])
    await until(lambda: len(steps.taken) == 5)  # the first look takes rows due only when woken
    full_looks = []
    read_all = engine.store.all

    def counted(kind, model, **kwargs):
        full_looks.append(kind)
        return read_all(kind, model, **kwargs)

    engine.store.all = counted  # the real store, its full reads counted
    looks = engine.metrics.engine_looks.value()
    engine.wake("row-0")
    await until(lambda: len(steps.taken) == 10)
    engine.store.put("row", "wait-7", Row(id="wait-7", due_at=0.0), active=True)
    await until(lambda: len(steps.times("wait-7")) == 1)
    await until(lambda: not engine._running("wait-7"))
    await asyncio.sleep(0.1)
    assert engine.metrics.engine_looks.value() > looks + 5  # every step's end was looked at
    assert full_looks == []
    engine.wake()  # a wake that names no row reads them all
    await until(lambda: full_looks == ["row"])


async def test_a_look_while_a_step_runs_does_not_take_its_row_again(running):
    """The row was due when its step began; what counts after is what the step wrote."""
    engine, steps = await running([Row(id="row-1", slow=0.3)])
    await asyncio.sleep(0.1)
    engine.wake()  # an event while the step runs: the loop looks
    await asyncio.sleep(0.6)
    assert len(steps.times("row-1")) == 1


async def test_a_handler_that_makes_a_row_due_is_seen_at_once(running):
    engine, steps = await running([Row(id="row-1", due_at=later(3600))])
    router = Router()

    @router.register("check_run", action="completed")
    async def finished_check(event, *, engine: Engine, **_):
        row = engine.store.get("row", "row-1", Row)
        engine.store.put("row", "row-1", row.model_copy(update={"due_at": 0.0}), active=True)

    await asyncio.sleep(0.1)
    began = time.time()
    await Handlers(router).dispatch(Event({"action": "completed"}, event="check_run",
                                          delivery_id="d-1"), engine=engine)
    await until(lambda: steps.times("row-1"))
    [taken] = steps.times("row-1")
    assert taken - began < MARGIN_S


async def test_a_write_from_another_thread_wakes_the_loop(running):
    engine, steps = await running([Row(id="row-1", due_at=later(3600))])
    await asyncio.sleep(0.1)
    began = time.time()
    writer = threading.Thread(target=engine.store.put,
                              args=("row", "row-1", Row(id="row-1", due_at=0.0)),
                              kwargs={"active": True})
    writer.start()
    writer.join()
    await until(lambda: steps.times("row-1"))
    [taken] = steps.times("row-1")
    assert taken - began < MARGIN_S


async def test_a_failing_row_is_looked_at_when_its_backoff_ends(running):
    _, steps = await running([Row(id="row-1", fail=True)], step_backoff_seconds=0.3)
    await until(lambda: len(steps.times("row-1")) >= 3)
    first, second, third = steps.times("row-1")[:3]
    # Held 0.3 s, then 0.6 s: each try comes when its hold ends, not at a timer's next beat.
    assert 0.3 <= second - first < 0.3 + MARGIN_S
    assert 0.6 <= third - second < 0.6 + MARGIN_S


async def test_a_row_due_only_when_woken_is_tried_again_when_its_backoff_ends(running):
    # Its step failed (GitHub down): no wake will come for it, yet it is tried again.
    _, steps = await running([Row(id="row-1", due_at=None, fail=True)],
                             step_backoff_seconds=0.3)
    await until(lambda: len(steps.times("row-1")) >= 3, timeout=15)
    first, second, third = steps.times("row-1")[:3]
    assert second - first >= 0.3 and third - second >= 0.6


THREAD = Thread(repo="acme/widgets", number=7, installation_id=1)


async def test_a_job_is_stepped_when_its_run_finishes_not_while_it_runs(settings):
    """The job's step looks at its runs: it is due when one of them finishes (and at the
    engine's start), never every few seconds while they run."""
    engine = Engine(settings=settings, store=Store(settings.db_path), auth=None,
                    metrics=Metrics(), tokens=None)
    register_concerns(engine)
    engine.chores.clear()  # the rebuild and redelivery chores ask GitHub: not here
    engine._at_start.clear()  # nor the reaping of sandboxes
    engine.rebuilding = False
    job_steps: list[float] = []

    async def job_step(_engine: Engine, _job_id: str) -> None:
        job_steps.append(time.time())

    async def run_step(engine: Engine, run_id: str) -> None:
        run = engine.get_run(run_id)
        if run.prompt == "finish":
            engine.patch_run(run_id, stage=RunStage.DONE, outcome="no_changes")
        else:  # watching an agent: look again soon
            engine.patch_run(run_id, retry_at=time.time() + 0.1)

    engine.kinds["job"] = dataclasses.replace(engine.kinds["job"], step=job_step)
    engine.kinds["run"] = dataclasses.replace(engine.kinds["run"], step=run_step)
    engine._kinds_by_table.update(job=engine.kinds["job"], run=engine.kinds["run"])
    job = engine.save_job(Job(thread=THREAD, requested_by="mona", prompt="fix it", title="t",
                              body="", clone_url="", base_branch="main"))
    running_run = engine.save_run(Run(job_id=job.id, prompt="keep going", branch="hangar/1",
                                      base_branch="main", state=RunState.RUNNING,
                                      retry_at=later(3600)))
    engine.start()
    try:
        await until(lambda: job_steps)
        assert len(job_steps) == 1  # the engine's start: a wake may have been lost with it
        engine.patch_run(running_run.id, retry_at=0.0)
        await asyncio.sleep(0.6)  # its run is stepped every 0.1 s; the job waits
        assert len(job_steps) == 1
        engine.save_run(Run(job_id=job.id, prompt="finish", branch="hangar/2",
                            base_branch="main"))
        began = time.time()
        await until(lambda: len(job_steps) >= 2)
        assert len(job_steps) == 2 and job_steps[1] - began < MARGIN_S * 2
    finally:
        await engine.stop()
        engine._loop_task.cancel()
        engine.store.close()


async def test_a_run_waiting_for_a_slot_is_woken_when_the_slot_frees_not_polled(step_engine):
    from types import SimpleNamespace

    from app import runs
    from sandbox.envspec import EnvSpec
    from sandbox.provider import SandboxError

    class NoLog:
        async def copy_out(self, *_args, **_kwargs):
            raise SandboxError("no agent log")

    engine = step_engine(None, provider=NoLog(), max_concurrent_agents=1)
    env = EnvSpec(name="default", harness="script", agent_script="true").model_dump()
    job = engine.save_job(Job(thread=THREAD, requested_by="mona", prompt="fix it", title="t",
                              body="", clone_url="", base_branch="main"))
    first = engine.save_run(Run(job_id=job.id, branch="hangar/1", base_branch="main", env=env,
                                state=RunState.RUNNING, queued_at=1.0))
    second = engine.save_run(Run(job_id=job.id, branch="hangar/2", base_branch="main", env=env,
                                 queued_at=2.0))
    woken: list[str] = []
    engine.wake = lambda *rows: woken.extend(rows)
    await runs.start_agent(engine, second)
    # No slot: it waits for the word that one came free (the slow poll is the fallback).
    waits = engine.get_run(second.id).retry_at - time.time()
    assert waits > engine.settings.poll_interval_seconds - 5
    assert woken == []
    await runs.agent_stopped(engine, first, SimpleNamespace(provider="local"), RunState.EXITED, 0)
    assert woken == [second.id]


def test_a_write_after_the_engines_loop_closed_wakes_nothing_and_raises_nothing(settings):
    # A step's last write can come as its coroutine is closed after the loop ended.
    engine = Engine(settings=settings, store=Store(settings.db_path), auth=None,
                    metrics=Metrics(), tokens=None)
    loop = asyncio.new_event_loop()
    engine._loop = loop
    loop.close()
    engine._note("row", "row-1")
    engine.wake("row-1")
    engine.store.close()


async def test_a_cancel_that_comes_with_a_wake_ends_the_loop(running):
    """kill -9 as the suite simulates it, and asyncio.run's end: the loop task is
    cancelled. A cancel that came in the same turn as a wake was dropped by Python
    3.11's wait_for, and the loop ran on for ever (a test once hung 20 minutes)."""
    for turns in range(6):  # the cancel lands at each point of the wake's way in
        engine, _ = await running([])
        await asyncio.sleep(0.05)  # the loop sleeps on its wake
        engine._wake.set()
        for _ in range(turns):
            await asyncio.sleep(0)
        engine._loop_task.cancel()
        done, _ = await asyncio.wait([engine._loop_task], timeout=5)
        assert done and engine._loop_task.cancelled(), f"cancelled {turns} turns in"


async def test_rows_that_wait_for_a_rebuild_keep_their_first_look_and_their_wakes(running):
    """Commands wait while a new database is rebuilt from GitHub. What would have made one
    of their rows due meanwhile (the engine's first look, a wake naming it) is kept: the
    row is due when the rebuild ends, not never."""
    engine, steps = await running([Row(id="row-1", due_at=None), Row(id="row-2", due_at=None)],
                                  rebuilding=True)
    await until(lambda: engine.metrics.engine_looks.value() >= 1)
    engine.wake("row-2")
    await until(lambda: engine.metrics.engine_looks.value() >= 2)
    assert steps.taken == []
    engine.rebuilding = False
    engine.wake()  # as the rebuild's end does
    await until(lambda: {"row-1", "row-2"} <= {row_id for row_id, _ in steps.taken})
