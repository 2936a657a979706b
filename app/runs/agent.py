"""The agent's turn: its sandbox started with the prompt, the model route and the
previous turn's session; watched until it stops; what it said and did recorded."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from app import render
from app.egress import egress_env, egress_facts
from app.envbuilds import environment_for
from app.github.ops import RepoOps
from app.models import Job, Run, RunKind, RunOutcome, RunStage, RunState, RunWarning
from app.redact import redact, redact_data, tail
from app.render.reasons import Why
from app.repoconfig import CODEOWNERS_PATHS, CONFIG_PATH
from app.runs.costs import turn_usage
from app.runs.ending import Ending, trouble_of
from app.runs.instructions import instructions_prompt, read_instructions
from app.runs.progress import last_steps, show_progress
from app.runs.queue import (
    Wait,
    credential_key,
    credential_pause,
    model_pause,
    slot_free,
    usage_windows,
    wake_queued,
)
from app.runs.review_thread import is_hangar_reply, read_review_threads, review_threads_prompt
from app.runs.sandbox import (
    AGENT_CHECK,
    PROVIDER_CALL_TIMEOUT_S,
    REPO,
    must,
    prepare_sandbox,
    upsert_check,
)
from app.runs.thread import attach_images, read_thread, thread_prompt
from sandbox.provider import SandboxError

if TYPE_CHECKING:
    from app.runs.context import RunsContext

log = logging.getLogger(__name__)

AGENT_LOG = "/workspace/.hangar/agent.log"

AGENT_PREAMBLE = (
    "You are working in a git checkout of {repo} on branch {branch}. Make the change "
    "asked for below and commit it to the current branch with clear commit messages. "
    "Do not push and do not open a pull request: hangar pushes your branch and opens the "
    "pull request itself, then verifies it in a clean sandbox with `{verify}`."
)

async def start_agent(engine: RunsContext, run: Run) -> None:
    if run.cancel_requested:
        engine.patch_run(run.id, state=RunState.CANCELLED, stage=RunStage.DONE,
                         outcome=RunOutcome.CANCELLED, finished_at=time.time(),
                         ending={"code": Ending.CANCELLED}, waiting=None)
        wake_queued(engine)  # a place in the queue came free
        return
    if run.kind == RunKind.VERIFY:
        return
    job = engine.existing_job(run.job_id)
    ops = await engine.github.repo_ops(job.thread)
    if not run.env:
        # The environment says which model credential, and so which queue, a run is in.
        # Its config is read at the base's commit, so later steps find it read already,
        # with the code owners the PR's review request reads there: one query for both.
        base_sha = await ops.branch_sha(job.base_branch)
        await engine.github.read_at(ops, base_sha, [CONFIG_PATH, *CODEOWNERS_PATHS],
                             ref=job.base_branch)
        spec, problems = await environment_for(engine, ops, job.base_branch, base_sha)
        engine.patch_run(run.id, env=spec.model_dump(), warnings=[*run.warnings, *problems])
        return
    pause = model_pause(engine, run)
    if pause is not None:
        # The credential is at its threshold: wait for the reset (or, with none known, look
        # again for a fresh reading); a person's resume wakes it at once. The status
        # comment says so from the pause itself (app.runs.queue.model_pauses).
        engine.patch_run(run.id, retry_at=pause.until or time.time()
                         + engine.settings.poll_interval_seconds, waiting=None)
        return
    if not slot_free(engine, run):
        # A slot, or a place nearer the front, coming free wakes the run (wake_queued);
        # the slow poll takes it again in case that word is lost.
        engine.patch_run(run.id, retry_at=time.time() + engine.settings.poll_interval_seconds,
                         waiting={"code": Wait.SLOT})
        return
    if not engine.fleet.reserve(f"{run.id}:agent", waiter=run.id):
        # Every sandbox hangar may hold is in use (HANGAR_MAX_SANDBOXES): one ending
        # wakes the run, the slow poll in case that word is lost.
        engine.patch_run(run.id, retry_at=time.time() + engine.settings.poll_interval_seconds,
                         waiting={"code": Wait.SANDBOX})
        return
    # Take the slot before the next await, so no other step counts it free.
    run = engine.patch_run(run.id, state=RunState.RUNNING, started_at=time.time(),
                           waiting=None)
    wake_queued(engine)  # the runs behind it move up
    from sandbox.envspec import EnvSpec

    spec = EnvSpec.model_validate(run.env)
    base_sha = run.base_sha
    if base_sha is None:
        base_sha = await ops.branch_sha(job.base_branch)
        if base_sha is None:
            raise RuntimeError(f"the base branch {job.base_branch} does not exist on GitHub")
        run = engine.patch_run(run.id, base_sha=base_sha)
    start_sha = run.start_sha
    if start_sha is None:
        start = base_sha if run.turn == 1 else await ops.branch_sha(run.branch)
        start_sha = start or base_sha
        run = engine.patch_run(run.id, start_sha=start_sha)
    # From its start, the turn has a `hangar / agent` check run saying it works.
    await upsert_check(engine, ops, run, AGENT_CHECK, start_sha, status="in_progress",
                       output=render.agent_check_started(run))
    provider = engine.providers[spec.provider]
    sb = await prepare_sandbox(engine, run, job, spec, role="agent",
                               checkout=checkout_for(run, base_sha))
    from sandbox.harness import harness_for

    harness = harness_for(spec)
    review = await review_context(ops, run) if run.kind == RunKind.FOLLOWUP else ""
    # Asked in a review thread (or by a review's comments): the turn reads those threads.
    threads = (review_threads_prompt(await read_review_threads(engine, ops, run))
               if run.review_threads else "")
    thread = ""
    if run.turn == 1:
        # The first turn reads the whole issue thread; its images are copied in by hangar,
        # which alone holds the token that may fetch them.
        context = await read_thread(engine, ops, job)
        await attach_images(engine, job, context)
        if context.images:
            await provider.copy_in(sb, {i.path: i.data for i in context.images}, mode=0o644)
        thread = thread_prompt(context)
    if run.turn > 1:
        await restore_session(engine, run, sb, harness)
    # Every turn carries the operator's and the repository's instructions, recorded.
    told = await read_instructions(engine, ops, job.base_branch, run.base_sha, spec)
    run = engine.patch_run(run.id, instructions=told)
    # The agent gets a gateway URL and a token for this sandbox, never the model key.
    route = model_route(engine, run, sb, spec)
    prompt = build_prompt(job, run, spec, review, thread, instructions_prompt(told),
                          review_threads=threads)
    argv, env = harness.command(prompt, turn=run.turn,
                                session_id=previous_session(engine, run), model=route)
    env.update(egress_env(engine, run.id, sb, spec))  # everything else: the egress proxy
    files = harness.files(route)
    if files:
        await provider.copy_in(sb, files, mode=0o755 if spec.harness == "script" else 0o600)
    process_id = await provider.start(sb, argv, env=env, cwd=REPO, log_path=AGENT_LOG)
    engine.patch_run(run.id, process_id=process_id, watch={})
    engine.note(run.job_id, f"{run.id} agent running in {sb.id}")


def previous_turn(engine: RunsContext, run: Run) -> Run | None:
    earlier = [r for r in engine.runs_of(run.job_id)
               if r.attempt == run.attempt and r.turn < run.turn and r.kind != RunKind.VERIFY]
    return max(earlier, key=lambda r: r.turn) if earlier else None


def previous_session(engine: RunsContext, run: Run) -> str | None:
    """The agent session of this attempt's previous turn, for harnesses that resume."""
    before = previous_turn(engine, run)
    return before.agent.get("session_id") if before else None


