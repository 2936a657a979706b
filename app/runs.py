"""A run's life: queued → running → (exited | lost | timed_out | cancelled), then the
result pipeline publish → collect → verify → done.

Each function is one step. It reads the run fresh, acts, and records only what it changed,
so a step cut short by a crash is simply taken again. Facts come from GitHub and from
hangar's clean verify sandbox; the agent's words are kept as a claim.
"""

from __future__ import annotations

import asyncio
import logging
import time
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from gidgethub import BadRequest

from app import ghops, render
from app.egress import egress_env, egress_facts, end_egress, refusals, verify_key
from app.environments import environment_for
from app.ghops import RepoOps, read_ci
from app.models import Job, JobState, Run, RunStage, RunState, RunWarning, Verification
from app.redact import redact, tail
from app.render import verify as verify_words
from app.render.reasons import Why
from app.repoconfig import parse_repo_config
from app.run_parts import AGENT_CHECK, HOME, REPO, must, prepare_sandbox, upsert_check
from app.sensitive import sensitive_files
from sandbox.provider import SandboxError

if TYPE_CHECKING:
    from app.engine import StepContext

log = logging.getLogger(__name__)

AGENT_LOG = "/workspace/.hangar/agent.log"
# observe, stop and reading the log: past this a sandbox's call fails its run, not hangar.
PROVIDER_CALL_TIMEOUT_S = 60
VERIFY_CHECK = "hangar / verify"
AGENT_PREAMBLE = (
    "You are working in a git checkout of {repo} on branch {branch}. Make the change "
    "asked for below and commit it to the current branch with clear commit messages. "
    "Do not push and do not open a pull request: hangar pushes your branch and opens the "
    "pull request itself, then verifies it in a clean sandbox with `{verify}`."
)
TERMINAL = (RunState.EXITED, RunState.LOST, RunState.TIMED_OUT, RunState.CANCELLED)


async def advance_run(engine: StepContext, run_id: str) -> None:
    run = engine.get_run(run_id)
    if run is None or run.finished:
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
        from app import publishing

        publishing.retry_held(engine, run)
    await refresh_status(engine, run.job_id)


def note_failure(engine: StepContext, run_id: str, exc: Exception) -> None:
    """A step raised: retry with backoff, then give up with the reason."""
    from app.engine import MAX_STEP_FAILURES

    run = engine.get_run(run_id)
    if run is None or run.finished:
        return
    failures = run.stage_failures + 1
    reason = f"{type(exc).__name__}: {exc}"[:500]
    if failures >= MAX_STEP_FAILURES:
        engine.patch_run(run_id, stage=RunStage.ERROR, error=reason, stage_failures=failures,
                         finished_at=run.finished_at or time.time())
        engine.note(run.job_id, f"{run.id} failed: {reason}")
        engine.wake(run.job_id)
        wake_queued(engine)  # its slot or its place in the queue is free
        return
    delay = min(60.0, 2.0 ** failures)
    engine.patch_run(run_id, stage_failures=failures, retry_at=time.time() + delay,
                     warnings=[*run.warnings[-4:],
                               render.run_warning(Why(RunWarning.RETRYING, error=reason))])


# -- starting ----------------------------------------------------------------------


def credential_key(run: Run) -> str:
    """Agents are capped per model credential; script agents share one key."""
    return run.env.get("model_credential_env") or run.env.get("harness") or "unknown"


def queue_positions(engine: StepContext) -> dict[str, int]:
    """Each queued run's place in its credential's queue, first come first served."""
    queued = sorted((r for r in engine.active_runs() if r.state == RunState.QUEUED
                     and r.kind != "verify"), key=lambda r: r.queued_at)
    places: dict[str, int] = {}
    seen: dict[str, int] = {}
    for run in queued:
        key = credential_key(run)
        seen[key] = seen.get(key, 0) + 1
        places[run.id] = seen[key]
    return places


