"""No step retries in a tight loop: a failing row is held back, twice as long each time,
and after MAX_STEP_FAILURES it ends in a state that says what happened."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from app.creates import CreateInFlight
from app.engine import MAX_STEP_FAILURES, Engine, backoff_delay
from app.github.client import RateLimited
from app.landing import LandRequest, LandState, merge_answer
from app.metrics import Metrics
from app.models import Intent, Thread
from app.store import Store
from app.wiring import register_concerns


@pytest.fixture
def engine(settings):
    engine = Engine(settings=settings, store=Store(settings.db_path), auth=None,
                    metrics=Metrics(), tokens=None)
    register_concerns(engine)
    return engine


THREAD = Thread(repo="acme/widgets", number=7, installation_id=1, is_pr=True)


async def failing(engine: Engine, row_id: str) -> None:
    raise RuntimeError("GitHub said no")


def test_backoff_doubles_up_to_five_minutes():
    assert [backoff_delay(n) for n in (1, 2, 3, 4)] == [2, 4, 8, 16]
    assert backoff_delay(20) == 300


async def test_a_failing_intent_is_held_back_then_ended(engine):
    engine.save_intent(Intent(id="comment-1-0", thread=THREAD, comment_id=1, author="mona",
                              command="run", args={"prompt": "x"}))
    for n in range(1, MAX_STEP_FAILURES):
        await engine._guarded("intent", failing, "comment-1-0")
        held = engine.held_until("comment-1-0") - time.time()
        assert backoff_delay(n) - 1 < held <= backoff_delay(n)
        # While held, scheduling does not start the step again.
        engine._schedule("comment-1-0", "intent", failing, "comment-1-0")
        assert "comment-1-0" not in engine._tasks
    await engine._guarded("intent", failing, "comment-1-0")
    ended = engine.store.get("intent", "comment-1-0", Intent)
    assert ended.state == "done" and "GitHub said no" in ended.outcome


async def test_a_failing_land_step_ends_failed_with_the_reason(engine):
    request = LandRequest(id="land-acme-widgets-7", job_id="job-1", repo="acme/widgets",
                          installation_id=1, pr_number=7, base="main", branch="hangar/7",
                          requested_by="mona", state=LandState.UPDATING)
    engine.store.put("land", request.id, request, active=True)
    for _ in range(MAX_STEP_FAILURES):
        await engine._guarded("land", failing, request.id)
    ended = engine.store.get("land", request.id, LandRequest)
    assert ended.state == LandState.FAILED
    assert "stopped trying after repeated errors" in ended.reason
    assert "/hangar land" in ended.reason
    # The error's own words are the job's timeline's, not the status comment's.
    assert "GitHub said no" not in ended.reason
    assert any("GitHub said no" in what for _at, what in engine.store.notes("job-1"))


async def test_a_failing_job_step_ends_the_job_failed_with_the_reason(engine):
    from app.models import Job, JobState

    job = engine.save_job(Job(thread=THREAD, requested_by="mona", prompt="x",
                              clone_url="u", base_branch="main"))
    for _ in range(MAX_STEP_FAILURES - 1):
        await engine._guarded("job", failing, job.id)
    assert engine.get_job(job.id).state == JobState.ACTIVE  # held back, not yet given up
    await engine._guarded("job", failing, job.id)
    assert engine.get_job(job.id).state == JobState.FAILED
    assert any("GitHub said no" in what for _at, what in engine.store.notes(job.id))

@pytest.mark.parametrize("wait", [
    lambda until: RateLimited(until, "GitHub answered 403: rate limited"),
    lambda until: CreateInFlight("a status comment", until),
], ids=["rate limit", "another replica's create"])
async def test_a_wait_holds_until_its_end_without_counting(engine, caplog, wait):
    """A rate limit is a wait GitHub asks for, and another replica's create still on its
    way one app.creates asks for, not failures: no error is logged or counted for them
    (an operator's alert on step errors would fire on every busy minute)."""
    reset = time.time() + 1800

    async def limited(engine: Engine, row_id: str) -> None:
        raise wait(reset)

    caplog.set_level("INFO", logger="app.engine")
    for _ in range(MAX_STEP_FAILURES + 2):
        await engine._guarded("autofix", limited, "autofix-x")
    assert engine.held_until("autofix-x") == reset
    assert engine._failures["autofix-x"][0] == 0
    assert engine.metrics.engine_step_errors.value(kind="autofix") == 0
    said = [r for r in caplog.records if r.name == "app.engine"]
    assert said and all(r.levelname == "INFO" and not r.exc_info for r in said)
    assert said[0].getMessage().startswith(f"autofix step waits: {wait(reset)}")


async def test_success_clears_the_hold(engine):
    await engine._guarded("intent", failing, "comment-2-0")
    assert engine.held_until("comment-2-0") > time.time()

    async def fine(engine: Engine, row_id: str) -> None:
        await asyncio.sleep(0)

    await engine._guarded("intent", fine, "comment-2-0")
    assert engine.held_until("comment-2-0") == 0


@pytest.mark.parametrize(("status", "message", "meaning"), [
    (405, "Base branch was modified. Review and try the merge again.", "base_moved"),
    (405, "Changes must be made through the merge queue", "queue"),
    (405, "Squash merges are not allowed on this repository.", "method"),
    (405, "Merge commits are not allowed on this repository.", "method"),
    (405, "Repository rule violations found\n\nAt least 1 approving review is required",
     "rejected"),
    (409, "Head branch was modified. Review and try the merge again.", "head_moved"),
    (403, "refusing to allow a GitHub App to create or update workflow "
          "`.github/workflows/ci.yml` without `workflows` permission", "workflows"),
    (403, "Resource not accessible by integration", None),
    (422, "Validation Failed", None),
])
def test_merge_answers_are_classified(status, message, meaning):
    assert merge_answer(status, message) == meaning


# -- a store that cannot be written (a full disk) -------------------------------------


def full_disk(engine: Engine, monkeypatch) -> None:
    import sqlite3

    def refuse(*_args, **_kwargs):
        raise sqlite3.OperationalError("database or disk is full")

    for write in ("put", "put_if_version", "update", "note"):
        monkeypatch.setattr(engine.store, write, refuse)


@pytest.mark.parametrize("kind", ["run", "intent", "land"])
async def test_a_step_whose_failure_cannot_be_recorded_is_held_back_in_memory(
        engine, monkeypatch, kind):
    """The run counts its failures in its own row, the others in the engine: when that
    write fails too, the hold still grows and no exception leaves the step's task."""
    from app.models import Job, Run

    job = engine.save_job(Job(thread=THREAD, requested_by="mona", prompt="x",
                              clone_url="u", base_branch="main"))
    run = engine.save_run(Run(job_id=job.id, branch="hangar/7-x", base_branch="main"))
    engine.save_intent(Intent(id="comment-3-0", thread=THREAD, comment_id=3, author="mona",
                              command="run", args={"prompt": "x"}))
    engine.store.put("land", "land-1", LandRequest(
        id="land-1", job_id=job.id, repo="acme/widgets", installation_id=1, pr_number=7,
        base="main", branch="hangar/7", requested_by="mona", state=LandState.UPDATING),
        active=True)
    row_id = {"run": run.id, "intent": "comment-3-0", "land": "land-1"}[kind]
    full_disk(engine, monkeypatch)
    holds = []
    for _ in range(MAX_STEP_FAILURES + 1):
        await engine._guarded(kind, failing, row_id)  # raises nothing
        holds.append(engine.held_until(row_id) - time.time())
        engine._schedule(row_id, kind, failing, row_id)
        assert row_id not in engine._tasks  # held: not started again
    assert all(later > earlier for earlier, later in itertools.pairwise(holds))
    assert holds[0] > 1.0


async def test_the_loop_does_not_spin_on_a_full_disk(engine, monkeypatch):
    """A run's step that fails while nothing can be written: the engine's loop takes it a
    handful of times in two holds, not hundreds, and no task ends with an exception."""
    from app.models import Job, Run

    hold_s = 0.25  # the first hold; the second is twice as long
    monkeypatch.setattr(engine, "settings",
                        engine.settings.model_copy(update={"step_backoff_seconds": hold_s}))

    job = engine.save_job(Job(thread=THREAD, requested_by="mona", prompt="x",
                              clone_url="u", base_branch="main"))
    run = engine.save_run(Run(job_id=job.id, branch="hangar/7-x", base_branch="main"))
    calls = []

    async def failing_run(engine: Engine, row_id: str) -> None:
        calls.append(row_id)
        engine.patch_run(row_id, retry_at=0.0)  # the write a real step makes first

    monkeypatch.setitem(engine.kinds, "run", engine.kinds["run"].__class__(
        **{**engine.kinds["run"].__dict__, "step": failing_run}))
    full_disk(engine, monkeypatch)
    unretrieved = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: unretrieved.append(context))
    ended = []  # the steps' tasks, as the engine forgets each at its end
    forget = engine._forget_task
    monkeypatch.setattr(engine, "_forget_task",
                        lambda key, t: (ended.append(t), forget(key, t)))
    task = engine.start()
    deadline = time.monotonic() + 30
    while not calls:  # the first look, however late a loaded machine makes it
        assert time.monotonic() < deadline, "the run was never stepped"
        await asyncio.sleep(0.01)
    await asyncio.sleep(hold_s * 2)
    await engine.stop()
    task.cancel()
    assert 1 <= calls.count(run.id) <= 3
    assert ended and all(not t.cancelled() and t.exception() is None for t in ended)
    assert unretrieved == []


