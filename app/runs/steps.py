"""A run's life: queued → running → (exited | lost | timed_out | cancelled), then the
result pipeline publish → collect → verify → done.

Each function is one step. It reads the run fresh, acts, and records only what it changed,
so a step cut short by a crash is simply taken again. Facts come from GitHub and from
hangar's clean verify sandbox; the agent's words are kept as a claim. This file holds the
dispatch by state and the collect step; the others live beside it (agent, publishing,
verify).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import aiohttp
from gidgethub import BadRequest, HTTPException

from app import render
from app.creates import Plan
from app.engine import MAX_STEP_FAILURES
from app.github.client import RateLimited
from app.github.ops import RepoOps
from app.models import Job, Run, RunKind, RunOutcome, RunStage, RunState, RunWarning
from app.render.reasons import Why
from app.repoconfig import parse_repo_config
from app.runs import ending
from app.runs.agent import start_agent, watch_agent
from app.runs.jobs import refresh_status
from app.runs.publishing import publish, retry_held
from app.runs.queue import wake_queued
from app.runs.sandbox import AGENT_CHECK, upsert_check
from app.runs.verify import begin_verification, show_verification, verify
from app.sensitive import sensitive_files

if TYPE_CHECKING:
    from app.runs.context import RunsContext

log = logging.getLogger(__name__)

async def advance_run(engine: RunsContext, run_id: str) -> None:
    run = engine.get_run(run_id)
    if run is None or run.finished:
        return
    job = engine.get_job(run.job_id)
    if job is not None and job.off_limits and run.state != RunState.RUNNING:
        await end_off_limits(engine, run)  # a running agent is stopped first, below
        return
    if run.state == RunState.QUEUED:
        await start_agent(engine, run)
    elif run.state == RunState.RUNNING:
        await watch_agent(engine, run)
    elif run.stage in (RunStage.PENDING, RunStage.PUBLISHING):
        await publish(engine, run)
    elif run.stage == RunStage.COLLECTING:
        await collect(engine, run)
    elif run.stage == RunStage.VERIFYING:
        await verify(engine, run)
    elif run.stage == RunStage.HELD:
        retry_held(engine, run)
    await refresh_status(engine, run.job_id)


async def end_off_limits(engine: RunsContext, run: Run) -> None:
    """hangar may no longer touch the job's repository on GitHub: the turn ends with its
    sandbox, and nothing is pushed, read or said there (GitHub would refuse it all)."""
    from sandbox.provider import Sandbox

    if run.sandbox is not None:
        sb = Sandbox.model_validate(run.sandbox)
        await engine.providers[sb.provider].destroy(sb)
        engine.tokens.revoke(sb.id)
    engine.patch_run(run.id, state=RunState.CANCELLED, stage=RunStage.DONE,
                     outcome=RunOutcome.CANCELLED, finished_at=run.finished_at or time.time(),
                     ending={"code": ending.Ending.CANCELLED}, waiting=None)
    wake_queued(engine)  # a place in the queue came free, if it held one


def note_failure(engine: RunsContext, run_id: str, exc: Exception) -> None:
    """A step raised: retry with backoff, then give up with the reason.

    The exception's words (a host path, an address) are for operators: they go to the
    job's timeline and hangar's log; the run's status says what failed in hangar's own."""

    run = engine.get_run(run_id)
    if run is None or run.finished:
        return
    failures = run.stage_failures + 1
    reason = f"{type(exc).__name__}: {exc}"[:500]
    engine.note(run.job_id, f"{run.id} step failed ({failures} of {MAX_STEP_FAILURES}): "
                            f"{reason}")
    if failures >= MAX_STEP_FAILURES:
        run = engine.patch_run(run_id, stage=RunStage.ERROR, error=reason,
                               stage_failures=failures, failed_stage=run.stage.value,
                               finished_at=run.finished_at or time.time())
        why = ending.account(run, changed=False)
        if why.code == ending.Ending.SANDBOX_NOT_PREPARED and isinstance(
                exc, HTTPException | RateLimited | aiohttp.ClientError):
            # What failed was a read of GitHub's, before any sandbox: said as such.
            why = Why(why.code, github=True)
        engine.patch_run(run_id, ending={"code": why.code, **why.facts})
        engine.wake(run.job_id)
        wake_queued(engine)  # its slot or its place in the queue is free
        return
    delay = min(60.0, 2.0 ** failures)
    engine.patch_run(run_id, stage_failures=failures, retry_at=time.time() + delay,
                     warnings=[*run.warnings[-4:], render.run_warning(
                         Why(RunWarning.RETRYING, attempt=failures,
                             attempts=MAX_STEP_FAILURES))])


def start_again(engine: RunsContext, run: Run, because: str) -> Run:
    """The same turn from the start, in a new sandbox (the old one is gone or destroyed):
    same prompt, same branch, and the earlier turn's session where the harness keeps one.
    `because`: a `Restart` code, said in the status comment."""
    engine.note(run.job_id, f"{run.id} started again ({because})")
    return engine.patch_run(
        run.id, state=RunState.QUEUED, stage=RunStage.PENDING, sandbox=None,
        process_id=None, watch={}, exit_code=None, started_at=None, finished_at=None,
        agent={}, ending=None, outcome=None, dirty=False, published_head=None, held=None,
        stage_failures=0, retry_at=0.0, error=None, failed_stage=None, warnings=[],
        cancel_requested=False, restarts=run.restarts + 1,
        restarted_after=[*run.restarted_after, because], agent_check_shown=None)


def record_ending(engine: RunsContext, run: Run, *, changed: bool) -> Run:
    why = ending.account(run, changed=changed)
    return engine.patch_run(run.id, ending={"code": why.code, **why.facts})



# -- collecting ----------------------------------------------------------------------


async def collect(engine: RunsContext, run: Run) -> None:
    job = engine.existing_job(run.job_id)
    ops = await engine.github.repo_ops(job.thread)
    # What hangar just pushed is what GitHub holds; else (the agent pushed, or a `verify`
    # of the branch) GitHub's branch says.
    head = run.published_head or await ops.branch_sha(run.branch)
    compare = await ops.compare(run.base_branch, head) if head else None
    ahead = bool(head and compare and compare["ahead_by"] > 0)
    # This turn's own commits reached GitHub: the branch moved past where the agent began.
    changed = ahead and (head != run.start_sha if run.start_sha else
                         run.pr_number is None or run.published_head is not None)
    if run.kind != RunKind.VERIFY and ending.restart_after_loss(run, changed=changed):
        start_again(engine, run, ending.Restart.LOST)
        wake_queued(engine)
        return
    if not ahead:
        if run.kind == RunKind.AGENT and run.pr_number is None:
            run = engine.patch_run(run.id, stage=RunStage.DONE,
                                   outcome=RunOutcome.NO_CHANGES, head_sha=head)
            record_ending(engine, run, changed=False)
            engine.note(run.job_id, f"{run.id} made no commits")
            return
    if head is None:  # the branch is gone from GitHub: there is nothing to collect
        raise LookupError(f"{run.id}: branch {run.branch} is not on GitHub")
    config, _ = parse_repo_config(await engine.github.config_text(ops, run.base_branch,
                                                          (compare or {}).get("base_sha")))
    sensitive = sensitive_files(compare, config.land.sensitive_paths)
    run = engine.patch_run(run.id, head_sha=head, compare=compare, sensitive=sensitive)
    # A draft is marked ready by a verification that passed: only where one is required.
    draft = config.land.draft_pr and config.land.require_verification
    if run.kind == RunKind.VERIFY:  # `/hangar verify` reads the branch's head when it verifies
        await opened(engine, ops, job, run, draft=draft)
        engine.patch_run(run.id, stage=RunStage.VERIFYING)
        return
    # Verification needs only the pushed head: it starts now, beside what is said on GitHub.
    verifying = await begin_verification(engine, run, job, ops, head)
    try:
        run = record_ending(engine, run, changed=changed)
        await upsert_check(engine, ops, run, AGENT_CHECK, head, status="completed",
                           conclusion=agent_conclusion(run), output=render.agent_check_output(run))
        if head == run.start_sha and run.ending:  # the ending was just recorded
            run = engine.patch_run(run.id, agent_check_shown=run.ending["code"])
        # One that ends within the fold opens the PR with its result: the body is written
        # once, and the check run is made once, completed. A PR to open opens with all of
        # it said (the check run first; a pass opens it ready: no draft to mark ready); an
        # open PR's body says it before the check run does (verify).
        done = (await verifying.within(engine.settings.status_edit_interval_seconds)
                if verifying is not None else None)  # None: waiting for a free sandbox
        shown = done is not None and run.pr_number is None
        if done is not None:
            run = engine.patch_run(run.id, verification=done)
        if shown and done is not None:
            await show_verification(engine, ops, run, done)
        pr = await opened(engine, ops, job, run,
                          draft=draft and not (done is not None and done.passed))
        # Only now is this stage's work all on GitHub; a crash before here repeats it.
        engine.patch_run(run.id, stage=RunStage.VERIFYING)
        await verify(engine, engine.existing_run(run.id), started=verifying, pr=pr,
                     shown=shown)
    finally:
        if verifying is not None:
            await verifying.stop()


async def opened(engine: RunsContext, ops: RepoOps, job: Job, run: Run, *,
                 draft: bool = False) -> dict:
    """The run's PR, opened (`draft`: as a draft) or brought up to date, recorded on the
    run."""
    pr = await find_or_open_pr(engine, ops, job, run, draft=draft)
    if job.trigger_label:
        # The label asked for this PR; it stays on the issue only while no PR is open.
        await ops.remove_label(job.thread.number, job.trigger_label)
        engine.patch_job(job.id, trigger_label=None)
    fresh = engine.existing_run(run.id)
    engine.patch_run(run.id, pr_number=pr["number"],
                     posting={k: m for k, m in fresh.posting.items() if k != "pr"})
    engine.note(run.job_id, f"{run.id} PR #{pr['number']} at {(run.head_sha or '')[:7]}")
    return pr


def agent_conclusion(run: Run) -> str:
    if run.ending:
        return ending.conclusion(run.ending["code"])
    if run.state == RunState.CANCELLED:
        return "cancelled"
    if run.state == RunState.TIMED_OUT:
        return "timed_out"
    if run.agent.get("failure"):
        return "failure"  # the model refused, was unreachable, or the session was lost
    # Neutral, not failure: the agent's exit is a fact to show, not a gate on the PR.
    return "success" if run.exit_code == 0 else "neutral"


async def find_or_open_pr(engine: RunsContext, ops: RepoOps, job: Job, run: Run, *,
                          draft: bool = False) -> dict:
    """The run's PR with its body up to date; opened when there is none (`draft`: as a
    draft, marked ready once a verification of it passes). The branch's PRs are listed
    first only when an open may have been sent already (app.creates) or GitHub says one
    exists: a first open costs one call. (GitHub opens one PR per branch and base: an open
    another replica sent meanwhile is refused, and found.)"""
    body = render.pr_body(job, run)
    pr: dict | None
    mine = "pr" in run.posting
    if run.pr_number is not None:
        pr = await ops.get_pr(run.pr_number)
    else:
        run, plan = engine.claim_create(run, "posting", "pr")
        pr = await ops.find_pr(run.branch) if plan != Plan.CREATE else None
    if pr is None:
        try:
            pr = await ops.create_pr(title=render.pr_title(job), body=body, head=run.branch,
                                     base=run.base_branch, draft=draft)
        except BadRequest as exc:
            # 422 "A pull request already exists": someone opened it from hangar's branch.
            pr = await ops.find_pr(run.branch) if int(exc.status_code) == 422 else None
            if pr is None:
                raise
        else:
            engine.note(job.id, f"opened PR #{pr['number']}"
                        + (" as a draft" if pr.get("draft") else ""))
            note_draft(engine, job, pr)
            return pr
    elif mine:
        note_draft(engine, job, pr)  # hangar's own open, before a crash
    if pr.get("body") != body:
        pr = await ops.update_pr(pr["number"], body=body)
    return pr


def note_draft(engine: RunsContext, job: Job, pr: dict) -> None:
    """hangar opened this PR as a draft: it marks it ready once a verification passes."""
    drafts = engine.existing_job(job.id).drafts
    if pr.get("draft") and pr["number"] not in drafts:
        engine.patch_job(job.id, drafts=[*drafts, pr["number"]])