def wake_queued(engine: StepContext) -> None:
    """A slot or a place in a queue came free: the queued runs look again (and their
    status comments say their new place)."""
    engine.wake(*(r.id for r in engine.active_runs() if r.state == RunState.QUEUED))


def slot_free(engine: StepContext, run: Run) -> bool:
    key = credential_key(run)
    running = [r for r in engine.active_runs()
               if r.state == RunState.RUNNING and credential_key(r) == key]
    free = engine.settings.max_concurrent_agents - len(running)
    # Only the oldest queued runs of this credential may take its free slots.
    return free > 0 and queue_positions(engine).get(run.id, 1) <= free


async def start_agent(engine: StepContext, run: Run) -> None:
    if run.cancel_requested:
        engine.patch_run(run.id, state=RunState.CANCELLED, stage=RunStage.DONE,
                         outcome="cancelled", finished_at=time.time())
        wake_queued(engine)  # a place in the queue came free
        return
    if run.kind == "verify":
        return
    job = engine.get_job(run.job_id)
    ops = await engine.repo_ops(job.thread)
    if not run.env:
        # The environment says which model credential, and so which queue, a run is in.
        # Its config is read at the base's commit, so later steps find it read already.
        spec, problems = await environment_for(engine, ops, job.base_branch,
                                               await ops.branch_sha(job.base_branch))
        engine.patch_run(run.id, env=spec.model_dump(), warnings=[*run.warnings, *problems])
        return
    reset_at = model_paused_until(engine, run)
    if reset_at is not None:
        # The credential is near its limit: wait for the reset instead of failing there.
        engine.patch_run(run.id, retry_at=reset_at)
        return
    if not slot_free(engine, run):
        # A slot, or a place nearer the front, coming free wakes the run (wake_queued);
        # the slow poll takes it again in case that word is lost.
        engine.patch_run(run.id, retry_at=time.time() + engine.settings.poll_interval_seconds)
        return
    # Take the slot before the next await, so no other step counts it free.
    run = engine.patch_run(run.id, state=RunState.RUNNING, started_at=time.time())
    wake_queued(engine)  # the runs behind it move up
    from sandbox.envspec import EnvSpec

    spec = EnvSpec.model_validate(run.env)
    if run.base_sha is None:
        base_sha = await ops.branch_sha(job.base_branch)
        if base_sha is None:
            raise RuntimeError(f"the base branch {job.base_branch} does not exist on GitHub")
        run = engine.patch_run(run.id, base_sha=base_sha)
    provider = engine.provider(spec.provider)
    sb = await prepare_sandbox(engine, run, job, spec, role="agent", checkout=checkout_for(run))
    from sandbox.harness import harness_for

    harness = harness_for(spec)
    review = await review_context(ops, run) if run.kind == "followup" else ""
    if run.turn > 1:
        await restore_session(engine, run, sb, harness)
    # The agent gets a gateway URL and a token for this sandbox, never the model key.
    route = model_route(engine, run, sb, spec)
    argv, env = harness.command(build_prompt(job, run, spec, review), turn=run.turn,
                                session_id=previous_session(engine, run), model=route)
    env.update(egress_env(engine, run.id, sb, spec))  # everything else: the egress proxy
    files = harness.files(route)
    if files:
        await provider.copy_in(sb, files, mode=0o755 if spec.harness == "script" else 0o600)
    process_id = await provider.start(sb, argv, env=env, cwd=REPO, log_path=AGENT_LOG)
    engine.patch_run(run.id, process_id=process_id, watch={})
    engine.note(run.job_id, f"{run.id} agent running in {sb.id}")


def previous_turn(engine: StepContext, run: Run) -> Run | None:
    earlier = [r for r in engine.runs_of(run.job_id)
               if r.attempt == run.attempt and r.turn < run.turn and r.kind != "verify"]
    return max(earlier, key=lambda r: r.turn) if earlier else None


