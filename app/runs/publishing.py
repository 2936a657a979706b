"""Publishing a run's branch: nothing the agent committed is thrown away.

hangar pushes the agent's branch itself, retrying what GitHub fails transiently, and
destroys the sandbox only once the branch on GitHub holds the agent's head. A push that
still cannot succeed (GitHub down, or a refusal: a rule, a secret, a large file) leaves
the commits outside the sandbox, as a git bundle in the data directory, and the run
HELD until `/hangar retry` (or a check run's button) pushes them again.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app import pauses, render
from app.models import HeldWork, Run, RunStage, RunState, RunWarning, changed
from app.redact import redact, tail
from app.render.reasons import Why
from app.runs.ending import account
from app.runs.sandbox import (
    AGENT_CHECK,
    HARDENED_GIT,
    PROVIDER_CALL_TIMEOUT_S,
    REPO,
    complete_agent_check,
    prepare_sandbox,
    upsert_check,
)

if TYPE_CHECKING:
    from app.runs.context import RunsContext

log = logging.getLogger(__name__)

BUNDLE_IN_SANDBOX = "/workspace/.hangar/held.bundle"
# Build leftovers that are never "uncommitted changes", even where .gitignore misses them.
BUILD_LEFTOVERS = [":(exclude,glob)**/__pycache__/**", ":(exclude,glob)**/*.pyc"]
PUSH_TIMEOUT_S = 600
# Pauses between push attempts: GitHub's git endpoints fail transiently (5xx, resets).
PUSH_BACKOFF_S = (1.0, 2.0, 4.0)
# A held push that did not go through (not a refusal) is tried again on its own this often.
HELD_RETRY_S = render.HELD_RETRY_MINUTES * 60.0
NEVER_S = 10 * 365 * 86400.0
MAX_WORDS = 3000


@dataclass(frozen=True)
class PushOutcome:
    landed: bool
    refused: bool = False
    by_hangar: bool = False  # the refusal is hangar's sandbox gate's, not GitHub's
    diverged: bool = False  # git declined: the branch on GitHub moved past the turn's base
    github_says: str = ""
    attempts: int = 0


def push_refusal(output: str) -> str | None:
    """GitHub's own words when it refused a push; None when the failure looks transient.

    A refusal is a ref git reports rejected (a ruleset, push protection, a large file, a
    non-fast-forward) or an HTTP 4xx. A 5xx, a dropped connection or a timeout is not, nor
    is a rejection hangar's proxy made of one ("...; try again").
    """
    lines = output.splitlines()
    rejected = any(("[remote rejected]" in line or "[rejected]" in line)
                   and not _proxy_says_transient(line) for line in lines)
    client_error = any(f"error: {code}" in line or f"HTTP {code}" in line
                       for line in lines for code in (401, 403, 404, 413, 422)
                       if not _proxy_says_transient(line))
    if not rejected and not client_error:
        return None
    said = [line.removeprefix("remote:").rstrip() for line in lines
            if line.startswith("remote:") or "rejected]" in line or "HTTP 4" in line]
    text = "\n".join(said).strip() or output.strip()
    return text[-MAX_WORDS:]


def _proxy_says_transient(line: str) -> bool:
    return "(hangar: " in line and ("try again)" in line or "push again)" in line)


def diverged(refusal: str) -> bool:
    """Whether git itself declined the push because the branch on GitHub has commits the
    pushed head lacks (someone pushed meanwhile, or the agent rewrote history): no rule
    refused it, and hangar never force-pushes an agent's turn."""
    return any(line.lstrip().startswith("! [rejected]") and (
        "(fetch first)" in line or "(non-fast-forward)" in line)
        for line in refusal.splitlines())


def refused_by_hangar(refusal: str) -> bool:
    """Whether a refusal is hangar's sandbox gate's own (its words start "hangar: ": a
    limit or a rule of its own), which a retry meets again, and not GitHub's."""
    return any(line.strip().removeprefix("remote:").strip().startswith("hangar: ")
               or "(hangar: " in line for line in refusal.splitlines())


def bundle_dir(engine: RunsContext) -> Path:
    return Path(engine.settings.data_dir) / "bundles"


def bundle_path(engine: RunsContext, run: Run) -> Path | None:
    return bundle_dir(engine) / run.held.bundle if run.held and run.held.bundle else None