def model_route(engine: RunsContext, run: Run, sb: Any, spec: Any) -> Any:
    from proxy.gateway import model_base_url
    from sandbox.harness import ModelRoute

    if spec.harness == "script" or engine.models is None:
        return None
    token = engine.models.issue(sb.id, credential=spec.model_credential_env, run_id=run.id)
    # A subscription's token (by the name rule of app/web/upstream.py): the CLI runs as a plan's.
    return ModelRoute(model_base_url(engine.settings.proxy_base_url, sb.id), token,
                      subscription="OAUTH" in spec.model_credential_env)



def session_archive(engine: RunsContext, run: Run) -> Any:
    return engine.settings.data_dir / "sessions" / f"{run.id}.tgz"


SESSION_ARCHIVE = "/workspace/.hangar/session.tgz"
SESSION_MAX_BYTES = 256 * 2**20


async def save_session(engine: RunsContext, run: Run, sb: Any, harness: Any) -> str | None:
    """Keep the CLI's session store from this turn's sandbox; a warning if it cannot."""
    if not harness.session_dir:
        return None
    provider = engine.providers[sb.provider]
    parent, _, name = harness.session_dir.rpartition("/")
    packed = await provider.run(sb, ["tar", "-czf", SESSION_ARCHIVE, "-C", parent, name],
                                timeout=300, offline=True)
    if packed.exit_code != 0:
        return render.run_warning(Why(RunWarning.SESSION_NOT_SAVED,
                                      said=redact(tail(packed.output, 300))))
    data = await provider.copy_out(sb, SESSION_ARCHIVE, max_bytes=SESSION_MAX_BYTES)
    path = session_archive(engine, run)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return None


