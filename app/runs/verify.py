"""Verification: the verify command on exactly the PR's head, in a clean sandbox with no
model credential and no git credential; the result is a fact, not the agent's word."""

from __future__ import annotations

import asyncio
import logging
import shlex
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from gidgethub import GitHubException

from app import render
from app.egress import egress_env, end_egress, refusals, verify_key
from app.envbuilds import environment_for
from app.github import ops as ghops
from app.models import Job, Run, RunKind, RunOutcome, RunStage, Verification
from app.redact import redact, tail
from app.render import verify as verify_words
from app.render.reasons import Why
from app.runs.queue import Wait
from app.runs.sandbox import HARDENED_GIT, HOME, REPO, prepare_sandbox, upsert_check

if TYPE_CHECKING:
    from app.runs.context import RunsContext

log = logging.getLogger(__name__)

VERIFY_CHECK = "hangar / verify"

# -- verifying -----------------------------------------------------------------------


async def verify(engine: RunsContext, run: Run, *, started: Verifying | None = None,
                 pr: dict | None = None, shown: bool = False) -> None:
    """Verify the run's head and say so. `started`: the verification collect began as the
    push landed; `pr`: the PR as collect left it (its body may say the result already);
    `shown`: collect made `hangar / verify` completed with that result already."""
    job = engine.existing_job(run.job_id)
    ops = await engine.github.repo_ops(job.thread)
    head = await ops.branch_sha(run.branch) if run.kind == RunKind.VERIFY else run.head_sha
    if head is None:  # collect records the head before a turn's verification starts
        raise LookupError(f"{run.id} has no head to verify")
    if run.kind == RunKind.VERIFY and head != run.head_sha:
        compare = await ops.compare(run.base_branch, head)
        run = engine.patch_run(run.id, head_sha=head, compare=compare)
    verifying = started or await begin_verification(engine, run, job, ops, head)
    if verifying is None:
        # Every sandbox hangar may hold is in use: the verification waits in its stage,
        # says so, and starts when one ends (never a failure for it).
        if not waits_for_sandbox(run):
            await upsert_check(engine, ops, run, VERIFY_CHECK, head, status="queued",
                               output=verify_words.waiting_output(head))
            engine.note(run.job_id, f"{run.id} verification waits for a free sandbox")
        engine.patch_run(run.id, waiting={"code": Wait.SANDBOX},
                         retry_at=time.time() + engine.settings.poll_interval_seconds)
        return
    if waits_for_sandbox(run):
        run = engine.patch_run(run.id, waiting=None)
    try:
        # One that ends within the fold is shown once, completed; a longer one is shown
        # in progress meanwhile.
        verification = await verifying.within(engine.settings.status_edit_interval_seconds)
        if verification is None:
            await upsert_check(engine, ops, run, VERIFY_CHECK, head, status="in_progress",
                               output=verify_words.verifying_output(verifying.command, head))
            verification = await verifying.task
    finally:
        await verifying.stop()
    run = engine.patch_run(run.id, verification=verification)
    # The PR's body first: once the check says completed, everything says the same.
    body = render.pr_body(job, run)
    if not (pr and pr.get("body") == body):
        pr = await ops.update_pr(run.pr_number, body=body) if run.pr_number else None
    if not shown:
        await show_verification(engine, ops, run, verification)
    # Marked ready only now: the reviewers GitHub then tells find the verification there.
    if pr is not None and verification.passed:
        pr = await ready_for_review(engine, ops, job, pr)
    # GitHub's answer to the body edit is the PR as the turn ends: auto-fix starts there.
    engine.patch_run(run.id, stage=RunStage.DONE, outcome=RunOutcome.PR,
                     pr_seen=ghops.pr_facts(pr) if pr else None)
    engine.note(run.job_id, f"{run.id} verification "
                + {True: "passed", False: "failed", None: "could not run"}[verification.passed])


async def show_verification(engine: RunsContext, ops: Any, run: Run,
                            verification: Verification) -> None:
    """`hangar / verify` completed with the result, on the head it verified."""
    await upsert_check(engine, ops, run, VERIFY_CHECK, verification.head_sha,
                       status="completed", conclusion=verify_conclusion(verification),
                       output=render.verify_check_output(verification),
                       actions=verify_actions(verification))


