"""Auto-fix's steps, the part with I/O: the row's look at its PR's CI (advance_autofix,
fix_now), the turns it starts, the evidence it reads from GitHub, and the status it shows.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from app.autofix.rows import get_row, judged, patch, read_again, row_id, save
from app.autofix.rules import (
    IGNORED_CHECKS,
    MAX_JUDGED,
    PASSING,
    PUSH_WORD_GRACE_S,
    Failure,
    Stop,
    failure_signature,
    fanout_hold,
    kept,
    prompt_for_failures,
    prompt_for_review,
    review_not_started,
    stop_reason,
)
from app.commands import Started, start_followup
from app.engine import PrNotes
from app.github import ci
from app.landing import LandRequest, LandState, land_id
from app.models import AutofixRow, Job, RunKind
from app.redact import tail
from app.render import autofix as words
from app.render.reasons import Why
from app.repoconfig import CONFIG_PATH, parse_repo_config
from app.runs import ask_status_edit

if TYPE_CHECKING:
    from app.autofix.context import AutofixContext
    from app.github.ops import RepoOps

log = logging.getLogger(__name__)


def status_notes(engine: AutofixContext, repo: str, pr_number: int) -> PrNotes:
    """Why auto-fix stopped trying on a PR, for its job's status comment."""
    row = engine.store.get("autofix", row_id(repo, pr_number), AutofixRow)
    if row and row.stopped:
        return PrNotes((words.status_note(pr_number, row.stopped),))
    return PrNotes()


def last_turn(engine: AutofixContext, job: Job, pr_number: int) -> Any:
    """The newest finished turn on the PR that saw it (its answer kept), or None."""
    done = [r for r in engine.runs_of(job.id)
            if r.pr_number == pr_number and r.finished and r.pr_seen]
    return max(done, key=lambda r: r.queued_at) if done else None


# -- the step ---------------------------------------------------------------------------


async def advance_autofix(engine: AutofixContext, autofix_id: str) -> None:
    row = get_row(engine, autofix_id)
    if row is None or row.due_at > time.time():
        return
    # The slow poll looks again later; events make the row due at once.
    row = patch(engine, autofix_id, due_at=time.time() + engine.settings.poll_interval_seconds)
    job = engine.get_job(row.job_id)
    if job is None:
        save(engine, row, active=False)
        return
    ops = await engine.github.repo_ops(job.thread)
    if await fix_now(engine, ops, job, row, requested=False) == "CI green":
        # Nothing to fix until CI says otherwise: its events (and a push, a review) make
        # the row due at once; the slow poll would only read the same green again.
        fresh = get_row(engine, autofix_id)
        if fresh is not None and fresh.due_at > time.time():
            patch(engine, autofix_id,
                  due_at=time.time() + engine.settings.idle_pr_look_seconds)


def attempt_of(engine: AutofixContext, job: Job, pr_number: int) -> int:
    """Which attempt of the job opened this PR."""
    return next((r.attempt for r in engine.runs_of(job.id) if r.pr_number == pr_number), 1)


def turn_running(engine: AutofixContext, job: Job, pr_number: int) -> bool:
    return any(not r.finished for r in engine.runs_of(job.id) if r.pr_number == pr_number)


def known_head(engine: AutofixContext, job: Job, row: AutofixRow, head: str) -> bool:
    """hangar's turn made this head, or GitHub said who pushed it. A verification is not
    hangar's word: it records the head it found on the branch, which may be a person's."""
    fresh = get_row(engine, row.id) or row
    return head in fresh.pushed_heads or any(
        r.head_sha == head for r in engine.runs_of(job.id)
        if r.pr_number == row.pr_number and r.kind != RunKind.VERIFY)


def merging(engine: AutofixContext, row: AutofixRow) -> bool:
    request = engine.store.get("land", land_id(row.repo, row.pr_number), LandRequest)
    return bool(request and request.state == LandState.MERGING)