def previous_session(engine: StepContext, run: Run) -> str | None:
    """The agent session of this attempt's previous turn, for harnesses that resume."""
    before = previous_turn(engine, run)
    return before.agent.get("session_id") if before else None


def model_route(engine: StepContext, run: Run, sb: Any, spec: Any) -> Any:
    from proxy.gateway import model_base_url
    from sandbox.harness import ModelRoute

    if spec.harness == "script" or engine.models is None:
        return None
    token = engine.models.issue(sb.id, credential=spec.model_credential_env, run_id=run.id)
    return ModelRoute(model_base_url(engine.settings.proxy_base_url, sb.id), token)


def model_paused_until(engine: StepContext, run: Run) -> float | None:
    """When a credential's reported usage is at pause_at_pct or more: its reset time."""
    if engine.models is None or run.env.get("harness") in (None, "script"):
        return None
    limit = engine.models.limit(credential_key(run))
    now = time.time()
    if (limit is None or limit.reset_at is None or limit.reset_at <= now
            or limit.utilization * 100 < engine.settings.pause_at_pct):
        return None
    return limit.reset_at


def model_pause_notes(engine: StepContext, runs: list[Run]) -> list[str]:
    notes = []
    for key in sorted({credential_key(r) for r in runs if r.state == RunState.QUEUED}):
        waiting = [r for r in runs if r.state == RunState.QUEUED and credential_key(r) == key]
        reset_at = model_paused_until(engine, waiting[0])
        if reset_at is not None:
            limit = engine.models.limit(key)
            notes.append(render.model_pause_line(limit.utilization, engine.settings.pause_at_pct,
                                                 reset_at))
    return notes


def session_archive(engine: StepContext, run: Run) -> Any:
    return engine.settings.data_dir / "sessions" / f"{run.id}.tgz"


SESSION_ARCHIVE = "/workspace/.hangar/session.tgz"
SESSION_MAX_BYTES = 256 * 2**20


async def save_session(engine: StepContext, run: Run, sb: Any, harness: Any) -> str | None:
    """Keep the CLI's session store from this turn's sandbox; a warning if it cannot."""
    if not harness.session_dir:
        return None
    provider = engine.provider(sb.provider)
    parent, _, name = harness.session_dir.rpartition("/")
    packed = await provider.run(sb, ["tar", "-czf", SESSION_ARCHIVE, "-C", parent, name],
                                timeout=300)
    if packed.exit_code != 0:
        return render.run_warning(Why(RunWarning.SESSION_NOT_SAVED,
                                      said=redact(tail(packed.output, 300))))
    data = await provider.copy_out(sb, SESSION_ARCHIVE, max_bytes=SESSION_MAX_BYTES)
    path = session_archive(engine, run)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return None


async def restore_session(engine: StepContext, run: Run, sb: Any, harness: Any) -> None:
    """The previous turn's session store in this sandbox, so the agent can resume it.

    Without it the CLI's resume fails, and that turn is reported as failed."""
    before = previous_turn(engine, run)
    path = session_archive(engine, before) if before and harness.session_dir else None
    if path is None or not path.exists():
        return
    provider = engine.provider(sb.provider)
    await provider.copy_in(sb, {SESSION_ARCHIVE: path.read_bytes()}, mode=0o600)
    parent = harness.session_dir.rpartition("/")[0]
    await must(provider, sb, ["tar", "-xzf", SESSION_ARCHIVE, "-C", parent],
               "restoring the agent's session")


def checkout_for(run: Run) -> list[str]:
    if run.turn == 1:
        return ["git", "checkout", "-q", "-b", run.branch, run.base_sha]
    return ["git", "checkout", "-q", "-B", run.branch, f"origin/{run.branch}"]


