"""Status-comment edits are folded: a comment written moments ago is not edited again at
once; one edit, with whatever is true when the interval is up, follows — even after the
job has ended. Every edit is a write GitHub counts against the installation."""

from __future__ import annotations

import time

import pytest

from app import render, runs
from app.engine import Engine, PrNotes
from app.metrics import Metrics
from app.models import Job, JobState, Run, RunStage, RunState, Thread
from app.runs.jobs import refresh_status
from app.store import Store
from app.wiring import register_concerns

ISSUE = Thread(repo="acme/widgets", number=7, installation_id=1)


class RecordingOps:
    """What the job's status edit asks of GitHub, recorded: (thread number, body)."""

    def __init__(self):
        self.writes: list[tuple[int, str]] = []
        self.looked: list[int] = []

    async def upsert_comment(self, number: int, marker: str, body: str,
                             known_id: int | None = None, *, look_first: bool = True,
                             create: bool = True) -> int:
        assert marker in body and create
        if known_id is None and look_first:
            self.looked.append(number)
        self.writes.append((number, body))
        return known_id or 1000 + number


@pytest.fixture
def engine(settings):
    engine = Engine(settings=settings.model_copy(update={"status_edit_interval_seconds": 10}),
                    store=Store(settings.db_path), auth=None, metrics=Metrics(), tokens=None)
    register_concerns(engine)
    engine.ops = RecordingOps()

    async def repo_ops(thread):
        return engine.ops

    engine.github.repo_ops = repo_ops
    return engine


def start(engine: Engine) -> tuple[Job, Run]:
    job = engine.save_job(Job(thread=ISSUE, requested_by="mona", prompt="fix it",
                              clone_url="x", base_branch="main"))
    run = engine.save_run(Run(job_id=job.id, branch="hangar/7-a", base_branch="main"))
    return job, run


def rewind(engine: Engine, job_id: str, seconds: float) -> None:
    """As if the comments had been written `seconds` earlier."""
    job = engine.get_job(job_id)
    engine.patch_job(job_id, edited_at={n: t - seconds for n, t in job.edited_at.items()},
                     status_due_at=job.status_due_at and job.status_due_at - seconds)


def active_job_ids(engine: Engine) -> set[str]:
    return {j.id for j in engine.store.all("job", Job, active=True)}


async def test_stages_in_quick_succession_make_one_edit_with_the_last(engine):
    job, run = start(engine)
    await refresh_status(engine, job.id)
    assert len(engine.ops.writes) == 1  # a new comment is written at once
    for state, stage in ((RunState.RUNNING, RunStage.PENDING),
                         (RunState.EXITED, RunStage.PUBLISHING),
                         (RunState.EXITED, RunStage.VERIFYING)):
        engine.patch_run(run.id, state=state, stage=stage)
        await runs.advance_job(engine, job.id)
    assert len(engine.ops.writes) == 1
    due = engine.get_job(job.id).status_due_at
    assert time.time() < due <= time.time() + 10

    rewind(engine, job.id, 10)
    await runs.advance_job(engine, job.id)
    await runs.advance_job(engine, job.id)
    assert len(engine.ops.writes) == 2
    last = render.status_comment(engine.get_job(job.id), engine.runs_of(job.id))
    assert engine.ops.writes[-1] == (7, last)
    assert engine.get_job(job.id).status_due_at == 0


async def test_an_edit_folded_as_the_job_ends_is_still_made(engine):
    job, run = start(engine)
    await refresh_status(engine, job.id)
    engine.patch_run(run.id, state=RunState.EXITED, stage=RunStage.DONE,
                     finished_at=time.time(), outcome="PR opened")
    await runs.advance_job(engine, job.id)  # the job ends; its last edit is folded
    ended = engine.get_job(job.id)
    assert ended.state != JobState.ACTIVE and len(engine.ops.writes) == 1
    assert job.id in active_job_ids(engine)  # the engine keeps coming back for the edit

    rewind(engine, job.id, 10)
    await runs.advance_job(engine, job.id)
    assert len(engine.ops.writes) == 2
    assert job.id not in active_job_ids(engine)


async def _ended_with_pr(engine: Engine) -> tuple[list[str], Job]:
    """A job whose run ended with PR #12, its first comment posted; what other concerns
    say of the PR is the list returned, empty until a test adds to it."""
    said: list[str] = []
    engine.status_notes(lambda _engine, _repo, _number: PrNotes(tuple(said)))
    job, run = start(engine)
    await refresh_status(engine, job.id)
    engine.patch_run(run.id, state=RunState.EXITED, stage=RunStage.DONE, pr_number=12,
                     finished_at=time.time(), outcome="PR opened")
    return said, job