# -- the step ------------------------------------------------------------------------


async def publish(engine: RunsContext, run: Run) -> None:
    """Push the agent's branch; destroy its sandbox only once GitHub holds its head."""
    from sandbox.provider import Sandbox

    if run.sandbox is None:
        if run.held and run.held.bundle:
            await publish_bundle(engine, run)
        else:
            engine.patch_run(run.id, stage=RunStage.COLLECTING)
        return
    sb = Sandbox.model_validate(run.sandbox)
    provider = engine.providers[sb.provider]
    warnings = list(run.warnings)
    dirty, head = False, None
    try:
        status = await provider.run(sb, ["git", "status", "--porcelain", "--", ".",
                                         *BUILD_LEFTOVERS], cwd=REPO, timeout=60, offline=True)
        dirty = bool(status.output.strip()) and status.exit_code == 0
        head = await commits_to_publish(provider, sb, run)
    except Exception as exc:
        engine.note(run.job_id, f"{run.id}: could not read the agent's commits in the "
                                f"sandbox: {exc!r}")
        if not await sandbox_gone(provider, sb, run):
            # hangar could not read them, and they may be there: never "no commits". The
            # step is tried again; should it keep failing, the turn ends as hangar's
            # failure, and the reaper publishes (or holds) what the sandbox has.
            raise
        # The sandbox is gone, and with it whatever the agent had not pushed itself: the
        # turn was lost, not empty (collect takes what reached GitHub, or starts it again).
        engine.tokens.revoke(sb.id)
        engine.patch_run(run.id, state=RunState.LOST, warnings=[
            *warnings, render.run_warning(Why(RunWarning.PUBLISH_FAILED))],
            stage=RunStage.COLLECTING)
        return
    if head is not None:
        outcome = await push_with_retries(engine, provider, sb, run, "HEAD", head)
        if not outcome.landed:
            await hold(engine, run, sb, head, outcome, dirty=dirty)
            return
    await provider.destroy(sb)
    engine.tokens.revoke(sb.id)
    engine.patch_run(run.id, dirty=dirty, warnings=warnings, stage=RunStage.COLLECTING)


async def sandbox_gone(provider: Any, sb: Any, run: Run) -> bool:
    """Whether the run's sandbox no longer exists: the agent's watch found it gone, or the
    provider lists no such sandbox (one it cannot list is not called gone)."""
    if run.state == RunState.LOST:
        return True
    try:
        async with asyncio.timeout(PROVIDER_CALL_TIMEOUT_S):
            listed = await provider.list(sb.labels)
    except Exception:
        return False
    return bool(sb.labels) and all(other.id != sb.id for other in listed)


async def commits_to_publish(provider: Any, sb: Any, run: Run) -> str | None:
    """The sandbox's HEAD when it has commits past the base, else None."""
    ahead = await provider.run(
        sb, ["git", "rev-list", "--count", f"{run.base_sha}..HEAD"], cwd=REPO, timeout=60,
        offline=True)
    if ahead.exit_code != 0 or ahead.output.strip() in ("", "0"):
        return None
    head = await provider.run(sb, ["git", "rev-parse", "HEAD"], cwd=REPO, timeout=60,
                              offline=True)
    if head.exit_code != 0:
        raise RuntimeError(f"git rev-parse HEAD failed: {tail(head.output, 300)}")
    return head.output.strip()


async def push_with_retries(
    engine: RunsContext, provider: Any, sb: Any, run: Run, source: str, head: str
) -> PushOutcome:
    """Push source to the run's branch until GitHub holds head, a refusal, or no tries left."""
    job = engine.existing_job(run.job_id)
    ops = await engine.github.repo_ops(job.thread)
    said = ""
    attempts = 0
    for pause in (*PUSH_BACKOFF_S, None):
        attempts += 1
        push = await provider.run(
            sb, [*HARDENED_GIT, "push", "-q", "origin", f"{source}:refs/heads/{run.branch}"],
            cwd=REPO, timeout=PUSH_TIMEOUT_S)
        # GitHub's own report, as hangar's proxy relayed it, says it took the push; the
        # report can be lost after GitHub took it: then GitHub's branch is the truth.
        if github_reported(engine, sb, run.branch, head) or await branch_holds(
                ops, run.branch, head):
            engine.patch_run(run.id, published_head=head)
            return PushOutcome(landed=True, attempts=attempts)
        refusal = push_refusal(push.output) if push.exit_code != 0 else None
        if refusal is not None:
            return PushOutcome(landed=False, refused=True, by_hangar=refused_by_hangar(refusal),
                               diverged=diverged(refusal), github_says=redact(refusal),
                               attempts=attempts)
        said = (redact(tail(push.output, MAX_WORDS)).strip()
                or render.push_not_taken(push.exit_code, head))
        log.warning("push failed, will retry", extra={"run": run.id, "attempt": attempts})
        if pause is not None:
            await pauses.pause(pause)
    return PushOutcome(landed=False, github_says=said, attempts=attempts)


