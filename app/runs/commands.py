"""The jobs-and-runs concern's `/hangar` commands: run (a job, or a turn on its PR),
cancel, verify, retry, status and resume. Who may use them, and where, is checked once for every
command (app.commands.process_intent, from each command's declaration)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.commands import (
    Answer,
    Busy,
    hangar_pr_job,
    job_for_thread,
    job_named,
    reply,
    request_verification,
    start_followup,
    start_job,
)
from app.github.ops import RepoOps
from app.models import DEFERRED, Deferred, Intent, JobState, RunKind, RunStage, RunState
from app.render import latest_turns
from app.render.reasons import Why
from app.render.replies import retry_label
from app.render.text import person
from app.repoconfig import parse_repo_config
from app.runs.ending import Restart, retryable
from app.runs.jobs import refresh_status
from app.runs.publishing import request_retry
from app.runs.queue import credential_key, resume_model
from app.runs.steps import start_again

if TYPE_CHECKING:
    from app.engine import StepContext


async def run_agent(engine: StepContext, ops: RepoOps, intent: Intent) -> str | Deferred:
    if intent.thread.is_pr:
        job = await hangar_pr_job(engine, ops, intent)
        if job is None:
            return "not a hangar PR"
        # Written in a review thread: the turn reads that thread and answers in it.
        thread = intent.args.get("review_thread")
        started = await start_followup(engine, job, intent.thread.number,
                                       intent.args["prompt"], kind=RunKind.FOLLOWUP,
                                       requested_by=intent.author,
                                       review_threads=[thread] if thread else None)
        if isinstance(started, Busy):
            # Said once, and kept: the turn starts when the running one ends.
            if not intent.waiting:
                await reply(ops, intent, Why(Answer.TURN_WAITS), key=f"waiting-{intent.id}")
            return DEFERRED
        return str(started)
    return start_job(engine, intent, intent.args["prompt"], attempts=1)


async def cancel(engine: StepContext, ops: RepoOps, intent: Intent) -> str:
    job = job_named(engine, intent) or job_for_thread(engine, intent.thread.repo,
                                                      intent.thread.number)
    if job is None:
        await reply(ops, intent, Why(Answer.NOTHING_TO_CANCEL))
        return "nothing to cancel"
    stopped = 0
    for run in engine.runs_of(job.id):
        if not run.finished and run.state in (RunState.QUEUED, RunState.RUNNING):
            engine.patch_run(run.id, cancel_requested=True, retry_at=0.0)  # stop it now
            stopped += 1
    engine.note(job.id, f"{person(intent.author)} cancelled {stopped} running turn(s)")
    if not stopped:
        await reply(ops, intent, Why(Answer.ALREADY_STOPPED))
    return f"cancel requested for {stopped} run(s)"


async def verify_again(engine: StepContext, ops: RepoOps, intent: Intent) -> str:
    job = await hangar_pr_job(engine, ops, intent)
    if job is None:
        return "not a hangar PR"
    return request_verification(engine, job, intent.thread.number)


async def retry(engine: StepContext, ops: RepoOps, intent: Intent) -> str:
    """Push again the commits of runs whose push GitHub did not take; else start again the
    latest turns that ended in a way a retry fixes (a crash, a lost sandbox, the model)."""
    job = job_for_thread(engine, intent.thread.repo, intent.thread.number)
    if job is None:
        await reply(ops, intent, Why(Answer.NOTHING_HELD))
        return "nothing held or to retry"
    runs = engine.runs_of(job.id)
    held = [r for r in runs if r.stage == RunStage.HELD]
    for run in held:
        request_retry(engine, run)
        engine.note(run.job_id, f"{person(intent.author)} asked to push {run.id} again")
    if held:
        return f"retrying the push of {len(held)} run(s)"
    again = [r for r in latest_turns(runs) if retryable(r)]
    if not again:
        await reply(ops, intent, Why(Answer.NOTHING_HELD))
        return "nothing held or to retry"
    for run in again:
        if run.turn == 1 and run.pr_number is not None:
            # Its branch holds what it committed: the retry is a turn on top of it.
            await start_followup(engine, job, run.pr_number, run.prompt,
                                 kind=RunKind.FOLLOWUP, requested_by=intent.author,
                                 label=retry_label(run.turn, intent.author))
            continue
        start_again(engine, run, Restart.RETRY)
        engine.patch_job(job.id, state=JobState.ACTIVE)
    engine.note(job.id, f"{person(intent.author)} asked to start {len(again)} turn(s) again")
    return f"starting {len(again)} turn(s) again"


async def status(engine: StepContext, ops: RepoOps, intent: Intent) -> str:
    job = job_for_thread(engine, intent.thread.repo, intent.thread.number)
    if job is None:
        await reply(ops, intent, Why(Answer.NO_WORK_YET))
        return "no job"
    await refresh_status(engine, job.id, force=True)
    return "status refreshed"


async def resume(engine: StepContext, ops: RepoOps, intent: Intent) -> str:
    """Lift the model pause that holds this job's queued agents (each window until its
    reset); the agents start as slots allow."""
    job = job_named(engine, intent) or job_for_thread(engine, intent.thread.repo,
                                                      intent.thread.number)
    if job is None:
        await reply(ops, intent, Why(Answer.NOT_PAUSED))
        return "nothing paused"
    waiting = [r for r in engine.runs_of(job.id) if r.state == RunState.QUEUED
               and not r.finished and r.env]
    lifted = []
    for credential in sorted({credential_key(r) for r in waiting}):
        pause = resume_model(engine, credential, by=intent.author)
        if pause is not None:
            lifted.append(pause.why)
            engine.note(job.id, f"{person(intent.author)} resumed {credential} "
                                f"({', '.join(sorted(pause.holding))})")
    if not lifted:
        await reply(ops, intent, Why(Answer.NOT_PAUSED))
        return "nothing paused"
    for run in waiting:
        engine.patch_run(run.id, retry_at=0.0)  # look again now
    await reply(ops, intent, Why(Answer.RESUMED, login=intent.author, pauses=lifted))
    await refresh_status(engine, job.id)
    return f"resumed {len(lifted)} credential(s)"


# What a job started by the trigger label asks: the thread says the rest.
LABEL_PROMPT = "Resolve this issue as its title, description and comments describe."


async def run_from_label(engine: StepContext, ops: RepoOps, intent: Intent) -> str:
    """A label added by a person with write access (checked before this, quietly): a job,
    as `/hangar` would start, when it is the trigger label of the repository's config."""
    config, _ = parse_repo_config(await engine.github.config_text(ops, intent.default_branch))
    wanted = config.trigger.label
    label = intent.args.get("label") or ""
    if wanted is None or wanted.lower() != label.lower():
        return "not the trigger label"
    earlier = job_for_thread(engine, intent.thread.repo, intent.thread.number)
    if earlier is not None and earlier.state == JobState.ACTIVE:
        return "a job is already working on this issue"  # the label added again
    return start_job(engine, intent, LABEL_PROMPT, attempts=1, trigger_label=label)


ACTIONS = {
    "label": run_from_label,
    "run": run_agent,
    "cancel": cancel,
    "verify": verify_again,
    "retry": retry,
    "status": status,
    "resume": resume,
}