def build_prompt(job: Job, run: Run, spec: Any, review: str = "") -> str:
    verify_cmd = spec.verify.command if spec.verify else "the repository's tests"
    parts = [
        AGENT_PREAMBLE.format(repo=job.thread.repo, branch=run.branch, verify=verify_cmd),
        "",
        f"Issue #{job.thread.number}: {job.title}",
        job.body.strip(),
        "",
    ]
    if review:
        parts += ["Review comments on the pull request so far:", review, ""]
    parts += ["Request:" if run.turn == 1 else f"Request for turn {run.turn} (on the open PR):",
              run.prompt]
    return "\n".join(parts)


async def review_context(ops: RepoOps, run: Run, limit: int = 6000) -> str:
    """The PR's reviews and line comments, oldest first, for a follow-up turn's prompt."""
    lines = []
    async for review in ops.gh.getiter(f"{ops.base}/pulls/{run.pr_number}/reviews"):
        if (review.get("body") or "").strip():
            lines.append(f"- @{review['user']['login']} ({review['state'].lower()}): "
                         f"{review['body'].strip()}")
    async for comment in ops.gh.getiter(f"{ops.base}/pulls/{run.pr_number}/comments"):
        where = f"{comment.get('path')}:{comment.get('line') or comment.get('original_line')}"
        lines.append(f"- @{comment['user']['login']} on {where}: {comment['body'].strip()}")
    return redact("\n".join(lines))[:limit]


# -- watching ----------------------------------------------------------------------


async def watch_agent(engine: StepContext, run: Run) -> None:
    from sandbox.provider import Sandbox
    from sandbox.watch import RunWatch

    if run.process_id is None or run.sandbox is None:
        # A crash between taking the slot and starting the agent: start again.
        engine.patch_run(run.id, state=RunState.QUEUED)
        return
    provider = engine.provider(run.sandbox["provider"])
    sb = Sandbox.model_validate(run.sandbox)
    watch = RunWatch.model_validate(run.watch) if run.watch else RunWatch(
        started_at=run.started_at or time.time(), max_minutes=run.env.get("max_minutes"))
    now = time.time()
    status = None
    if run.cancel_requested:
        state = watch.cancel(now)
    else:
        try:
            status = await asyncio.wait_for(provider.observe(sb, run.process_id),
                                            PROVIDER_CALL_TIMEOUT_S)
            state = watch.observe(status, now)
        except (TimeoutError, SandboxError, OSError) as exc:
            # A sandbox that hangs or breaks its provider's calls loses its own run only.
            state = watch.fail(now, f"hangar could not observe the agent: {exc or 'timed out'}")
    engine.patch_run(run.id, watch=watch.model_dump(mode="json"))
    if state is None:
        engine.patch_run(run.id, retry_at=now + engine.settings.run_watch_interval_seconds)
        return
    if watch.needs_stop:
        try:
            await asyncio.wait_for(provider.stop(sb, run.process_id), PROVIDER_CALL_TIMEOUT_S)
        except (TimeoutError, SandboxError, OSError) as exc:
            run = engine.patch_run(run.id, warnings=[
                *run.warnings, render.run_warning(Why(RunWarning.STOP_FAILED, error=exc))])
    if watch.state.value == RunState.LOST.value and watch.reason:
        engine.note(run.job_id, f"{run.id} lost: {watch.reason}")
    exit_code = status.exit_code if status is not None and status.state == "exited" else None
    await agent_stopped(engine, run, sb, RunState(state.value), exit_code)