@dataclass
class Verifying:
    """A verification under way: its task, when it began, and the command it runs."""

    task: asyncio.Task[Verification]
    began: float = field(default_factory=time.monotonic)
    command: str = ""

    async def within(self, seconds: float) -> Verification | None:
        """Its result if it ends within `seconds` of its start, else None."""
        left = self.began + seconds - time.monotonic()
        done, _ = await asyncio.wait({self.task}, timeout=max(0.0, left))
        return self.task.result() if done else None

    async def stop(self) -> None:
        """Cancel it if it still runs, and let it destroy its sandbox. What it ended with is
        taken: when the caller's step failed before reading it (a full disk fails both),
        the step's own error is the one reported, and the task's is not left to the loop."""
        if not self.task.done():
            self.task.cancel()
            await asyncio.wait({self.task})
        if not self.task.cancelled():
            self.task.exception()


async def begin_verification(engine: RunsContext, run: Run, job: Job, ops: Any,
                             head: str) -> Verifying | None:
    """Verification of `head` started now, beside whatever the caller says on GitHub; None
    when every sandbox hangar may hold is in use (`verify` then says it waits)."""
    spec, _ = await environment_for(engine, ops, run.base_branch,
                                    (run.compare or {}).get("base_sha"))
    if spec.verify is None:
        done = Verification(command="", head_sha=head, passed=None,
                            **trouble(Why(VerifyTrouble.NO_VERIFY_COMMAND, env=spec.name)))
        return Verifying(asyncio.ensure_future(_known(done)))
    if not engine.fleet.reserve(f"{run.id}:verify", waiter=run.id):
        return None
    return Verifying(asyncio.ensure_future(verify_in_clean_sandbox(engine, run, job, spec, head)),
                     command=spec.verify.command)


async def _known(verification: Verification) -> Verification:
    return verification


def waits_for_sandbox(run: Run) -> bool:
    return (run.waiting or {}).get("code") == Wait.SANDBOX


async def ready_for_review(engine: RunsContext, ops: Any, job: Job, pr: dict) -> dict:
    """A PR hangar opened as a draft (land.draft_pr) is marked ready for review once a
    verification of it passed: the PR as it is then."""
    if pr["number"] not in engine.existing_job(job.id).drafts:
        return pr
    if pr.get("draft"):
        try:
            await ops.mark_ready(pr["node_id"])
        except GitHubException:  # still a draft: the next passed verification asks again
            log.warning("could not mark the PR ready for review", exc_info=True,
                        extra={"job": job.id, "pr": pr["number"]})
            engine.note(job.id, f"could not mark #{pr['number']} ready for review")
            return pr
        engine.note(job.id, f"#{pr['number']} verified: marked ready for review")
        pr = {**pr, "draft": False}
    drafts = engine.existing_job(job.id).drafts
    engine.patch_job(job.id, drafts=[n for n in drafts if n != pr["number"]])
    return pr


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
    RESTORE_FAILED = "restore_failed"


class VerifyStep(StrEnum):
    """A timed step of verification (worded by render.verify)."""

    SANDBOX = "sandbox"  # the sandbox started, the head checked out
    INSTALL = "install"  # the environment's install step
    RESTORE = "restore"  # verify.restore_paths put back as the base has them
    COMMAND = "command"  # the verify command, once an attempt


@dataclass
class StepClock:
    """Times verification's steps as they end, in order."""

    steps: list[dict] = field(default_factory=list)
    mark: float = field(default_factory=time.monotonic)

    def start(self) -> None:
        self.mark = time.monotonic()

    def ended(self, code: VerifyStep, exit_code: int | None = None, *,
              skipped: bool = False) -> list[dict]:
        seconds = 0.0 if skipped else round(time.monotonic() - self.mark, 2)
        self.steps.append({"code": code.value, "seconds": seconds, "exit_code": exit_code,
                           "skipped": skipped})
        self.mark = time.monotonic()
        return self.steps


def restore_script(paths: list[str], base_sha: str) -> str:
    """verify.restore_paths as the base has them: each path's content from the base's
    commit, and nothing the change added under it; a path the base lacks goes away."""
    git = " ".join(HARDENED_GIT)
    lines = ["set -e"]
    for path in paths:
        q = shlex.quote(path)
        lines += [f"{git} rm -r -q --cached --ignore-unmatch -- {q} >/dev/null",
                  f"rm -rf -- {q}",
                  f"if {git} cat-file -e {shlex.quote(base_sha + ':' + path)} 2>/dev/null; "
                  f"then {git} checkout -q {shlex.quote(base_sha)} -- {q}; fi"]
    return "\n".join(lines)


def trouble(why: Why) -> dict[str, str | None]:
    """A Verification's `error` and `fix`, as render words them."""
    return {"error": verify_words.error(why), "fix": verify_words.fix(why)}


