"""A run's life: queued → running → (exited | lost | timed_out | cancelled), then the
result pipeline publish → collect → verify → done.

Each function is one step. It reads the run fresh, acts, and records only what it changed,
so a step cut short by a crash is simply taken again. Facts come from GitHub and from
hangar's clean verify sandbox; the agent's words are kept as a claim.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from app import render
from app.ghops import RepoOps
from app.models import Job, JobState, Run, RunStage, RunState, Verification
from app.redact import redact, tail
from app.repoconfig import parse_repo_config

if TYPE_CHECKING:
    from app.engine import Engine

log = logging.getLogger(__name__)

REPO = "/workspace/repo"
HOME = "/workspace/home"
AGENT_LOG = "/workspace/.hangar/agent.log"
HARDENED_GIT = ["git", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false"]
CLONE_TIMEOUT_S = 600
AGENT_CHECK = "hangar / agent"
VERIFY_CHECK = "hangar / verify"
AGENT_PREAMBLE = (
    "You are working in a git checkout of {repo} on branch {branch}. Make the change "
    "asked for below and commit it to the current branch with clear commit messages. "
    "Do not push and do not open a pull request: hangar pushes your branch and opens the "
    "pull request itself, then verifies it in a clean sandbox with `{verify}`."
)
TERMINAL = (RunState.EXITED, RunState.LOST, RunState.TIMED_OUT, RunState.CANCELLED)


async def advance_run(engine: Engine, run_id: str) -> None:
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
    await refresh_status(engine, run.job_id)


def note_failure(engine: Engine, run_id: str, exc: Exception) -> None:
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
        return
    delay = min(60.0, 2.0 ** failures)
    engine.patch_run(run_id, stage_failures=failures, retry_at=time.time() + delay,
                     warnings=[*run.warnings[-4:], f"retrying after: {reason}"])


# -- starting ----------------------------------------------------------------------


def credential_key(run: Run) -> str:
    """Agents are capped per model credential; script agents share one key."""
    return run.env.get("model_credential_env") or run.env.get("harness") or "unknown"


def queue_positions(engine: Engine) -> dict[str, int]:
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


def slot_free(engine: Engine, run: Run) -> bool:
    key = credential_key(run)
    running = [r for r in engine.active_runs()
               if r.state == RunState.RUNNING and credential_key(r) == key]
    free = engine.settings.max_concurrent_agents - len(running)
    # Only the oldest queued runs of this credential may take its free slots.
    return free > 0 and queue_positions(engine).get(run.id, 1) <= free


async def start_agent(engine: Engine, run: Run) -> None:
    if run.cancel_requested:
        engine.patch_run(run.id, state=RunState.CANCELLED, stage=RunStage.DONE,
                         outcome="cancelled", finished_at=time.time())
        return
    if run.kind == "verify":
        return
    job = engine.get_job(run.job_id)
    ops = await engine.repo_ops(job.thread)
    if not run.env:
        # The environment says which model credential, and so which queue, a run is in.
        spec, problems = await environment_for(engine, ops, job.base_branch)
        engine.patch_run(run.id, env=spec.model_dump(), warnings=[*run.warnings, *problems])
        return
    if not slot_free(engine, run):
        engine.patch_run(run.id, retry_at=time.time() + 1.0)
        return
    # Take the slot before the next await, so no other step counts it free.
    run = engine.patch_run(run.id, state=RunState.RUNNING, started_at=time.time())
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
    argv, env = harness.command(build_prompt(job, run, spec, review), turn=run.turn,
                                session_id=previous_session(engine, run))
    # The model credential goes to the agent process only, never into a file.
    env = {**env, **model_credentials(spec)}
    files = harness.files()
    if files:
        await provider.copy_in(sb, files, mode=0o755)
    process_id = await provider.start(sb, argv, env=env, cwd=REPO, log_path=AGENT_LOG)
    engine.patch_run(run.id, process_id=process_id, watch={})
    engine.note(run.job_id, f"{run.id} agent running in {sb.id}")


def previous_session(engine: Engine, run: Run) -> str | None:
    """The agent session of this attempt's previous turn, for harnesses that resume."""
    earlier = [r for r in engine.runs_of(run.job_id)
               if r.attempt == run.attempt and r.turn < run.turn and r.kind != "verify"]
    if not earlier:
        return None
    return max(earlier, key=lambda r: r.turn).agent.get("session_id")


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


