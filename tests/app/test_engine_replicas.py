"""Two engines on one PostgreSQL database: two replicas, each its own process's loop.

Each row is stepped by one replica at a time (its lease); a replica that dies keeps its
rows only until the lease runs out; a wake names a row to every replica; chores run on
the one replica that holds the leader lock; a run whose sandbox lives on one host is
stepped only by that host's replica.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from pydantic import BaseModel

from app.engine import NEVER, Chore, Engine, RowKind
from app.metrics import Metrics
from app.models import Rename, Run
from app.rows import host_of
from app.store import Store

LEASE_S = 2.0


class Row(BaseModel):
    id: str
    due_at: float | None = 0.0  # None: only when a wake names it
    slow: float = 0.0
    steps: int = 0


class Steps:
    """Who stepped which row when, and how many steps of a row ran at once."""

    def __init__(self) -> None:
        self.taken: list[tuple[str, str, float]] = []  # (replica, row, when)
        self.inside: dict[str, int] = {}
        self.overlaps = 0
        self.changed = asyncio.Event()

    def step_for(self, replica: str) -> Callable:
        async def step(engine: Engine, row_id: str) -> None:
            self.inside[row_id] = self.inside.get(row_id, 0) + 1
            self.overlaps += self.inside[row_id] > 1
            self.taken.append((replica, row_id, time.time()))
            self.changed.set()
            try:
                row = engine.store.get("row", row_id, Row)
                await asyncio.sleep(row.slow)
                engine.store.put("row", row_id, row.model_copy(
                    update={"due_at": None, "steps": row.steps + 1}), active=True)
            finally:
                self.inside[row_id] -= 1
        return step

    def by(self, row_id: str) -> list[str]:
        return [replica for replica, taken, _ in self.taken if taken == row_id]

    async def until(self, done: Callable[[], bool], timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            self.changed.clear()
            left = deadline - time.monotonic()
            assert left > 0, self.taken
            try:
                await asyncio.wait_for(self.changed.wait(), left)
            except TimeoutError:
                pass


@pytest.fixture
async def replicas(settings, postgres_url):
    """Start replicas a, b, … on one database; the test gets a start(name) function."""
    steps = Steps()
    engines: dict[str, Engine] = {}

    async def start(name: str, *, chores: list[str] | None = None) -> Engine:
        changed = settings.model_copy(update={
            "replica_id": name, "lease_seconds": LEASE_S, "data_dir": settings.data_dir / name,
            "engine_safety_poll_seconds": 30.0})
        engine = Engine(settings=changed, store=Store(postgres_url, owner=name), auth=None,
                        metrics=Metrics(), tokens=None)
        engine.register(RowKind("row", "row", Row, steps.step_for(name),
                                next_at=lambda row: NEVER if row.due_at is None else row.due_at))
        for chore in chores or []:
            async def run(_engine: Engine, chore: str = chore) -> None:
                steps.taken.append((name, chore, time.time()))
                steps.changed.set()
            engine.add_chore(Chore(chore, run, every=lambda _engine: 0.2))
        engines[name] = engine
        engine.start()
        await asyncio.sleep(0)
        return engine

    yield start, steps
    for engine in engines.values():
        if not engine._loop_task.done():
            await engine.stop()
            engine._loop_task.cancel()
        engine.store.close()


async def kill(engine: Engine) -> None:
    """What kill -9 leaves: no step ends, no lease is released, its connections go."""
    for task in [engine._loop_task, *engine._tasks.values(), *engine._replica_tasks]:
        task.cancel()
    await asyncio.gather(engine._loop_task, *engine._tasks.values(), *engine._replica_tasks,
                         return_exceptions=True)


async def test_each_due_row_is_stepped_once_by_one_replica(replicas):
    start, steps = replicas
    a = await start("a")
    for n in range(20):
        a.store.put("row", f"row-{n}", Row(id=f"row-{n}", slow=0.05), active=True)
    await start("b")
    a.wake()
    await steps.until(lambda: len(steps.taken) >= 20)
    await asyncio.sleep(0.5)  # a second step of any row would come by now
    assert sorted(row for _, row, _ in steps.taken) == sorted(f"row-{n}" for n in range(20))
    assert steps.overlaps == 0
    assert {replica for replica, _, _ in steps.taken} <= {"a", "b"}
    assert all(a.store.lease_of("row", f"row-{n}") == (None, None) for n in range(20))


async def test_a_wake_on_one_replica_reaches_a_row_only_the_other_can_take(replicas):
    start, steps = replicas
    a = await start("a")
    b = await start("b")
    a.store.put("row", "row-1", Row(id="row-1", due_at=None), active=True)
    await asyncio.sleep(0.3)  # both have looked once: the row is due only when woken
    steps.taken.clear()
    # a cannot lease the row now (b holds it, as if b's step of it ran), and wakes it.
    assert b.store.claim("row", ["row-1"], time.time() + 0.5) == {"row-1"}
    started = time.time()
    a.wake("row-1")
    await steps.until(lambda: steps.by("row-1"))
    # b was told by NOTIFY; a looked again once b's short lease had run out: either way,
    # the row's wake was not lost and it was stepped once, well before the safety poll.
    assert len(steps.by("row-1")) == 1 and time.time() - started < 10


async def test_a_replica_that_dies_mid_step_loses_its_rows_at_the_leases_end(replicas):
    start, steps = replicas
    a = await start("a")
    a.store.put("row", "row-1", Row(id="row-1", slow=60), active=True)
    a.wake()
    await steps.until(lambda: steps.by("row-1") == ["a"])
    b = await start("b")
    await asyncio.sleep(LEASE_S * 1.5)  # a renews its lease while its step runs
    assert steps.by("row-1") == ["a"]
    await kill(a)
    died = time.time()
    # The row's data says it is due: b takes it once a's lease is over.
    await steps.until(lambda: steps.by("row-1") == ["a", "b"])
    taken_at = steps.taken[-1][2]
    assert taken_at - died <= LEASE_S + 2, taken_at - died
    assert b.store.lease_of("row", "row-1")[0] == "b"


async def test_chores_run_on_the_leader_alone_and_move_when_it_dies(replicas):
    start, steps = replicas
    a = await start("a", chores=["reap"])
    await steps.until(lambda: steps.by("reap"))
    b = await start("b", chores=["reap"])
    await asyncio.sleep(1.0)
    assert set(steps.by("reap")) == {"a"}
    assert a.leading and not b.leading
    await kill(a)
    died = time.time()
    await steps.until(lambda: "b" in steps.by("reap"))
    assert time.time() - died < 10  # b tries for the lock every 2 s


async def test_a_run_whose_sandbox_lives_on_one_host_is_stepped_by_that_hosts_replica(
        replicas):
    start, _ = replicas
    a = await start("a")
    b = await start("b")
    run = Run(id="run-1", job_id="job-1", branch="hangar/1-ab", base_branch="main",
              sandbox={"id": "sb-1", "provider": "local",
                       "labels": {"hangar.instance": a.instance_id}})
    assert host_of(run) == a.instance_id != b.instance_id
    assert host_of(run.model_copy(update={"sandbox": {
        "id": "sb-1", "provider": "kubernetes", "labels": {}}})) is None
    b.save_run(run)  # written by b, still a's host's
    now = time.time() + LEASE_S
    assert b.store.claim("run", ["run-1"], now, host=b.instance_id) == set()
    assert a.store.claim("run", ["run-1"], now, host=a.instance_id) == {"run-1"}


class NamedRow(BaseModel):
    id: str
    repo: str
    wrote: str = ""


def follows(row: NamedRow, rename: Rename) -> NamedRow | None:
    if row.repo != rename.old:
        return None
    return row.model_copy(update={"repo": rename.new, "id": f"named-{rename.new}"})


async def test_a_rename_waits_for_the_lease_of_a_row_another_replica_steps(replicas):
    """A replica's step writes back the row it read; the rename another replica heard
    meanwhile moves the row once that lease is over, with what the step wrote, and
    leaves nothing under the old id."""
    start, steps = replicas
    a = await start("a")
    b = await start("b")
    async def step(engine: Engine, row_id: str) -> None:
        steps.taken.append((engine.settings.replica_id, row_id, time.time()))
        steps.changed.set()

    for engine in (a, b):
        engine.register(RowKind("named", "named", NamedRow, step, next_at=lambda row: NEVER,
                                follows_rename=follows))
    old_id, new_id = "named-acme/widgets", "named-acme/tools"
    a.store.put("named", old_id, NamedRow(id=old_id, repo="acme/widgets"), active=True)
    # b's step of the row runs (its lease), and reads it.
    lease_until = time.time() + LEASE_S  # long enough for the rename to come inside it
    assert b.store.claim("named", [old_id], lease_until) == {old_id}
    read = b.store.get("named", old_id, NamedRow)

    assert a.rename_repositories(Rename("acme/widgets", "acme/tools")) == []
    assert a.store.get("named", old_id, NamedRow) is not None  # not under b's step
    b.store.put("named", old_id, read.model_copy(update={"wrote": "b"}), active=True)
    b.store.release("named", old_id)

    # At the lease's end the rename moves it, and the moved row is woken and stepped.
    await steps.until(lambda: steps.by(new_id))
    assert a.store.get("named", old_id, NamedRow) is None
    moved = a.store.get("named", new_id, NamedRow)
    assert moved.repo == "acme/tools" and moved.wrote == "b"
    assert time.time() >= lease_until
