"""The engine knows concerns only through what they register; what it promises them."""

from __future__ import annotations

import pytest

from app.engine import Engine, PrNotes, PrStatus, RowKind
from app.metrics import Metrics
from app.models import Intent, Thread
from app.store import Store

THREAD = Thread(repo="acme/widgets", number=7, installation_id=1, is_pr=True)


@pytest.fixture
def engine(settings):
    return Engine(settings=settings, store=Store(settings.db_path), auth=None,
                  metrics=Metrics(), tokens=None)


async def test_after_step_hooks_run_after_a_step_that_did_not_raise(engine):
    called = []

    async def step(_engine, _row_id):
        return None

    async def failing(_engine, _row_id):
        raise RuntimeError("no")

    engine.register(RowKind("intent", "intent", Intent, step))
    engine.after_step("intent", lambda _engine, row_id: called.append(row_id))
    await engine._guarded("intent", step, "comment-1-0")
    await engine._guarded("intent", failing, "comment-2-0")
    assert called == ["comment-1-0"]


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
