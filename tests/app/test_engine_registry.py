"""The engine knows concerns only through what they register; what it promises them."""

from __future__ import annotations

import pytest

from app.engine import Engine, PrNotes, PrStatus, RowKind
from app.metrics import Metrics
from app.models import Intent, IntentState, Thread
from app.store import Store

THREAD = Thread(repo="acme/widgets", number=7, installation_id=1, is_pr=True)


@pytest.fixture
def engine(settings):
    return Engine(settings=settings, store=Store(settings.db_path), auth=None,
                  metrics=Metrics(), tokens=None)


async def test_after_step_hooks_run_after_every_step_even_one_that_raised(engine):
    """A step may move its row, then fail (a run marked done, then a full disk refusing
    its status edit): what waits on the row still hears of it, and sees the row as it is."""
    seen = []

    async def step(_engine, _row_id):
        return None

    async def moves_then_fails(engine, row_id):
        engine.save_intent(Intent(id=row_id, thread=THREAD, comment_id=2, author="mona",
                                  command="status", state=IntentState.DONE))
        raise OSError(28, "No space left on device")

    def hook(engine, row_id):
        row = engine.store.get("intent", row_id, Intent)
        seen.append((row_id, row.state if row else None))

    def broken_hook(_engine, _row_id):
        raise OSError(28, "No space left on device")

    engine.register(RowKind("intent", "intent", Intent, step))
    engine.after_step("intent", broken_hook)  # its failure keeps the next from hearing
    engine.after_step("intent", hook)
    await engine._guarded("intent", step, "comment-1-0")
    await engine._guarded("intent", moves_then_fails, "comment-2-0")
    assert seen == [("comment-1-0", None), ("comment-2-0", IntentState.DONE)]
    assert engine.held_until("comment-2-0") > 0  # and the failed one still backs off


async def test_a_due_row_of_a_registered_kind_is_scheduled_and_others_wait(engine):
    taken = []

    async def step(_engine, row_id):
        taken.append(row_id)

    engine.register(RowKind("intent", "intent", Intent, step,
                            next_at=lambda row: row.retry_at))
    engine.save_intent(Intent(id="due-0", thread=THREAD, comment_id=0, author="mona",
                              command="status"))
    engine.save_intent(Intent(id="later-0", thread=THREAD, comment_id=0, author="mona",
                              command="status", retry_at=2**40))
    engine._schedule_due()
    for task in list(engine._tasks.values()):
        await task
    assert taken == ["due-0"]


def test_a_kind_registered_twice_is_refused(engine):
    async def step(_engine, _row_id):
        return None

    engine.register(RowKind("intent", "intent", Intent, step))
    with pytest.raises(ValueError, match="registered twice"):
        engine.register(RowKind("intent", "intent", Intent, step))


def test_status_notes_come_pr_by_pr_in_the_order_concerns_registered(engine):
    def landing(_engine, repo, number):
        return PrNotes((f"land {repo}#{number}",), landed=number == 2)

    def autofix(_engine, _repo, number):
        return PrNotes((f"autofix #{number}",) if number == 1 else ())

    engine.status_notes(landing)
    engine.status_notes(autofix)
    said = engine.pr_status("acme/widgets", [1, 2])
    assert said.notes == ["land acme/widgets#1", "autofix #1", "land acme/widgets#2"]
    assert said.landed == [2]
    assert engine.pr_status("acme/widgets", []) == PrStatus([], [])


def test_the_concerns_register_in_the_order_the_engine_looks_at_them():
    """Each concern registers itself; the composition root keeps the order that matters:
    row kinds as the engine looks over them, start-up work, status notes, and the hooks
    after a run's step, concern by concern as they ran before the concerns registered
    themselves."""
    from app import notify, review_threads, reviewers
    from app.autofix import intake as autofix_intake
    from app.autofix import steps as autofix_steps
    from app.commands import intents
    from app.engine import Registrations
    from app.landing import intake as landing_intake
    from app.landing import queue as landing_queue
    from app.landing import steps as landing_steps
    from app.runs import jobs
    from app.wiring import register_concerns

    registered = Registrations()
    register_concerns(registered)
    assert list(registered.kinds) == [
        "intent", "run", "job", "land", "land_overlap", "merge_group", "fanout_grading",
        "autofix", "review_ask", "thread_reply", "notification", "envbuild"]
    assert [chore.kind for chore in registered.chores] == [
        "rebuild", "redelivery", "forget deliveries"]
    assert [what for what, _run in registered._at_start] == [
        "reaping orphan sandboxes", "ending sandboxes whose hangar is gone",
        "counting the sandboxes this hangar holds", "queueing stale environment builds"]
    assert registered._after_step["run"] == [
        intents.wake_waiting, autofix_intake.after_run_step, reviewers.after_run_step,
        review_threads.after_run_step, jobs.wake_job, landing_queue.wake_group,
        landing_intake.after_run_step, notify.after_run]
    assert registered._after_step["job"] == [review_threads.after_job_step]
    assert registered._status_notes == [
        landing_steps.status_notes, autofix_steps.status_notes, reviewers.status_notes]


def test_an_after_step_hook_of_a_concern_without_a_place_is_refused():
    from app import notify, reviewers
    from app.engine import Registrations

    registered = Registrations()
    registered.after_step("run", notify.after_run)
    registered.after_step("run", reviewers.after_run_step)
    registered.order_after_step("run", [reviewers, notify])
    assert registered._after_step["run"] == [reviewers.after_run_step, notify.after_run]
    with pytest.raises(ValueError, match=r"app\.notify has no place"):
        registered.order_after_step("run", [reviewers])