async def agent_stopped(
    engine: StepContext, run: Run, sb: Any, state: RunState, exit_code: int | None
) -> None:
    from sandbox.envspec import EnvSpec
    from sandbox.harness import harness_for

    provider = engine.provider(sb.provider)
    try:
        log_text = (await asyncio.wait_for(provider.copy_out(sb, AGENT_LOG),
                                           PROVIDER_CALL_TIMEOUT_S)).decode("utf-8", "replace")
    except (TimeoutError, SandboxError, OSError) as exc:
        # Absent, or not a regular file (a FIFO, a link out): the agent's claim is empty.
        log.warning("agent log unreadable", extra={"run": run.id, "reason": str(exc)})
        log_text = ""
    harness = harness_for(EnvSpec.model_validate(run.env))
    agent = harness.parse(log_text).model_dump()
    if agent.get("summary"):
        agent["summary"] = redact(agent["summary"])
    agent.update(model_facts(engine, run, agent))
    agent.update(egress_facts(engine, run))
    warnings = list(run.warnings)
    try:
        problem = await save_session(engine, run, sb, harness)
    except Exception as exc:
        problem = render.run_warning(Why(RunWarning.SESSION_NOT_SAVED, said=exc))
    if problem:
        warnings.append(problem)
    engine.patch_run(
        run.id, state=state, exit_code=exit_code if exit_code is not None else -1,
        finished_at=time.time(), agent=agent, stage=RunStage.PUBLISHING, warnings=warnings,
    )
    wake_queued(engine)  # its slot is free
    engine.note(run.job_id, f"{run.id} agent {state.value}"
                + (f" with code {exit_code}" if exit_code is not None else ""))


def model_facts(engine: StepContext, run: Run, agent: dict) -> dict:
    """What the gateway saw of this run's model traffic, and when a rate limit resets."""
    usage = engine.models.usage(run.id) if engine.models is not None else None
    if usage is None:
        return {}
    facts: dict[str, Any] = {"model": {
        "requests": usage.requests, "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens, "cost_usd": usage.cost_usd,
        "last_status": usage.last_status, "last_error": usage.last_error}}
    reset_at = usage.reset_at
    if reset_at is None:
        limit = engine.models.limit(usage.credential)
        reset_at = limit.reset_at if limit else None
    facts["model"]["reset_at"] = reset_at
    if agent.get("failure") is None and usage.last_status in (401, 403, 429, 502):
        # The CLI gave up without saying why; the gateway knows.
        from sandbox.harness import classify_failure

        facts["failure"] = classify_failure(usage.last_status, usage.last_error or "")
        facts["http_status"] = usage.last_status
        facts["error_message"] = usage.last_error
    return facts


# -- publishing ----------------------------------------------------------------------


async def publish(engine: StepContext, run: Run) -> None:
    """hangar pushes the branch itself; nothing committed is lost (app.publishing)."""
    from app import publishing

    await publishing.publish(engine, run)


# -- collecting ----------------------------------------------------------------------


async def collect(engine: StepContext, run: Run) -> None:
    job = engine.get_job(run.job_id)
    ops = await engine.repo_ops(job.thread)
    # What hangar just pushed is what GitHub holds; else (the agent pushed, or a `verify`
    # of the branch) GitHub's branch says.
    head = run.published_head or await ops.branch_sha(run.branch)
    compare = await ops.compare(run.base_branch, head) if head else None
    if head is None or not compare or compare["ahead_by"] == 0:
        if run.kind == "agent" and run.pr_number is None:
            engine.patch_run(run.id, stage=RunStage.DONE, outcome="no_changes", head_sha=head)
            engine.note(run.job_id, f"{run.id} made no commits")
            return
    config, _ = parse_repo_config(await engine.config_text(ops, run.base_branch,
                                                          (compare or {}).get("base_sha")))
    sensitive = sensitive_files(compare, config.land.sensitive_paths)
    run = engine.patch_run(run.id, head_sha=head, compare=compare, sensitive=sensitive)
    pr = await find_or_open_pr(engine, ops, job, run)
    fresh = engine.get_run(run.id)
    run = engine.patch_run(run.id, pr_number=pr["number"],
                           posting=[k for k in fresh.posting if k != "pr"])
    if run.kind != "verify":  # `/hangar verify` reports a verification, not an agent's turn
        await upsert_check(engine, ops, run, AGENT_CHECK, head, status="completed",
                           conclusion=agent_conclusion(run), output=render.agent_check_output(run))
    # Only now is this stage's work all on GitHub; a crash before here repeats it.
    engine.patch_run(run.id, stage=RunStage.VERIFYING)
    engine.note(run.job_id, f"{run.id} PR #{pr['number']} at {head[:7]}")


