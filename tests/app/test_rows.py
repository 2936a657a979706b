"""Rows change one way: `changed` validates the whole row, so a misspelt field or a value
of the wrong type fails where it is written instead of being dropped on the next save."""

from __future__ import annotations

import pydantic
import pytest

from app.engine import Engine
from app.metrics import Metrics
from app.models import (
    Intent,
    IntentState,
    Job,
    JobState,
    Run,
    RunKind,
    RunState,
    Thread,
    changed,
)
from app.store import Store


@pytest.fixture
def engine(settings):
    return Engine(settings=settings, store=Store(settings.db_path), auth=None,
                  metrics=Metrics(), tokens=None)


def test_a_patch_with_a_misspelt_field_raises_and_writes_nothing(engine):
    run = engine.save_run(Run(job_id="job-1", branch="hangar/1-a", base_branch="main"))
    with pytest.raises(TypeError, match="Run has no field stat"):
        engine.patch_run(run.id, stat=RunState.RUNNING)
    assert engine.get_run(run.id).state == RunState.QUEUED


def test_a_patch_of_the_wrong_type_raises(engine):
    job = engine.save_job(Job(thread=Thread(repo="acme/w", number=1, installation_id=1),
                              requested_by="mona", prompt="x", clone_url="x",
                              base_branch="main"))
    with pytest.raises(pydantic.ValidationError):
        engine.patch_job(job.id, state="sleeping")
    assert engine.patch_job(job.id, state="done").state is JobState.DONE  # coerced, typed


def test_changed_leaves_the_original_alone():
    run = Run(job_id="job-1", branch="b", base_branch="main")
    assert changed(run, pr_number=4).pr_number == 4 and run.pr_number is None


def test_a_run_kind_and_an_intent_state_are_typed_not_free_strings(engine):
    run = engine.save_run(Run(job_id="job-1", branch="b", base_branch="main", kind="verify"))
    assert engine.get_run(run.id).kind is RunKind.VERIFY  # stored as text, read back typed
    with pytest.raises(pydantic.ValidationError):
        Run(job_id="job-1", branch="b", base_branch="main", kind="verfy")
    intent = Intent(id="comment-1-0", thread=Thread(repo="acme/w", number=1, installation_id=1),
                    comment_id=1, author="mona", command="status")
    assert intent.state is IntentState.NEW
    with pytest.raises(pydantic.ValidationError):
        changed(intent, state="finished")