def github_reported(engine: RunsContext, sb: Any, branch: str, head: str) -> bool:
    """Whether GitHub's answer to a push from this sandbox, read by the proxy before git
    saw it, said the branch took head."""
    ref = f"refs/heads/{branch}"
    return any(p.ref == ref and p.new == head for p in engine.tokens.pushes(sb.id))


async def branch_holds(ops: Any, branch: str, head: str) -> bool:
    try:
        return await ops.branch_sha(branch) == head
    except Exception:
        return False


# -- holding -------------------------------------------------------------------------


async def hold(engine: RunsContext, run: Run, sb: Any, head: str, outcome: PushOutcome, *,
               dirty: bool) -> None:
    """Keep the commits in a bundle outside the sandbox (or keep the sandbox if too big)."""
    provider = engine.providers[sb.provider]
    bundle = await make_bundle(engine, provider, sb, run)
    held = HeldWork(head_sha=head, bundle=bundle[0] if bundle else None,
                    size=bundle[1] if bundle else 0, refused=outcome.refused,
                    by_hangar=outcome.by_hangar, diverged=outcome.diverged,
                    github_says=outcome.github_says,
                    attempts=(run.held.attempts if run.held else 0) + outcome.attempts)
    if bundle is not None:
        await provider.destroy(sb)
        engine.tokens.revoke(sb.id)
    run = engine.patch_run(run.id, held=held, dirty=dirty, stage=RunStage.HELD,
                           sandbox=run.sandbox if bundle is None else None,
                           retry_at=time.time() + (NEVER_S if outcome.refused else HELD_RETRY_S))
    why = account(run, changed=False)
    run = engine.patch_run(run.id, ending={"code": why.code, **why.facts})
    engine.note(run.job_id, f"{run.id} push not taken by GitHub; commits up to {head[:7]} held"
                + (" in a bundle" if bundle else " in the sandbox (too big for a bundle)"))
    await offer_retry_button(engine, run)
    job = engine.get_job(run.job_id)
    if job is not None:
        await complete_agent_check(engine, await engine.github.repo_ops(job.thread),
                                   engine.existing_run(run.id))


async def offer_retry_button(engine: RunsContext, run: Run) -> None:
    """On the PR of a later turn, a check run whose button pushes the held commits again."""

    if run.pr_number is None:
        return  # a first turn has no PR yet: `/hangar retry` on the issue is the way
    job = engine.existing_job(run.job_id)
    ops = await engine.github.repo_ops(job.thread)
    current = await ops.branch_sha(run.branch)
    if current is None:
        return
    url = f"{engine.settings.git_base_url}/{job.thread.repo}/pull/{run.pr_number}"
    await upsert_check(engine, ops, run, AGENT_CHECK, current, status="completed",
                       conclusion="action_required", details_url=url,
                       output=render.held_check_output(run),
                       actions=render.held_actions())


async def make_bundle(
    engine: RunsContext, provider: Any, sb: Any, run: Run
) -> tuple[str, int] | None:
    """Bundle base..HEAD and copy it to <data dir>/bundles; None when over the size bound."""
    made = await provider.run(
        sb, [*HARDENED_GIT, "bundle", "create", "-q", BUNDLE_IN_SANDBOX, f"{run.base_sha}..HEAD"],
        cwd=REPO, timeout=PUSH_TIMEOUT_S, offline=True)
    if made.exit_code != 0:
        raise RuntimeError(f"git bundle failed (exit {made.exit_code}): {tail(made.output, 500)}")
    size = await provider.run(sb, ["stat", "-c", "%s", BUNDLE_IN_SANDBOX], timeout=60,
                              offline=True)
    limit = engine.settings.max_held_bundle_mb * 2**20
    if size.exit_code != 0 or int(size.output.strip() or 0) > limit:
        return None
    data = await provider.copy_out(sb, BUNDLE_IN_SANDBOX)
    directory = bundle_dir(engine)
    directory.mkdir(parents=True, exist_ok=True)
    name = f"{run.id}.bundle"
    write_durably(directory / name, data)
    return name, len(data)


