"""A job: the runs one command started, and the one status comment per thread that says
where they are."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Protocol

from app import render
from app.creates import Creating, Plan
from app.egress import running_refusal_notes
from app.models import JobState, RunOutcome, RunStage
from app.render import pages
from app.runs.publishing import rescue_commits
from app.runs.queue import model_pauses, model_readings, queue_positions
from app.runs.sandbox import complete_agent_check

if TYPE_CHECKING:
    from app.models import Job
    from app.runs.context import RunsContext

log = logging.getLogger(__name__)


def wake_job(engine: RunsContext, run_id: str) -> None:
    """After a run's step: a finished run may be its job's last, so the job looks."""
    run = engine.get_run(run_id)
    if run is not None and run.finished:
        engine.wake(run.job_id)


async def advance_job(engine: RunsContext, job_id: str) -> None:
    job = engine.get_job(job_id)
    if job is None:
        return
    if job.state != JobState.ACTIVE:
        if job.status_asked or (job.status_due_at and job.status_due_at <= time.time()):
            await refresh_status(engine, job_id)  # the edit asked, or folded, once it ended
        return
    runs = engine.runs_of(job_id)
    unshown = [r for r in runs if r.finished and r.ending
               and r.agent_check_shown != r.ending["code"]]
    if unshown:
        ops = await engine.github.repo_ops(job.thread)
        for run in unshown:
            await complete_agent_check(engine, ops, run)
    if runs and all(r.finished for r in runs):
        await engine.runs_ended(job)  # what other concerns do first: fan-out ranks
        failed = all(r.stage == RunStage.ERROR for r in runs)
        cancelled = all(r.outcome == RunOutcome.CANCELLED for r in runs)
        state = JobState.FAILED if failed else JobState.CANCELLED if cancelled else JobState.DONE
        engine.patch_job(job_id, state=state)
    await refresh_status(engine, job_id)


def give_up(engine: RunsContext, job_id: str, reason: str) -> None:
    """The job's step failed again and again: the job failed, and its notes say why."""
    job = engine.get_job(job_id)
    if job and job.state == JobState.ACTIVE:
        engine.patch_job(job_id, state=JobState.FAILED)
        engine.note(job_id, f"{job_id} failed: {reason}")

class StatusAsks(Protocol):
    """What asking for a status edit uses of the engine: the job row and wake."""

    def get_job(self, job_id: str) -> Job | None: ...
    def patch_job(self, job_id: str, **fields: Any) -> Job: ...
    def wake(self, *row_ids: str) -> None: ...


def ask_status_edit(engine: StatusAsks, job_id: str) -> None:
    """What a job's status comment says changed in another concern's rows (a land request,
    an auto-fix row, a review request, a ranking): the job's step edits the comment, folded
    like every edit. A row write and a wake, so no concern calls into the job's I/O."""
    job = engine.get_job(job_id)
    if job is None:
        return
    engine.patch_job(job_id, status_asks=job.status_asks + 1)
    engine.wake(job_id)


async def refresh_status(engine: RunsContext, job_id: str, *, force: bool = False) -> None:
    """Edit the status comment on the issue and on each PR when what it says changed.

    A comment written less than `status_edit_interval_seconds` ago is not edited again
    at once: the job's row stays active and the engine makes one edit with whatever is
    true when the interval is up (a job passes through half a dozen stages in seconds,
    and every edit is a write GitHub counts). A new comment, and `force`, go at once.
    """
    # Steps of the job, its runs and its land request all refresh; one at a time, so a
    # comment is created once and every later edit finds it.
    async with engine.lock(f"status:{job_id}"):
        await _refresh_status(engine, job_id, force=force)