def agent_conclusion(run: Run) -> str:
    if run.state == RunState.CANCELLED:
        return "cancelled"
    if run.state == RunState.TIMED_OUT:
        return "timed_out"
    if run.agent.get("failure"):
        return "failure"  # the model refused, was unreachable, or the session was lost
    # Neutral, not failure: the agent's exit is a fact to show, not a gate on the PR.
    return "success" if run.exit_code == 0 else "neutral"


async def find_or_open_pr(engine: StepContext, ops: RepoOps, job: Job, run: Run) -> dict:
    """The run's PR with its body up to date; opened when there is none. The branch's PRs
    are listed first only when an open may have been sent already (the mark is written
    before it) or GitHub says one exists: a first open costs one call."""
    body = render.pr_body(job, run)
    if run.pr_number is not None:
        pr = await ops.get_pr(run.pr_number)
    elif "pr" in run.posting:
        pr = await ops.find_pr(run.branch)
    else:
        run = engine.patch_run(run.id, posting=[*run.posting, "pr"])
        pr = None
    if pr is None:
        try:
            pr = await ops.create_pr(title=render.pr_title(job), body=body, head=run.branch,
                                     base=run.base_branch)
        except BadRequest as exc:
            # 422 "A pull request already exists": someone opened it from hangar's branch.
            pr = await ops.find_pr(run.branch) if int(exc.status_code) == 422 else None
            if pr is None:
                raise
        else:
            engine.note(job.id, f"opened PR #{pr['number']}")
            return pr
    if pr.get("body") != body:
        await ops.update_pr(pr["number"], body=body)
    return pr


# -- verifying -----------------------------------------------------------------------


async def verify(engine: StepContext, run: Run) -> None:
    job = engine.get_job(run.job_id)
    ops = await engine.repo_ops(job.thread)
    head = await ops.branch_sha(run.branch) if run.kind == "verify" else run.head_sha
    if run.kind == "verify" and head != run.head_sha:
        compare = await ops.compare(run.base_branch, head)
        run = engine.patch_run(run.id, head_sha=head, compare=compare)
    spec, _ = await environment_for(engine, ops, run.base_branch,
                                    (run.compare or {}).get("base_sha"))
    if spec.verify is None:
        verification = Verification(command="", head_sha=head, passed=None,
                                    **trouble(Why(VerifyTrouble.NO_VERIFY_COMMAND, env=spec.name)))
    else:
        await upsert_check(engine, ops, run, VERIFY_CHECK, head, status="in_progress",
                           output=verify_words.verifying_output(spec.verify.command, head))
        verification = await verify_in_clean_sandbox(engine, run, job, spec, head)
    run = engine.patch_run(run.id, verification=verification)
    # The PR's body first: once the check says completed, everything says the same.
    pr = await ops.update_pr(run.pr_number, body=render.pr_body(job, run)) if run.pr_number \
        else None
    await upsert_check(engine, ops, run, VERIFY_CHECK, head, status="completed",
                       conclusion=verify_conclusion(verification),
                       output=render.verify_check_output(verification),
                       actions=verify_actions(verification))
    # GitHub's answer to the body edit is the PR as the turn ends: auto-fix starts there.
    engine.patch_run(run.id, stage=RunStage.DONE, outcome="pr",
                     pr_seen=ghops.pr_facts(pr) if pr else None)
    engine.note(run.job_id, f"{run.id} verification "
                + {True: "passed", False: "failed", None: "could not run"}[verification.passed])


def verify_conclusion(v: Verification) -> str:
    # A verification that did not run is no pass: a person must act, and nothing lands.
    if v.passed is None:
        return "action_required"
    return "success" if v.passed else "failure"


def verify_actions(v: Verification) -> list[dict]:
    return verify_words.verify_actions(v.passed)