async def restore_session(engine: RunsContext, run: Run, sb: Any, harness: Any) -> None:
    """The previous turn's session store in this sandbox, so the agent can resume it.

    Without it the CLI's resume fails, and that turn is reported as failed."""
    before = previous_turn(engine, run)
    path = session_archive(engine, before) if before and harness.session_dir else None
    if path is None or not path.exists():
        return
    provider = engine.providers[sb.provider]
    await provider.copy_in(sb, {SESSION_ARCHIVE: path.read_bytes()}, mode=0o600)
    parent = harness.session_dir.rpartition("/")[0]
    await must(provider, sb, ["tar", "-xzf", SESSION_ARCHIVE, "-C", parent],
               "restoring the agent's session", offline=True)


def checkout_for(run: Run, base_sha: str) -> list[str]:
    if run.turn == 1:
        return ["git", "checkout", "-q", "-b", run.branch, base_sha]
    return ["git", "checkout", "-q", "-B", run.branch, f"origin/{run.branch}"]


def build_prompt(job: Job, run: Run, spec: Any, review: str = "", thread: str = "",
                 instructions: str = "", *, review_threads: str = "") -> str:
    """`thread`: the issue's whole thread as app.runs.thread words it (the first turn);
    without it, the issue's title and body as the command found them. `instructions`: the
    operator's and the repository's (app.runs.instructions). `review_threads`: the
    threads this turn answers (app.runs.review_thread)."""
    verify_cmd = spec.verify.command if spec.verify else "the repository's tests"
    parts = [
        AGENT_PREAMBLE.format(repo=job.thread.repo, branch=run.branch, verify=verify_cmd),
        "",
        *([thread] if thread else [f"Issue #{job.thread.number}: {job.title}",
                                   job.body.strip(), ""]),
    ]
    if instructions:
        parts.append(instructions)
    if review:
        parts += ["Review comments on the pull request so far:", review, ""]
    if review_threads:
        parts += [review_threads]
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
        if is_hangar_reply(comment):
            continue  # hangar's own reply in a thread: its words, not the review's
        where = f"{comment.get('path')}:{comment.get('line') or comment.get('original_line')}"
        lines.append(f"- @{comment['user']['login']} on {where}: {comment['body'].strip()}")
    return redact("\n".join(lines))[:limit]


# -- watching ----------------------------------------------------------------------