def write_durably(path: Path, data: bytes) -> None:
    """Write then rename, synced: a crash leaves the old file or the whole new one."""
    partial = path.with_name(f".{path.name}.partial")
    with open(partial, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    partial.replace(path)


async def publish_bundle(engine: RunsContext, run: Run) -> None:
    """Push held commits again from their bundle, in a fresh sandbox through the proxy."""
    from sandbox.envspec import EnvSpec

    path = bundle_path(engine, run)
    assert path is not None and run.held is not None and run.base_sha is not None
    job = engine.existing_job(run.job_id)
    spec = EnvSpec.model_validate(run.env)
    provider = engine.providers[spec.provider]
    sb = await prepare_sandbox(engine, run, job, spec, role="publish",
                               checkout=["git", "checkout", "-q", "--detach", run.base_sha])
    try:
        await provider.copy_in(sb, {BUNDLE_IN_SANDBOX: path.read_bytes()})
        fetched = await provider.run(
            sb, [*HARDENED_GIT, "fetch", "-q", BUNDLE_IN_SANDBOX, "HEAD"], cwd=REPO, timeout=600,
            offline=True)
        if fetched.exit_code != 0:
            raise RuntimeError(f"reading the held bundle failed: {tail(fetched.output, 500)}")
        outcome = await push_with_retries(engine, provider, sb, run, run.held.head_sha,
                                          run.held.head_sha)
    finally:
        await provider.destroy(sb)
        engine.tokens.revoke(sb.id)
    if not outcome.landed:
        held = changed(run.held, **{
            "refused": outcome.refused, "github_says": outcome.github_says, "at": time.time(),
            "attempts": run.held.attempts + outcome.attempts})
        engine.patch_run(run.id, held=held, stage=RunStage.HELD,
                         retry_at=time.time() + (NEVER_S if outcome.refused else HELD_RETRY_S))
        engine.note(run.job_id, f"{run.id} push of the held commits failed again")
        return
    path.unlink(missing_ok=True)
    engine.patch_run(run.id, held=None, stage=RunStage.COLLECTING)
    engine.note(run.job_id, f"{run.id} held commits pushed at {run.held.head_sha[:7]}")


def request_retry(engine: RunsContext, run: Run) -> bool:
    """Put a held run back to publishing; False when it is not held."""
    if run.stage != RunStage.HELD:
        return False
    engine.patch_run(run.id, stage=RunStage.PUBLISHING, retry_at=0.0, stage_failures=0)
    return True


def retry_held(engine: RunsContext, run: Run) -> None:
    """A held run's wait is over: GitHub may be back. A refusal waits for `/hangar retry`."""
    if run.held is not None and run.held.refused:
        engine.patch_run(run.id, retry_at=time.time() + NEVER_S)
    else:
        request_retry(engine, run)


async def rescue_commits(engine: RunsContext, sb: Any, run: Run) -> bool:
    """Before the reaper destroys an agent's sandbox: hold any commits GitHub lacks.

    True when the sandbox may go (nothing unpushed, or now held in a bundle)."""
    provider = engine.providers[sb.provider]
    try:
        head = await commits_to_publish(provider, sb, run) if run.base_sha else None
    except Exception:
        return True  # nothing readable is left in it
    if head is None:
        return True
    job = engine.get_job(run.job_id)
    if job is None or await branch_holds(await engine.github.repo_ops(job.thread), run.branch,
                                         head):
        return True
    outcome = PushOutcome(landed=False, github_says=render.found_unpushed())
    await hold(engine, changed(run, **{"sandbox": sb.model_dump()}), sb, head, outcome,
               dirty=run.dirty)
    return False  # hold() destroyed it with the bundle made, or keeps it when too big