class VerifyTrouble(StrEnum):
    """Why verification did not run, or did not finish (worded by render.verify)."""

    NO_VERIFY_COMMAND = "no_verify_command"
    SANDBOX_FAILED = "sandbox_failed"
    INSTALL_FAILED = "install_failed"
    TIMED_OUT = "timed_out"


def trouble(why: Why) -> dict[str, str | None]:
    """A Verification's `error` and `fix`, as render words them."""
    return {"error": verify_words.error(why), "fix": verify_words.fix(why)}


async def verify_in_clean_sandbox(
    engine: StepContext, run: Run, job: Job, spec: Any, head_sha: str
) -> Verification:
    """A new sandbox without model credentials runs the verify command on exactly head_sha;
    the connections its install and verify command were refused go with the result."""
    verification = await _verify(engine, run, job, spec, head_sha)
    blocked = refusals(engine, verify_key(run.id))
    return verification.model_copy(update={"egress_blocked": blocked})


async def _verify(
    engine: StepContext, run: Run, job: Job, spec: Any, head_sha: str
) -> Verification:
    provider = engine.provider(spec.provider)
    started = time.time()
    command = spec.verify.command
    try:
        sb = await prepare_sandbox(engine, run, job, spec, role="verify",
                                   checkout=["git", "checkout", "-q", "--detach", head_sha])
    except Exception as exc:
        return Verification(command=command, head_sha=head_sha, passed=None,
                            **trouble(Why(VerifyTrouble.SANDBOX_FAILED, error=exc)))
    try:
        # The verify command runs the agent's code: it gets no git credential at all, and
        # the web only through the egress proxy, as the agent did.
        engine.tokens.revoke(sb.id)
        await provider.run(sb, ["rm", "-f", f"{HOME}/.git-credentials", f"{HOME}/.gitconfig"])
        egress = egress_env(engine, verify_key(run.id), sb, spec, step="verify")
        if spec.install and sb.labels.get("hangar.env_current") != "yes":
            setup = await provider.run(sb, ["sh", "-c", spec.install], cwd=REPO, env=egress,
                                       timeout=spec.verify.timeout_minutes * 60)
            if setup.exit_code != 0:
                return Verification(
                    command=command, head_sha=head_sha, passed=None, attempts=0,
                    exit_code=setup.exit_code, output_tail=redact(tail(setup.output)),
                    **trouble(Why(VerifyTrouble.INSTALL_FAILED)),
                    duration_s=time.time() - started)
        attempts, outputs, result = 0, [], None
        for _ in range(1 + spec.verify.retries):
            attempts += 1
            result = await provider.run(sb, ["sh", "-c", command], cwd=REPO, env=egress,
                                        timeout=spec.verify.timeout_minutes * 60)
            outputs.append(result.output)
            if result.exit_code == 0:
                break
        passed = result.exit_code == 0
        error = (verify_words.error(Why(VerifyTrouble.TIMED_OUT,
                                        minutes=spec.verify.timeout_minutes))
                 if result.timed_out else None)
        return Verification(
            command=command, head_sha=head_sha, passed=passed, exit_code=result.exit_code,
            attempts=attempts, flaky=passed and attempts > 1, error=error,
            output_tail=redact(tail(outputs[-1])), duration_s=time.time() - started,
        )
    finally:
        end_egress(engine, sb, "verify")
        await provider.destroy(sb)


# -- the job and its status comment ------------------------------------------------


def wake_job(engine: StepContext, run_id: str) -> None:
    """After a run's step: a finished run may be its job's last, so the job looks."""
    run = engine.get_run(run_id)
    if run is not None and run.finished:
        engine.wake(run.job_id)