def model_credentials(spec: Any) -> dict[str, str]:
    """The model key for the agent process only, read from hangar's own environment."""
    import os

    name = getattr(spec, "model_credential_env", None)
    if name and os.environ.get(name):
        return {name: os.environ[name]}
    return {}


async def environment_for(engine: Engine, ops: RepoOps, ref: str) -> tuple[Any, list[str]]:
    from sandbox.envspec import EnvSpecError, select_environment

    config, problems = parse_repo_config(await engine.config_text(ops, ref))
    try:
        spec = select_environment(engine.envs, config.environment,
                                  default=default_env_name(engine))
    except EnvSpecError as exc:
        problems.append(str(exc) + "; hangar used the default environment")
        spec = select_environment(engine.envs, None, default=default_env_name(engine))
    return spec, problems


def default_env_name(engine: Engine) -> str:
    return "default" if "default" in engine.envs else sorted(engine.envs)[0]


async def prepare_sandbox(
    engine: Engine, run: Run, job: Job, spec: Any, *, role: str, checkout: list[str]
) -> Any:
    """A sandbox with the repository cloned through the proxy and checked out."""
    from proxy import sandbox_git_files

    provider = engine.provider(spec.provider)
    labels = {"hangar.instance": engine.instance_id, "hangar.run": run.id,
              "hangar.job": job.id, "hangar.role": role}
    for leftover in await provider.list(labels):
        await provider.destroy(leftover)
        engine.tokens.revoke(leftover.id)
    sb = await provider.create(spec, labels)
    if role == "agent":
        engine.patch_run(run.id, sandbox=sb.model_dump())
    token = engine.tokens.issue(sb.id, repo=job.thread.repo, branch=run.branch,
                                installation_id=job.thread.installation_id)
    files = sandbox_git_files(engine.settings.proxy_base_url, sb.id, token, job.clone_url,
                              home=HOME)
    identity = (b"[user]\n\tname = hangar agent\n\temail = agent@hangar.invalid\n"
                if role == "agent" else b"")
    gitconfig = f"{HOME}/.gitconfig"
    files[gitconfig] = files[gitconfig] + identity
    await provider.copy_in(sb, {gitconfig: files[gitconfig]})
    creds = f"{HOME}/.git-credentials"
    await provider.copy_in(sb, {creds: files[creds]}, mode=0o600)
    try:
        await must(provider, sb, ["git", "clone", "-q", job.clone_url, REPO],
                   "cloning the repository through hangar's proxy")
        await must(provider, sb, checkout, "checking out the branch", cwd=REPO)
    except BaseException:
        await provider.destroy(sb)
        engine.tokens.revoke(sb.id)
        raise
    return sb


async def must(provider: Any, sb: Any, argv: list[str], what: str, *, cwd: str = "/workspace",
               timeout: float = CLONE_TIMEOUT_S) -> str:
    result = await provider.run(sb, argv, cwd=cwd, timeout=timeout)
    if result.exit_code != 0:
        raise RuntimeError(f"{what} failed (exit {result.exit_code}): "
                           f"{redact(tail(result.output, 800))}")
    return result.output


# -- watching ----------------------------------------------------------------------


async def watch_agent(engine: Engine, run: Run) -> None:
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
        status = await provider.observe(sb, run.process_id)
        state = watch.observe(status, now)
    engine.patch_run(run.id, watch=watch.model_dump(mode="json"))
    if state is None:
        engine.patch_run(run.id, retry_at=now + engine.settings.run_watch_interval_seconds)
        return
    if watch.needs_stop:
        await provider.stop(sb, run.process_id)
    exit_code = status.exit_code if status is not None and status.state == "exited" else None
    await agent_stopped(engine, run, sb, RunState(state.value), exit_code)


async def agent_stopped(
    engine: Engine, run: Run, sb: Any, state: RunState, exit_code: int | None
) -> None:
    from sandbox.envspec import EnvSpec
    from sandbox.harness import harness_for

    provider = engine.provider(sb.provider)
    try:
        log_text = (await provider.copy_out(sb, AGENT_LOG)).decode("utf-8", "replace")
    except (FileNotFoundError, OSError):
        log_text = ""
    agent = harness_for(EnvSpec.model_validate(run.env)).parse(log_text).model_dump()
    if agent.get("summary"):
        agent["summary"] = redact(agent["summary"], model_credentials_values(run))
    engine.patch_run(
        run.id, state=state, exit_code=exit_code if exit_code is not None else -1,
        finished_at=time.time(), agent=agent, stage=RunStage.PUBLISHING,
    )
    engine.note(run.job_id, f"{run.id} agent {state.value}"
                + (f" with code {exit_code}" if exit_code is not None else ""))