async def fix_now(engine: AutofixContext, ops: RepoOps, job: Job, row: AutofixRow, *,
                  requested: bool, requested_by: str = "hangar") -> str:
    if turn_running(engine, job, row.pr_number):
        return "a turn is running"  # its end wakes the row again (after_run_step)
    last = None if requested else last_turn(engine, job, row.pr_number)
    if (last is not None and last.id != row.turn_seen
            and time.time() - last.pr_seen.get("at", 0) < engine.settings.poll_interval_seconds):
        # Looks woken by the turn's end start from GitHub's answer to the turn's edit of
        # the PR; no push came since. The slow poll, later, reads the PR itself.
        pr = last.pr_seen
    else:
        pr = await ops.get_pr(row.pr_number)
    if pr.get("state") != "open":
        save(engine, get_row(engine, row.id) or row, active=False)
        return "PR not open"
    head = pr["head"]["sha"]
    if row.pending_review and not requested:
        return await review_turn(engine, ops, job, row, row.pending_review)
    # Whether every suite finished matters only to act on a failure, or to lift a stop.
    failures, finished = await collect_failures(
        ops, head, own_app_id=engine.settings.app_id,
        suites_needed=lambda failed: failed or bool(row.stopped))
    if not finished and not requested:
        return "CI still running"
    if not failures:
        row = read_again(engine, row.id)
        if row.stopped and row.enabled:  # green now: what stopped hangar no longer matters
            patch(engine, row.id, stopped=None)
            show(engine, job)
        return "CI green"
    if not requested and not known_head(engine, job, row, head):
        # CI on a head hangar did not make, before GitHub's word of the push: it may be
        # a person's, so wait for the synchronize event (it makes the row due again).
        first = row.unknown_heads.get(head)
        if first is None:
            first = time.time()
            patch(engine, row.id, unknown_heads={**row.unknown_heads, head: first})
        if time.time() - first < PUSH_WORD_GRACE_S:
            return "waiting to learn who pushed the head"
        # The word never came (a missed webhook): count it as a person's push, made
        # when hangar first saw the head.
        row = read_again(engine, row.id)
        patch(engine, row.id, pushed_heads=[*row.pushed_heads[-MAX_JUDGED:], head],
              unknown_heads={h: t for h, t in row.unknown_heads.items() if h != head},
              last_human_push_at=max(row.last_human_push_at or 0.0, first))
    signature = failure_signature(failures)
    key = f"{head}:{signature}"
    if key in row.seen_heads and not requested:
        return "already judged"
    config, _ = parse_repo_config(await ops.get_text(CONFIG_PATH, ref=pr["base"]["ref"]))
    policy = config.autofix
    row = read_again(engine, row.id)  # fresh: a push or command may have come in meanwhile
    if turn_running(engine, job, row.pr_number):
        return "a turn is running"
    why = stop_reason(row, policy, signature, landing=merging(engine, row), now_s=time.time(),
                      requested=requested)
    if why is None and not requested:
        why = fanout_hold(job, attempt_of(engine, job, row.pr_number), config.fanout)
    if why:
        reason = kept(why)
        if row.stopped != reason:
            engine.note(job.id, f"auto-fix on #{row.pr_number} not started: "
                                f"{words.stopped(why)}")
        # A reason that passes with time is looked at again; the others are said once.
        later = why.code in PASSING
        patch(engine, row.id, stopped=reason,
              seen_heads=row.seen_heads if later else judged(row, key))
        show(engine, job)
        return f"not started: {reason}"
    turn = row.turns + 1
    names = list(dict.fromkeys(f.name for f in failures))
    started = await start_followup_now(
        engine, job, row, prompt_for_failures(failures, turn, policy.max_turns),
        requested_by=requested_by,
        label=words.failures_turn_label(turn, policy.max_turns, names))
    if started:
        patch(engine, row.id, last_signature=signature)
    return f"auto-fix turn {turn}" if started else "a turn is running"


async def start_followup_now(engine: AutofixContext, job: Job, row: AutofixRow, prompt: str, *,
                             requested_by: str, label: str,
                             review_threads: list[int] | None = None) -> bool:
    """Start the turn and count it, with no await between the two (start_followup has
    none): two steps deciding at once start one turn and count one."""

    started = await start_followup(engine, job, row.pr_number, prompt, kind=RunKind.AUTOFIX,
                                   requested_by=requested_by, label=label,
                                   review_threads=review_threads)
    if not isinstance(started, Started):
        return False
    patch(engine, row.id, turns=read_again(engine, row.id).turns + 1, stopped=None)
    return True


def show(engine: AutofixContext, job: Job) -> None:
    ask_status_edit(engine, job.id)