async def advance_job(engine: StepContext, job_id: str) -> None:
    job = engine.get_job(job_id)
    if job is None:
        return
    if job.state != JobState.ACTIVE:
        if job.status_due_at and job.status_due_at <= time.time():
            await refresh_status(engine, job_id)  # the edit folded while the job ended
        return
    runs = engine.runs_of(job_id)
    if job.attempts > 1 and not job.ranking and runs and all(r.finished for r in runs):
        await rank_attempts(engine, job)
    if runs and all(r.finished for r in runs):
        failed = all(r.stage == RunStage.ERROR for r in runs)
        cancelled = all(r.outcome == "cancelled" for r in runs)
        state = JobState.FAILED if failed else JobState.CANCELLED if cancelled else JobState.DONE
        engine.patch_job(job_id, state=state)
    await refresh_status(engine, job_id)


async def refresh_status(engine: StepContext, job_id: str, *, force: bool = False) -> None:
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


async def _refresh_status(engine: StepContext, job_id: str, *, force: bool) -> None:
    job = engine.get_job(job_id)
    if job is None:
        return
    runs = engine.runs_of(job_id)
    prs = sorted({r.pr_number for r in runs if r.pr_number})
    # A PR's thread gets the comment once a turn on it is over: until then its body and
    # check runs say what is happening, and the comment would be edited moments later.
    threads = [job.thread.number, *(n for n in prs if n in job.status_comments
                                    or n in job.status_posting
                                    or any(r.finished for r in runs if r.pr_number == n))]
    from app.egress import running_refusal_notes

    said = engine.pr_status(job.thread.repo, prs)  # what landing and auto-fix say
    notes = [*model_pause_notes(engine, runs), *running_refusal_notes(engine, runs),
             *said.notes]
    body = render.status_comment(job, runs, queue=queue_positions(engine), notes=notes,
                                 landed=said.landed)
    ops = None
    interval = engine.settings.status_edit_interval_seconds
    due = 0.0
    for number in threads:
        if not force and job.rendered.get(number) == body:
            continue
        next_edit = job.edited_at.get(number, 0.0) + interval
        if not force and number in job.status_comments and next_edit > time.time():
            due = min(due or next_edit, next_edit)
            continue
        ops = ops or await engine.repo_ops(job.thread)
        known = job.status_comments.get(number)
        # Only a post that may have been made before a crash is looked for first: a
        # thread's first comment costs one call, not a listing of the thread too.
        may_exist = number in job.status_posting
        if known is None and not may_exist:
            job = engine.patch_job(job_id, status_posting=[*job.status_posting, number])
        comment_id = await ops.upsert_comment(number, render.status_marker(job.id), body,
                                              known_id=known, look_first=may_exist)
        job = engine.get_job(job_id)
        job = engine.patch_job(job_id, status_comments={**job.status_comments, number: comment_id},
                               status_posting=[n for n in job.status_posting if n != number],
                               rendered={**job.rendered, number: body},
                               edited_at={**job.edited_at, number: time.time()})
    if job.status_due_at != due:
        engine.patch_job(job_id, status_due_at=due)


async def rank_attempts(engine: StepContext, job: Job) -> None:
    """Rank the finished attempts of `/hangar try N`, with CI read from GitHub."""
    from app.ranking import ci_verdict, rank

    ops = await engine.repo_ops(job.thread)
    latest = render.latest_turns(engine.runs_of(job.id))
    ci = {}
    for run in latest:
        if run.pr_number and run.head_sha:
            ci[run.attempt] = ci_verdict(*await read_ci(ops, run.head_sha))
    ranking = [{"place": r.place, "attempt": r.run.attempt, "pr": r.run.pr_number,
                "why": r.why} for r in rank(latest, ci)]
    engine.patch_job(job.id, ranking=ranking)


async def reap_orphans(engine: StepContext) -> None:
    """Sandboxes whose run finished are destroyed, their tokens revoked; unpushed commits
    are published (or held) first. A sandbox whose run hangar does not know is kept: a
    rebuild from GitHub may know it; after one it is reported, never destroyed."""
    from app.publishing import rescue_commits

    for name in {"local", *(s.provider for s in engine.envs.values())}:
        try:
            provider = engine.provider(name)
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