def model_credentials_values(run: Run) -> list[str]:
    from sandbox.envspec import EnvSpec

    return list(model_credentials(EnvSpec.model_validate(run.env)).values())


# -- publishing ----------------------------------------------------------------------


async def publish(engine: Engine, run: Run) -> None:
    """hangar pushes the branch itself, with hooks and fsmonitor switched off."""
    from sandbox.provider import Sandbox

    if run.sandbox is None:
        engine.patch_run(run.id, stage=RunStage.COLLECTING)
        return
    sb = Sandbox.model_validate(run.sandbox)
    provider = engine.provider(sb.provider)
    warnings = list(run.warnings)
    try:
        status = await provider.run(sb, ["git", "status", "--porcelain"], cwd=REPO, timeout=60)
        dirty = bool(status.output.strip()) and status.exit_code == 0
        ahead = await provider.run(
            sb, ["git", "rev-list", "--count", f"{run.base_sha}..HEAD"], cwd=REPO, timeout=60)
        has_commits = ahead.exit_code == 0 and ahead.output.strip() not in ("", "0")
        if has_commits:
            push = await provider.run(
                sb, [*HARDENED_GIT, "push", "-q", "origin", f"HEAD:refs/heads/{run.branch}"],
                cwd=REPO, timeout=CLONE_TIMEOUT_S)
            if push.exit_code != 0:
                warnings.append("pushing the branch failed: "
                                + redact(tail(push.output, 500)))
    except Exception as exc:
        # A lost sandbox: what the agent pushed itself is still on GitHub.
        dirty = False
        warnings.append(f"could not publish from the sandbox ({exc}); "
                        "collecting what reached GitHub")
    await provider.destroy(sb)
    engine.tokens.revoke(sb.id)
    engine.patch_run(run.id, dirty=dirty, warnings=warnings, stage=RunStage.COLLECTING)


# -- collecting ----------------------------------------------------------------------


async def collect(engine: Engine, run: Run) -> None:
    from app.landing import sensitive_files

    job = engine.get_job(run.job_id)
    ops = await engine.repo_ops(job.thread)
    head = await ops.branch_sha(run.branch)
    compare = await ops.compare(run.base_branch, head) if head else None
    if head is None or not compare or compare["ahead_by"] == 0:
        if run.kind == "agent" and run.pr_number is None:
            engine.patch_run(run.id, stage=RunStage.DONE, outcome="no_changes", head_sha=head)
            engine.note(run.job_id, f"{run.id} made no commits")
            return
    config, _ = parse_repo_config(await engine.config_text(ops, run.base_branch))
    sensitive = sensitive_files(compare, config.land.sensitive_paths)
    run = engine.patch_run(run.id, head_sha=head, compare=compare, sensitive=sensitive)
    pr = await find_or_open_pr(engine, ops, job, run)
    run = engine.patch_run(run.id, pr_number=pr["number"])
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
    # Neutral, not failure: the agent's exit is a fact to show, not a gate on the PR.
    return "success" if run.exit_code == 0 else "neutral"


async def find_or_open_pr(engine: Engine, ops: RepoOps, job: Job, run: Run) -> dict:
    pr = await ops.find_pr(run.branch)
    body = render.pr_body(job, run)
    if pr is None:
        pr = await ops.create_pr(title=render.pr_title(job), body=body, head=run.branch,
                                 base=run.base_branch)
        engine.note(job.id, f"opened PR #{pr['number']}")
    elif pr.get("body") != body:
        await ops.update_pr(pr["number"], body=body)
    return pr


# -- verifying -----------------------------------------------------------------------