async def collect_failures(
    ops: RepoOps, head: str, *, own_app_id: int | None = None,
    suites_needed: Callable[[bool], bool] = lambda _failed: True,
) -> tuple[list[Failure], bool]:
    """The failed checks on head with their evidence, and whether everything finished.

    hangar's own `agent` and `land` runs are neither failures nor waited for (land stays
    in progress until a person approves); a suite with no runs (an App that never
    reports) is not waited for either. The suites (CI asked for that has no check run
    yet) are read only when `suites_needed(any failed)` says so; unread, only the check
    runs and statuses say whether everything finished.
    """
    # Every page of each: a matrix CI has more than a page of checks, and the failure
    # that matters may be on the last.
    runs = await ops.check_runs(head)
    # hangar's own `verify` is evidence; its `agent` and `land` are not, and another App's
    # check under a hangar name is set aside.
    checks = [r for r in runs if r["name"] not in IGNORED_CHECKS
              and (not ci.is_hangars_name(r["name"])
                   or (r.get("app") or {}).get("id") == own_app_id)]
    statuses = [s for s in await ops.statuses(head)
                if not ci.is_hangars_name(s.get("context") or "")]
    failed = any(ci.of_check_run(r, strict=ci.is_hangars_name(r["name"])) == ci.Outcome.FAILED
                 for r in checks) or any(ci.of_status(s) == ci.Outcome.FAILED for s in statuses)
    suites = await ops.check_suites(head) if suites_needed(failed) else []
    finished = all(
        s.get("status") == "completed" for s in suites
        if s.get("latest_check_runs_count") and (s.get("app") or {}).get("id") != own_app_id)
    finished = finished and all(
        ci.of_check_run(r) != ci.Outcome.PENDING for r in checks)
    finished = finished and all(ci.of_status(s) != ci.Outcome.PENDING for s in statuses)
    failures = []
    for run in checks:
        # Only a failure a new commit may fix starts a turn: not a cancelled or stale run,
        # nor one waiting for a person, nor a verification that did not run.
        if ci.of_check_run(run, strict=ci.is_hangars_name(run["name"])) != ci.Outcome.FAILED:
            continue
        output = run.get("output") or {}
        details = await check_annotations(ops, run)
        job_log = await actions_log_tail(ops, run)
        details += job_log if job_log is not None else ["(GitHub did not give this job's log)"]
        if output.get("text"):
            details.append(tail(output["text"], 3000))
        failures.append(Failure(name=run["name"], title=output.get("title") or "",
                                summary=(output.get("summary") or "")[:2000], details=details,
                                unread=job_log is None))
    for status in statuses:
        if ci.of_status(status) == ci.Outcome.FAILED:
            failures.append(Failure(
                name=status["context"], title=status.get("description") or "",
                details=[f"details: {status['target_url']}"] if status.get("target_url") else []))
    return failures, finished


async def check_annotations(ops: RepoOps, run: dict) -> list[str]:
    if not (run.get("output") or {}).get("annotations_count"):
        return []
    found = [a async for a in ops.gh.getiter(
        f"{ops.base}/check-runs/{run['id']}/annotations?per_page=100")]  # every page
    return [f"{a['path']}:{a.get('start_line')}: {a.get('message', '')}" for a in found[:50]]


async def actions_log_tail(ops: RepoOps, run: dict) -> list[str] | None:
    """For GitHub Actions, the failed job's log (the check run id is the job id); None
    when GitHub did not give it (expired, or an error): what failed is then not known."""
    if (run.get("app") or {}).get("slug") != "github-actions":
        return []
    try:
        data = await ops.gh.getitem(f"{ops.base}/actions/jobs/{run['id']}/logs",
                                    accept="text/plain")
    except Exception as exc:  # the log is evidence, not a requirement
        log.info("an Actions job's log could not be fetched", extra={"error": repr(exc)})
        return None
    text = data if isinstance(data, str) else str(data)
    return [tail(text, 3000)]


async def review_turn(engine: AutofixContext, ops: RepoOps, job: Job, row: AutofixRow,
                      review: dict[str, Any]) -> str:
    """A turn for one change request: {review_id, author, body}. It waits for a running
    turn to end, then starts within the same bound."""
    author = review["author"]
    config, _ = parse_repo_config(await ops.get_text(CONFIG_PATH, ref=job.base_branch))
    policy = config.autofix
    if not config.review.act_on_changes_requested:  # the repository's choice, off by default
        opt_in = review_not_started(author, Why(Stop.REVIEW_OPT_IN))
        patch(engine, row.id, stopped=kept(opt_in), pending_review=None)
        engine.note(job.id, words.stopped(opt_in))
        show(engine, job)
        return "review turn not started"
    comments = [c async for c in ops.gh.getiter(  # every page: a review may leave many
        f"{ops.base}/pulls/{row.pr_number}/reviews/{review['review_id']}/comments"
        "?per_page=100")]
    row = read_again(engine, row.id)
    if turn_running(engine, job, row.pr_number):
        patch(engine, row.id, pending_review=review,
              stopped=kept(Why(Stop.REVIEW_WAITS, author=author)))
        show(engine, job)
        return "review turn waits for the running turn"
    why = stop_reason(row, policy, None, landing=merging(engine, row), now_s=time.time(),
                      requested=True)
    if why is None and not (policy.enabled and row.enabled):
        why = Why(Stop.OFF)
    if why:
        why = review_not_started(author, why)
        patch(engine, row.id, stopped=kept(why), pending_review=None)
        engine.note(job.id, words.stopped(why))
        show(engine, job)
        return "review turn not started"
    turn = row.turns + 1
    # The turn reads each of the review's threads and answers in each (app.review_threads).
    threads = list(dict.fromkeys(c.get("in_reply_to_id") or c["id"] for c in comments))
    started = await start_followup_now(
        engine, job, row, prompt_for_review(author, review.get("body") or "", comments),
        requested_by=author,
        label=words.review_turn_label(turn, policy.max_turns, author), review_threads=threads)
    if started:
        patch(engine, row.id, pending_review=None)
        return f"review turn {turn}"
    patch(engine, row.id, pending_review=review, due_at=0)
    return "review turn waits for the running turn"