async def verify_in_clean_sandbox(
    engine: RunsContext, run: Run, job: Job, spec: Any, head_sha: str
) -> Verification:
    """A new sandbox without model credentials runs the verify command on exactly head_sha;
    the connections its install and verify command were refused go with the result."""
    verification = await _verify(engine, run, job, spec, head_sha)
    blocked = refusals(engine, verify_key(run.id))
    return verification.model_copy(update={"egress_blocked": blocked})


async def _verify(
    engine: RunsContext, run: Run, job: Job, spec: Any, head_sha: str
) -> Verification:
    provider = engine.providers[spec.provider]
    started = time.time()
    command = spec.verify.command
    clock = StepClock()
    try:
        sb = await prepare_sandbox(engine, run, job, spec, role="verify",
                                   checkout=["git", "checkout", "-q", "--detach", head_sha])
    except Exception as exc:  # its words (a host path, an address) are for operators
        log.warning("could not prepare the verify sandbox", exc_info=True,
                    extra={"run": run.id})
        engine.note(job.id, f"{run.id}: could not prepare the verify sandbox: {exc!r}")
        return Verification(command=command, head_sha=head_sha, passed=None,
                            **trouble(Why(VerifyTrouble.SANDBOX_FAILED)),
                            steps=clock.ended(VerifyStep.SANDBOX))
    try:
        # The verify command runs the agent's code: it gets no git credential at all, and
        # the web only through the egress proxy, as the agent did.
        engine.tokens.revoke(sb.id)
        await provider.run(sb, ["rm", "-f", f"{HOME}/.git-credentials", f"{HOME}/.gitconfig"],
                           offline=True)
        egress = egress_env(engine, verify_key(run.id), sb, spec, step="verify")
        clock.ended(VerifyStep.SANDBOX)
        if spec.install and sb.labels.get("hangar.env_current") == "yes":
            clock.ended(VerifyStep.INSTALL, skipped=True)  # the build holds it already
        elif spec.install:
            setup = await provider.run(sb, ["sh", "-c", spec.install], cwd=REPO, env=egress,
                                       timeout=spec.verify.timeout_minutes * 60)
            clock.ended(VerifyStep.INSTALL, setup.exit_code)
            if setup.exit_code != 0:
                return Verification(
                    command=command, head_sha=head_sha, passed=None, attempts=0,
                    exit_code=setup.exit_code, output_tail=redact(tail(setup.output)),
                    **trouble(Why(VerifyTrouble.INSTALL_FAILED)),
                    duration_s=time.time() - started, steps=clock.steps)
        restored, base_sha = [], (run.compare or {}).get("base_sha") or run.base_sha
        if spec.verify.restore_paths:
            if not base_sha:
                return Verification(command=command, head_sha=head_sha, passed=None,
                                    **trouble(Why(VerifyTrouble.RESTORE_FAILED)),
                                    duration_s=time.time() - started, steps=clock.steps)
            put_back = await provider.run(
                sb, ["sh", "-c", restore_script(spec.verify.restore_paths, base_sha)],
                cwd=REPO, timeout=120)
            clock.ended(VerifyStep.RESTORE, put_back.exit_code)
            if put_back.exit_code != 0:
                return Verification(
                    command=command, head_sha=head_sha, passed=None, attempts=0,
                    exit_code=put_back.exit_code, output_tail=redact(tail(put_back.output)),
                    **trouble(Why(VerifyTrouble.RESTORE_FAILED)),
                    duration_s=time.time() - started, steps=clock.steps)
            restored = list(spec.verify.restore_paths)
        attempts, outputs = 0, []
        while True:  # once, and again up to `retries` times while it fails
            attempts += 1
            result = await provider.run(sb, ["sh", "-c", command], cwd=REPO, env=egress,
                                        timeout=spec.verify.timeout_minutes * 60)
            clock.ended(VerifyStep.COMMAND, result.exit_code)
            outputs.append(result.output)
            if result.exit_code == 0 or attempts > spec.verify.retries:
                break
        passed = result.exit_code == 0
        error = (verify_words.error(Why(VerifyTrouble.TIMED_OUT,
                                        minutes=spec.verify.timeout_minutes))
                 if result.timed_out else None)
        return Verification(
            command=command, head_sha=head_sha, passed=passed, exit_code=result.exit_code,
            attempts=attempts, flaky=passed and attempts > 1, error=error,
            output_tail=redact(tail(outputs[-1])), duration_s=time.time() - started,
            restored=restored, restored_from=base_sha if restored else None,
            steps=clock.steps,
        )
    finally:
        end_egress(engine, sb, "verify")
        await provider.destroy(sb)