async def verify(engine: Engine, run: Run) -> None:
    job = engine.get_job(run.job_id)
    ops = await engine.repo_ops(job.thread)
    head = await ops.branch_sha(run.branch) if run.kind == "verify" else run.head_sha
    if run.kind == "verify" and head != run.head_sha:
        compare = await ops.compare(run.base_branch, head)
        run = engine.patch_run(run.id, head_sha=head, compare=compare)
    spec, _ = await environment_for(engine, ops, run.base_branch)
    if spec.verify is None:
        verification = Verification(command="", head_sha=head, passed=None,
                                    error="the environment has no verify command")
    else:
        await upsert_check(
            engine, ops, run, VERIFY_CHECK, head, status="in_progress",
            output={"title": "Verifying", "summary": f"`{spec.verify.command}` on `{head[:7]}` "
                                                     "in a clean sandbox"})
        verification = await verify_in_clean_sandbox(engine, run, job, spec, head)
    run = engine.patch_run(run.id, verification=verification)
    # The PR's body first: once the check says completed, everything says the same.
    if run.pr_number:
        await ops.update_pr(run.pr_number, body=render.pr_body(job, run))
    await upsert_check(engine, ops, run, VERIFY_CHECK, head, status="completed",
                       conclusion=verify_conclusion(verification),
                       output=render.verify_check_output(verification),
                       actions=verify_actions(verification))
    engine.patch_run(run.id, stage=RunStage.DONE, outcome="pr")
    engine.note(run.job_id, f"{run.id} verification "
                + {True: "passed", False: "failed", None: "could not run"}[verification.passed])


async def upsert_check(engine: Engine, ops: RepoOps, run: Run, name: str, head: str,
                       **fields: Any) -> None:
    """Create or update this run's check run `name` on head, remembering its id."""
    key = f"{name}@{head}"
    check_id = await ops.upsert_check_run(name, head, run.id, known_id=run.check_ids.get(key),
                                          **fields)
    if run.check_ids.get(key) != check_id:
        fresh = engine.get_run(run.id)
        engine.patch_run(run.id, check_ids={**fresh.check_ids, key: check_id})


def verify_conclusion(v: Verification) -> str:
    if v.passed is None:
        return "neutral"
    return "success" if v.passed else "failure"


def verify_actions(v: Verification) -> list[dict]:
    actions = [{"label": "Verify again", "description": "Run verification again",
                "identifier": "verify"}]
    if v.passed is False:
        actions.append({"label": "Fix with hangar", "description": "Start an auto-fix turn",
                        "identifier": "autofix"})
    return actions


async def verify_in_clean_sandbox(
    engine: Engine, run: Run, job: Job, spec: Any, head_sha: str
) -> Verification:
    """A new sandbox without model credentials runs the verify command on exactly head_sha."""
    provider = engine.provider(spec.provider)
    started = time.time()
    command = spec.verify.command
    try:
        sb = await prepare_sandbox(engine, run, job, spec, role="verify",
                                   checkout=["git", "checkout", "-q", "--detach", head_sha])
    except Exception as exc:
        return Verification(command=command, head_sha=head_sha, passed=None,
                            error=f"could not prepare the sandbox: {exc}"[:500])
    try:
        # The verify command runs the agent's code: it gets no git credential at all.
        engine.tokens.revoke(sb.id)
        await provider.run(sb, ["rm", "-f", f"{HOME}/.git-credentials", f"{HOME}/.gitconfig"])
        if spec.install:
            setup = await provider.run(sb, ["sh", "-c", spec.install], cwd=REPO,
                                       timeout=spec.verify.timeout_minutes * 60)
            if setup.exit_code != 0:
                return Verification(
                    command=command, head_sha=head_sha, passed=None, attempts=0,
                    exit_code=setup.exit_code, output_tail=redact(tail(setup.output)),
                    error="the install step failed", duration_s=time.time() - started)
        attempts, outputs, result = 0, [], None
        for _ in range(1 + spec.verify.retries):
            attempts += 1
            result = await provider.run(sb, ["sh", "-c", command], cwd=REPO,
                                        timeout=spec.verify.timeout_minutes * 60)
            outputs.append(result.output)
            if result.exit_code == 0:
                break
        passed = result.exit_code == 0
        error = (f"timed out after {spec.verify.timeout_minutes:g} minutes"
                 if result.timed_out else None)
        return Verification(
            command=command, head_sha=head_sha, passed=passed, exit_code=result.exit_code,
            attempts=attempts, flaky=passed and attempts > 1, error=error,
            output_tail=redact(tail(outputs[-1])), duration_s=time.time() - started,
        )
    finally:
        await provider.destroy(sb)