async def test_a_prs_first_comment_goes_with_the_issues_next_edit(engine):
    """A PR's body and check runs say a turn's result as it ends; its status comment is
    posted with the issue's next edit, saying what other concerns said meanwhile, not
    posted at once and edited moments later."""
    said, job = await _ended_with_pr(engine)
    await runs.advance_job(engine, job.id)
    assert [number for number, _ in engine.ops.writes] == [7]  # both wait for the fold
    due = engine.get_job(job.id).status_due_at
    assert time.time() < due <= time.time() + 10
    said.append("a review was asked for")
    runs.ask_status_edit(engine, job.id)
    await runs.advance_job(engine, job.id)
    assert len(engine.ops.writes) == 1

    rewind(engine, job.id, 10)
    await runs.advance_job(engine, job.id)
    assert [number for number, _ in engine.ops.writes] == [7, 7, 12]
    assert all(said[0] in body for _, body in engine.ops.writes[1:])
    rewind(engine, job.id, 10)
    await runs.advance_job(engine, job.id)
    assert len(engine.ops.writes) == 3  # nothing left to say


async def test_force_edits_at_once(engine):
    job, run = start(engine)
    await refresh_status(engine, job.id)
    engine.patch_run(run.id, state=RunState.RUNNING)
    await refresh_status(engine, job.id, force=True)
    assert len(engine.ops.writes) == 2 and engine.get_job(job.id).status_due_at == 0


async def test_an_unchanged_body_costs_nothing(engine):
    job, _ = start(engine)
    await refresh_status(engine, job.id)
    rewind(engine, job.id, 60)
    for _ in range(3):
        await runs.advance_job(engine, job.id)
    assert len(engine.ops.writes) == 1 and engine.get_job(job.id).status_due_at == 0


async def test_a_first_comment_is_posted_without_listing_the_thread_unless_a_crash_hid_it(
        engine):
    job, _ = start(engine)
    await refresh_status(engine, job.id)
    assert engine.ops.looked == [] and engine.get_job(job.id).status_posting == {}
    # A crash between GitHub taking the post and hangar saving its id: the thread is
    # still marked, so the next refresh looks for the comment before posting again.
    crashed, _ = start(engine)
    engine.patch_job(crashed.id, status_posting={7: engine.creating(crashed.id).mark()})
    await refresh_status(engine, crashed.id)
    assert engine.ops.looked == [7]


async def test_another_concerns_ask_is_a_row_write_the_jobs_step_acts_on(engine):
    """Landing, auto-fix, fan-out and review requests never edit a status comment: they
    count an ask on the job and wake it; the job's step makes the edit, even after the
    job ended, and the job rests once it has."""
    said, job = await _ended_with_pr(engine)
    rewind(engine, job.id, 10)
    await runs.advance_job(engine, job.id)  # the job ends and shows it
    assert job.id not in active_job_ids(engine) and len(engine.ops.writes) == 3

    job_kind = engine.kinds["job"]
    said.append("another concern's rows say more now")
    runs.ask_status_edit(engine, job.id)
    asked = engine.get_job(job.id)
    assert len(engine.ops.writes) == 3  # the ask itself writes nothing to GitHub
    assert job.id in active_job_ids(engine) and job_kind.next_at(asked) == 0.0
    assert job.id in engine._woken

    rewind(engine, job.id, 10)
    await runs.advance_job(engine, job.id)
    assert len(engine.ops.writes) == 5  # the issue's comment and the PR's
    assert all(said[0] in body for _number, body in engine.ops.writes[-2:])
    assert job.id not in active_job_ids(engine)
    assert job_kind.next_at(engine.get_job(job.id)) == float("inf")


async def test_an_ask_made_while_the_job_edits_is_not_lost(engine):
    """An ask counted after the edit read the rows is still owed: the job stays due."""
    job, _ = start(engine)
    real = engine.ops.upsert_comment

    async def asked_meanwhile(*args, **kwargs):
        runs.ask_status_edit(engine, job.id)  # another concern, while the edit is sent
        return await real(*args, **kwargs)

    engine.ops.upsert_comment = asked_meanwhile
    await refresh_status(engine, job.id)
    after = engine.get_job(job.id)
    assert after.status_asks == 1 and after.status_asks_seen == 0
    assert engine.kinds["job"].next_at(after) == 0.0


async def test_a_job_older_than_this_hangar_looks_before_its_first_post(engine):
    """A backup restored: the job's row was taken before the hangar that made it posted the
    PR's comment. The restarted hangar finds that comment and edits it, not a second."""
    _, job = await _ended_with_pr(engine)
    assert engine.ops.looked == []  # a job of this hangar: nothing to look for
    engine.started_at = time.time() + 1  # as if this hangar started after the job was made
    rewind(engine, job.id, 10)
    await runs.advance_job(engine, job.id)
    assert engine.ops.looked == [12]