async def watch_agent(engine: RunsContext, run: Run) -> None:
    from sandbox.provider import Sandbox
    from sandbox.watch import RunWatch

    if run.process_id is None or run.sandbox is None:
        # A crash between taking the slot and starting the agent: start again.
        engine.patch_run(run.id, state=RunState.QUEUED)
        return
    provider = engine.providers[run.sandbox["provider"]]
    sb = Sandbox.model_validate(run.sandbox)
    watch = RunWatch.model_validate(run.watch) if run.watch else RunWatch(
        started_at=run.started_at or time.time(), max_minutes=run.env.get("max_minutes"))
    now = time.time()
    status = None
    if run.cancel_requested:
        state = watch.cancel(now)
    else:
        try:
            async with asyncio.timeout(PROVIDER_CALL_TIMEOUT_S):
                status = await provider.observe(sb, run.process_id)
            state = watch.observe(status, now)
        except (TimeoutError, SandboxError, OSError) as exc:
            # A sandbox that hangs or breaks its provider's calls loses its own run only.
            state = watch.fail(now, f"hangar could not observe the agent: {exc or 'timed out'}")
    engine.patch_run(run.id, watch=watch.model_dump(mode="json"))
    if state is None:
        # Still working: its latest steps, read at most once an interval (app.runs.progress).
        await show_progress(engine, run, sb, AGENT_LOG, now,
                            timeout=PROVIDER_CALL_TIMEOUT_S)
        engine.patch_run(run.id, retry_at=now + engine.settings.run_watch_interval_seconds)
        # Its end wakes the run at once, where the provider lets hangar wait for it; the
        # look above, every interval, stays what decides.
        engine.providers.exits.watch(run.id, provider, sb, run.process_id,
                                     lambda: engine.wake(run.id))
        return
    if watch.needs_stop:
        try:
            async with asyncio.timeout(PROVIDER_CALL_TIMEOUT_S):
                await provider.stop(sb, run.process_id)
        except (TimeoutError, SandboxError, OSError) as exc:
            engine.note(run.job_id, f"{run.id}: stopping the agent failed: {exc!r}")
            run = engine.patch_run(run.id, warnings=[
                *run.warnings, render.run_warning(Why(RunWarning.STOP_FAILED))])
    if watch.state.value == RunState.LOST.value and watch.reason:
        engine.note(run.job_id, f"{run.id} lost: {watch.reason}")
    exit_code = status.exit_code if status is not None and status.state == "exited" else None
    await agent_stopped(engine, run, sb, RunState(state.value), exit_code)


async def agent_stopped(
    engine: RunsContext, run: Run, sb: Any, state: RunState, exit_code: int | None
) -> None:
    from sandbox.envspec import EnvSpec
    from sandbox.harness import harness_for

    provider = engine.providers[sb.provider]
    try:
        async with asyncio.timeout(PROVIDER_CALL_TIMEOUT_S):
            log_text = (await provider.copy_out(sb, AGENT_LOG)).decode("utf-8", "replace")
    except (TimeoutError, SandboxError, OSError) as exc:
        # Absent, or not a regular file (a FIFO, a link out): the agent's claim is empty.
        log.warning("agent log unreadable", extra={"run": run.id, "reason": str(exc)})
        log_text = ""
    harness = harness_for(EnvSpec.model_validate(run.env))
    await settle_model_requests(engine, run)
    usage = engine.models.usage(run.id) if engine.models is not None else None
    # The stream's readings date from the run's last model answer, as far as hangar knows.
    # The agent's words and its CLI's errors are kept: masked of every secret first.
    agent = redact_data(harness.parse(log_text, at=usage.at if usage else None).model_dump())
    record_stream_usage(engine, run, agent)
    before = previous_turn(engine, run)
    agent["output_tail"] = output_tail(log_text)
    agent["steps"] = last_steps(harness, log_text)  # the agent's account: shown as data
    agent.update(turn_usage(agent, before.agent if before else None, usage))
    agent.update(model_facts(engine, run, agent))
    agent["usage_windows"] = usage_windows(engine, credential_key(run))
    agent.update(egress_facts(engine, run))
    warnings = list(run.warnings)
    try:
        problem = await save_session(engine, run, sb, harness)
    except Exception as exc:  # hangar's side (its data directory): for operators
        engine.note(run.job_id, f"{run.id}: the agent's session could not be saved: {exc!r}")
        problem = render.run_warning(Why(RunWarning.SESSION_NOT_SAVED, said=None))
    if problem:
        warnings.append(problem)
    engine.patch_run(
        run.id, state=state, exit_code=exit_code if exit_code is not None else -1,
        finished_at=time.time(), agent=agent, stage=RunStage.PUBLISHING, warnings=warnings,
        retry_at=0.0,  # its work is published now, not at the next watch's time
    )
    wake_queued(engine)  # its slot is free
    engine.note(run.job_id, f"{run.id} agent {state.value}"
                + (f" with code {exit_code}" if exit_code is not None else ""))