# -- the job and its status comment ------------------------------------------------


async def advance_job(engine: Engine, job_id: str) -> None:
    job = engine.get_job(job_id)
    if job is None or job.state != JobState.ACTIVE:
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


async def refresh_status(engine: Engine, job_id: str, *, force: bool = False) -> None:
    """Edit the status comment on the issue and on each PR when what it says changed."""
    # Steps of the job, its runs and its land request all refresh; one at a time, so a
    # comment is created once and every later edit finds it.
    async with engine.lock(f"status:{job_id}"):
        await _refresh_status(engine, job_id, force=force)


async def _refresh_status(engine: Engine, job_id: str, *, force: bool) -> None:
    job = engine.get_job(job_id)
    if job is None:
        return
    runs = engine.runs_of(job_id)
    threads = [job.thread.number, *sorted({r.pr_number for r in runs if r.pr_number})]
    body = render.status_comment(job, runs, queue=queue_positions(engine),
                                 notes=status_notes(engine, job, threads[1:]),
                                 landed=landed_prs(engine, job.thread.repo, threads[1:]))
    ops = None
    for number in threads:
        if not force and job.rendered.get(number) == body:
            continue
        ops = ops or await engine.repo_ops(job.thread)
        comment_id = await ops.upsert_comment(
            number, render.status_marker(job.id), body, known_id=job.status_comments.get(number)
        )
        job = engine.get_job(job_id)
        engine.patch_job(job_id, status_comments={**job.status_comments, number: comment_id},
                         rendered={**job.rendered, number: body})


async def rank_attempts(engine: Engine, job: Job) -> None:
    """Rank the finished attempts of `/hangar try N`, with CI read from GitHub."""
    from app.ranking import ci_verdict, rank

    ops = await engine.repo_ops(job.thread)
    latest = render.latest_turns(engine.runs_of(job.id))
    ci = {}
    for run in latest:
        if run.pr_number and run.head_sha:
            checks = await ops.gh.getitem(f"{ops.base}/commits/{run.head_sha}/check-runs")
            status = await ops.gh.getitem(f"{ops.base}/commits/{run.head_sha}/status")
            ci[run.attempt] = ci_verdict(checks.get("check_runs", []), status.get("statuses", []))
    ranking = [{"place": r.place, "attempt": r.run.attempt, "pr": r.run.pr_number,
                "why": r.why} for r in rank(latest, ci)]
    engine.patch_job(job.id, ranking=ranking)


def landed_prs(engine: Engine, repo: str, pr_numbers: list[int]) -> list[int]:
    from app.landing import LandRequest, LandState, land_id

    return [n for n in pr_numbers
            if (r := engine.store.get("land", land_id(repo, n), LandRequest))
            and r.state == LandState.LANDED]


def status_notes(engine: Engine, job: Job, pr_numbers: list[int]) -> list[str]:
    """What landing and auto-fix have to say about each of the job's PRs."""
    from app.autofix import AutofixRow, row_id
    from app.landing import LandRequest, land_id

    notes = []
    for number in pr_numbers:
        request = engine.store.get("land", land_id(job.thread.repo, number), LandRequest)
        if request:
            notes.append(render.land_line(request))
            notes += [f"⚠️ {p}" for p in request.problems]
        row = engine.store.get("autofix", row_id(job.thread.repo, number), AutofixRow)
        if row and row.stopped:
            notes.append(f"**Auto-fix on #{number}:** {row.stopped}")
    return notes


async def reap_orphans(engine: Engine) -> None:
    """Sandboxes whose run finished (or is gone) are destroyed; their tokens revoked."""
    for name in {"local", *(s.provider for s in engine.envs.values())}:
        try:
            provider = engine.provider(name)
            sandboxes = await provider.list({"hangar.instance": engine.instance_id})
        except Exception:
            continue
        for sb in sandboxes:
            run_id = sb.labels.get("hangar.run")
            run = engine.get_run(run_id) if run_id else None
            keep = (run is not None and not run.finished and run.sandbox
                    and run.sandbox.get("id") == sb.id and sb.labels.get("hangar.role") == "agent")
            if not keep:
                await provider.destroy(sb)
                engine.tokens.revoke(sb.id)