async def _refresh_status(engine: RunsContext, job_id: str, *, force: bool) -> None:
    job = engine.get_job(job_id)
    if job is None:
        return
    asks = job.status_asks  # what this edit shows was asked for until now
    if job.off_limits:  # GitHub would refuse the edit: the job's notes say what happened
        if job.status_due_at or job.status_asks_seen < asks:
            engine.patch_job(job_id, status_due_at=0.0, status_asks_seen=asks)
        return
    runs = engine.runs_of(job_id)
    prs = sorted({r.pr_number for r in runs if r.pr_number})
    # A PR's thread gets the comment once a turn on it is over: until then its body and
    # check runs say what is happening, and the comment would be edited moments later.
    threads = [job.thread.number, *(n for n in prs if n in job.status_comments
                                    or n in job.status_posting
                                    or any(r.finished for r in runs if r.pr_number == n))]
    said = engine.pr_status(job.thread.repo, prs)  # what landing and auto-fix say
    notes = [*running_refusal_notes(engine, runs), *said.notes]
    readings = {run_id: (r.window, r.utilization)
                for run_id, r in model_readings(engine, runs).items()}
    body = render.status_comment(job, runs, queue=queue_positions(engine), notes=notes,
                                 landed=said.landed, paused=model_pauses(engine, runs),
                                 readings=readings,
                                 job_url=pages.job_link(engine.settings.public_url, job.id))
    ops = None
    interval = engine.settings.status_edit_interval_seconds
    due = 0.0
    # A PR's first comment goes with the issue's next edit: until then the PR's body and
    # check runs say the result, and what other concerns say of the PR moments later (a
    # review asked for, a land request) is in it from the start, not in an edit after.
    with_issue = job.edited_at.get(job.thread.number, 0.0) + interval
    for number in threads:
        if not force and job.rendered.get(number) == body:
            continue
        next_edit = job.edited_at.get(number, 0.0) + interval
        if number not in job.status_comments:  # a new comment: the issue's goes at once
            next_edit = 0.0 if number == job.thread.number else with_issue
        if not force and next_edit > time.time():
            due = min(due or next_edit, next_edit)
            continue
        ops = ops or await engine.github.repo_ops(job.thread)
        known = job.status_comments.get(number)
        # Only a post that may have been made already is looked for first (app.creates):
        # otherwise a thread's first comment costs one call, not a listing of it too.
        plan = Plan.LOOK
        if known is None:
            job, plan = engine.claim_create(job, "status_posting", number)
            known = job.status_comments.get(number)  # another replica's, saved meanwhile
        comment_id = await ops.upsert_comment(number, render.status_marker(job.id), body,
                                              known_id=known, look_first=plan != Plan.CREATE,
                                              create=plan != Plan.LOOK_ONLY)
        if comment_id is None:
            raise Creating.in_flight("a status comment", job.status_posting.get(number))
        job = engine.existing_job(job_id)
        job = engine.patch_job(job_id, status_comments={**job.status_comments, number: comment_id},
                               status_posting={n: m for n, m in job.status_posting.items()
                                               if n != number},
                               rendered={**job.rendered, number: body},
                               edited_at={**job.edited_at, number: time.time()})
    if job.status_due_at != due or job.status_asks_seen < asks:
        engine.patch_job(job_id, status_due_at=due,
                         status_asks_seen=max(job.status_asks_seen, asks))



async def reap_orphans(engine: RunsContext) -> None:
    """Sandboxes whose run finished are destroyed, their tokens revoked; unpushed commits
    are published (or held) first. A sandbox whose run hangar does not know is kept: a
    rebuild from GitHub may know it; after one it is reported, never destroyed."""
    for name in {"local", *(s.provider for s in engine.envs.values())}:
        try:
            provider = engine.providers[name]
            sandboxes = await provider.list({"hangar.instance": engine.instance_id})
        except Exception:
            continue
        for sb in sandboxes:
            run_id = sb.labels.get("hangar.run")
            run = engine.get_run(run_id) if run_id else None
            if run is None:
                if not engine.rebuilding:
                    log.warning("kept a sandbox whose run hangar does not know; destroy it "
                                "by hand once nothing in it is needed",
                                extra={"sandbox": sb.id, "run": run_id})
                continue
            keep = (not run.finished and run.sandbox
                    and run.sandbox.get("id") == sb.id and sb.labels.get("hangar.role") == "agent")
            if keep:
                continue
            if sb.labels.get("hangar.role") == "agent" and not await rescue_commits(engine, sb,
                                                                                     run):
                continue
            await provider.destroy(sb)
            engine.tokens.revoke(sb.id)


async def end_abandoned_sandboxes(engine: RunsContext) -> None:
    """Sandboxes left running by a hangar that is gone for good (a stopped one whose data
    directory was removed, a test's) are ended by the next hangar that starts on the host:
    none of their work can ever be collected."""
    for name in {"local", *(spec.provider for spec in engine.envs.values())}:
        try:
            ended = await engine.providers[name].end_abandoned()
        except Exception as exc:  # a provider that cannot be reached has nothing to end
            log.info("could not look for abandoned %s sandboxes: %s", name, exc)
            continue
        if ended:
            log.warning("ended %d sandbox(es) left running by a hangar that is gone: %s",
                        len(ended), ", ".join(ended[:20]))


async def count_held_sandboxes(engine: RunsContext) -> None:
    for name in {"local", *(spec.provider for spec in engine.envs.values())}:
        try:
            held = await engine.providers[name].list({"hangar.instance": engine.instance_id})
        except Exception as exc:  # a provider that cannot be reached holds none for us
            log.info("could not count the %s sandboxes: %s", name, exc)
            continue
        engine.fleet.already(held)