def record_stream_usage(engine: RunsContext, run: Run, agent: dict) -> None:
    """The usage windows the CLI's stream reported go to the credential's ledger."""
    from proxy.usage import Reading

    readings = [Reading(**r) for r in agent.get("rate_limits") or []]
    if readings and engine.models is not None:
        engine.models.record_readings(credential_key(run), readings)


OUTPUT_TAIL_LINES = 40
OUTPUT_TAIL_CHARS = 4000


def output_tail(log_text: str) -> str:
    """The agent's last lines of output, secrets redacted, bounded: shown as data."""
    lines = log_text.rstrip("\n").splitlines()[-OUTPUT_TAIL_LINES:]
    return redact("\n".join(lines))[-OUTPUT_TAIL_CHARS:]


# How long a stopped agent's model requests may take to be recorded as ended (the gateway
# notices the sandbox's side gone within a second).
SETTLE_S = 3.0


async def settle_model_requests(engine: RunsContext, run: Run) -> None:
    """Wait a moment for the gateway to record the end of requests the agent's stop cut."""
    if engine.models is None:
        return
    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline:
        requests = await asyncio.to_thread(engine.models.requests_of, run.id)
        if not any(r["outcome"] == "open" for r in requests):
            return
        await asyncio.sleep(0.2)


def model_facts(engine: RunsContext, run: Run, agent: dict) -> dict:
    """What the gateway saw of this run's model traffic (every request from its first
    byte, and how each ended), and when a rate limit resets."""
    usage = engine.models.usage(run.id) if engine.models is not None else None
    requests = engine.models.requests_of(run.id) if engine.models is not None else []
    if usage is None and not requests:
        return {}
    outcomes: dict[str, int] = {}
    for request in requests:
        outcomes[request["outcome"]] = outcomes.get(request["outcome"], 0) + 1
    facts: dict[str, Any] = {"model": {
        "requests": max(len(requests), usage.requests if usage else 0),
        "input_tokens": usage.input_tokens if usage else 0,
        "output_tokens": usage.output_tokens if usage else 0,
        "cost_usd": usage.cost_usd if usage else None,
        "last_status": usage.last_status if usage else None,
        "last_error": usage.last_error if usage else None,
        "outcomes": outcomes, "trouble": trouble_of(requests, time.time())}}
    if usage is None:
        return facts
    # The model takes requests again at the latest of the refusal's retry-after and the
    # resets of the credential's windows that hold: the later one holds.
    pause = credential_pause(engine, usage.credential)
    resets = [t for t in (usage.reset_at, pause.until if pause else None) if t is not None]
    facts["model"]["reset_at"] = max(resets) if resets else None
    # The CLI gave up without saying why; the gateway knows (its last request failed, and
    # none after it went through; with no request recorded one by one, its last status).
    if (agent.get("failure") is None and (facts["model"]["trouble"] or not requests)
            and usage.last_status in (401, 403, 429, 502)):
        from sandbox.harness import classify_failure

        facts["failure"] = classify_failure(usage.last_status, usage.last_error or "")
        facts["http_status"] = usage.last_status
        facts["error_message"] = usage.last_error
    return facts
