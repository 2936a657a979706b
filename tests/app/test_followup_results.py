"""Asking for a turn on a PR answers with a type, not a sentence parsed back: the run it
started, or why none (a turn is running; hangar has no turn on that PR)."""

from __future__ import annotations

from app.commands import Busy, NoRunOnPr, Started, start_followup
from app.models import Job, Run, RunKind, RunStage, RunState, Thread
from tests.recording_github import PR_NUMBER, REPO, RecordingGitHub

ISSUE = Thread(repo=REPO, number=1, installation_id=1)


def job_with_turn(engine, *, running: bool) -> Job:
    job = engine.save_job(Job(thread=ISSUE, requested_by="mona", prompt="fix add()",
                              clone_url="x", base_branch="main"))
    engine.save_run(Run(
        job_id=job.id, branch="hangar/1-abc", base_branch="main", pr_number=PR_NUMBER,
        state=RunState.RUNNING if running else RunState.EXITED,
        stage=RunStage.PENDING if running else RunStage.DONE, outcome="pr"))
    return job


async def test_a_finished_turn_gives_the_run_started(step_engine):
    engine = step_engine(RecordingGitHub())
    job = job_with_turn(engine, running=False)
    started = await start_followup(engine, job, PR_NUMBER, "again", kind=RunKind.AUTOFIX,
                                   requested_by="mona")
    assert isinstance(started, Started) and started.kind == RunKind.AUTOFIX
    run = engine.get_run(started.run_id)
    assert run is not None and run.turn == 2 and run.kind == RunKind.AUTOFIX
    assert str(started) == f"autofix {run.id}"  # the intent's outcome line, as before


async def test_a_running_turn_gives_busy_and_starts_nothing(step_engine):
    engine = step_engine(RecordingGitHub())
    job = job_with_turn(engine, running=True)
    before = engine.runs_of(job.id)
    assert await start_followup(engine, job, PR_NUMBER, "again", kind=RunKind.FOLLOWUP,
                                requested_by="mona") == Busy()
    assert engine.runs_of(job.id) == before


async def test_no_turn_on_the_pr_gives_no_run_on_pr(step_engine):
    engine = step_engine(RecordingGitHub())
    job = job_with_turn(engine, running=False)
    assert await start_followup(engine, job, PR_NUMBER + 1, "again", kind=RunKind.FOLLOWUP,
                                requested_by="mona") == NoRunOnPr()