async def test_a_step_that_finds_its_installation_gone_stops_all_its_work(settings):
    """Its webhook was missed (hangar was down): the first step GitHub refuses a token
    stops every job of that installation, as the webhook would have, and no error is
    counted for it."""
    from app.github.client import UNINSTALLED, AppAuth, InstallationUnavailable
    from app.models import Job, JobState

    auth = AppAuth(1, "", api_url="http://127.0.0.1:9", session=None)
    engine = Engine(settings=settings, store=Store(settings.db_path), auth=auth,
                    metrics=Metrics(), tokens=None)
    register_concerns(engine)
    job = engine.save_job(Job(thread=THREAD, requested_by="mona", prompt="x",
                              clone_url="u", base_branch="main"))
    other = engine.save_job(Job(thread=Thread(repo="globex/tools", number=1,
                                              installation_id=2),
                                requested_by="mona", prompt="x", clone_url="u",
                                base_branch="main"))

    async def refused(engine: Engine, row_id: str) -> None:
        raise InstallationUnavailable(1, UNINSTALLED)

    await engine._guarded("job", refused, job.id)
    stopped = engine.get_job(job.id)
    assert stopped.state == JobState.CANCELLED
    assert stopped.off_limits == "hangar's GitHub App was uninstalled on acme"
    assert engine.get_job(other.id).state == JobState.ACTIVE
    assert auth.unavailable[1][0] == UNINSTALLED
    assert engine.metrics.engine_step_errors.value(kind="job") == 0
