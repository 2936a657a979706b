"""Auto-fix turns: when CI fails on a hangar PR, hangar tries to fix it, within a bound.

Per PR one durable row says what was tried. A turn starts only when every check suite
and status on the PR's current head has finished and one failed; it carries the failures'
evidence. It never starts while another turn runs, never past `autofix.max_turns`, never
when the failure repeats the previous turn's, never while a human pushed recently, and
never while the PR is being merged. When hangar stops trying it says why.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections.abc import Callable
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from app import ci, commands
from app.engine import PrNotes
from app.intents import job_for_pr
from app.models import AutofixRow, Intent, Job, RunStage, autofix_row_id, changed
from app.redact import redact, tail
from app.render import autofix as words
from app.render.reasons import Why
from app.repoconfig import CONFIG_PATH, AutofixPolicy, parse_repo_config

if TYPE_CHECKING:
    from app.engine import StepContext
    from app.ghops import RepoOps
    from app.payloads import PullRequestEvent, PullRequestReviewEvent

log = logging.getLogger(__name__)

IGNORED_CHECKS = ("hangar / agent", "hangar / land")
VERIFY_CHECK = "hangar / verify"
EVIDENCE_CHARS = 6000  # per failed check
PROMPT_CHARS = 12000  # the whole prompt
TRUNCATED = "\n…(truncated)"
SIGNATURE_LINES = 5
MAX_JUDGED = 50
PUSH_WORD_GRACE_S = 120  # how long CI on an unknown head waits for the push event



class Stop(StrEnum):
    """Why auto-fix did not start a turn (worded by render.autofix)."""

    MERGING = "merging"
    TURNS_USED = "turns_used"
    OFF_FOR_REPO = "off_for_repo"
    OFF_FOR_PR = "off_for_pr"
    OFF = "off"
    SAME_FAILURE = "same_failure"
    QUIET = "quiet"
    REVIEW_WAITS = "review_waits"
    REVIEW_NOT_STARTED = "review_not_started"
    GAVE_UP = "gave_up"


# Reasons that pass with time: looked at again. The others are said once per failure.
PASSING = (Stop.MERGING, Stop.QUIET)

# Lines that say what failed; the rest of a log is context.
_FAILING_LINE = re.compile(r"(?i)(fail|error|exception|assert|panic|traceback|not ok\b)")
# What changes between two runs of the same failure: where, when, how long, which commit.
_PATH = re.compile(r"(?:/[\w.+@-]+)+/([\w.+@-]+)")
_DURATION = re.compile(r"\b\d+(?:\.\d+)?\s*(?:ms|s|sec|seconds|m|min)\b")
_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d+)?Z?")
_SHA = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")


class Failure(BaseModel):
    name: str
    title: str = ""
    summary: str = ""
    details: list[str] = []  # annotations, log lines, the status's description and URL


row_id = autofix_row_id  # an auto-fix row is one per repository and PR


def status_notes(engine: StepContext, repo: str, pr_number: int) -> PrNotes:
    """Why auto-fix stopped trying on a PR, for its job's status comment."""
    row = engine.store.get("autofix", row_id(repo, pr_number), AutofixRow)
    if row and row.stopped:
        return PrNotes((words.status_note(pr_number, row.stopped),))
    return PrNotes()


# -- pure rules ------------------------------------------------------------------------


def normalize_line(line: str) -> str:
    """A log line without what differs between two runs of the same failure."""
    line = _TIMESTAMP.sub("<time>", line.strip())
    line = _PATH.sub(r"\1", line)
    line = _DURATION.sub("<duration>", line)
    return _SHA.sub("<sha>", line)


def failing_lines(text: str, limit: int = SIGNATURE_LINES) -> list[str]:
    """The first lines that say what failed (or the first lines, when none does)."""
    lines = [line.strip() for line in text.splitlines()
             if line.strip() and not line.strip().startswith("```")]
    hits = [line for line in lines if _FAILING_LINE.search(line)]
    return [normalize_line(line)[:200] for line in (hits or lines)[:limit]]


def failure_signature(failures: list[Failure]) -> str:
    """Names of the failed checks plus their first failing lines: 'the same failure'."""
    parts = []
    for failure in sorted(failures, key=lambda f: f.name):
        evidence = "\n".join(failure.details) or failure.title
        parts.append("\n".join([failure.name, *failing_lines(evidence)]))
    return hashlib.sha256("\n\n".join(parts).encode()).hexdigest()[:16]


def why_not(
    row: AutofixRow, policy: AutofixPolicy, signature: str | None, *, landing: bool,
    now_s: float, requested: bool = False,
) -> str | None:
    """None when a turn may start; else the reason, worded for the humans."""
    return words.stopped(stop_reason(row, policy, signature, landing=landing, now_s=now_s,
                                     requested=requested))


def stop_reason(
    row: AutofixRow, policy: AutofixPolicy, signature: str | None, *, landing: bool,
    now_s: float, requested: bool = False,
) -> Why | None:
    """None when a turn may start; else why not (a `Stop` code).

    `requested`: a person asked (the "Fix with hangar" button). The bound and a merge in
    progress still hold; the rules that keep hangar from acting on its own do not.
    """
    if landing:
        return Why(Stop.MERGING)
    if row.turns >= policy.max_turns:
        return Why(Stop.TURNS_USED, max_turns=policy.max_turns)
    if requested:
        return None
    if not policy.enabled:
        return Why(Stop.OFF_FOR_REPO)
    if not row.enabled:
        return Why(Stop.OFF_FOR_PR)
    if signature is not None and row.last_signature == signature:
        return Why(Stop.SAME_FAILURE)
    if row.last_human_push_at and now_s - row.last_human_push_at < policy.quiet_minutes * 60:
        return Why(Stop.QUIET)
    return None


def _bounded(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - len(TRUNCATED)] + TRUNCATED


def prompt_for_failures(failures: list[Failure], turn: int, max_turns: int) -> str:
    """The turn's prompt: each failed check with its evidence, redacted and bounded."""
    head = (f"Auto-fix turn {turn} of {max_turns}: CI failed on this pull request. "
            "Fix the cause (not the tests' expectations, unless they are wrong) and commit.")
    sections = []
    for failure in failures:
        lines = [f"## {failure.name} failed"]
        lines += [part for part in (failure.title, failure.summary) if part]
        lines += failure.details
        sections.append(_bounded(redact("\n".join(lines)), EVIDENCE_CHARS))
    return _bounded("\n\n".join([head, *sections]), PROMPT_CHARS)


def prompt_for_review(author: str, body: str, comments: list[dict[str, Any]]) -> str:
    lines = [f"@{author} requested changes in a review. Address this review (and only this "
             "review), then commit.", ""]
    if body.strip():
        lines += [body.strip(), ""]
    for c in comments:
        where = f"{c.get('path')}:{c.get('line') or c.get('original_line') or '?'}"
        lines.append(f"- {where}: {c.get('body', '')}")
    return _bounded(redact("\n".join(lines)), PROMPT_CHARS)


# -- rows ---------------------------------------------------------------------------------


def get_row(engine: StepContext, autofix_id: str) -> AutofixRow | None:
    return engine.store.get("autofix", autofix_id, AutofixRow)


def ensure_row(engine: StepContext, job: Job, pr_number: int) -> AutofixRow:
    existing = get_row(engine, row_id(job.thread.repo, pr_number))
    if existing:
        return existing
    row = AutofixRow(id=row_id(job.thread.repo, pr_number), job_id=job.id,
                     repo=job.thread.repo, pr_number=pr_number)
    return save(engine, row)


def save(engine: StepContext, row: AutofixRow, *, active: bool = True) -> AutofixRow:
    engine.store.put("autofix", row.id, row, active=active)
    return row


def patch(engine: StepContext, autofix_id: str, **fields: Any) -> AutofixRow:
    """Read the row fresh, change only these fields, write it back (no await between):
    events that arrived while a step awaited GitHub are kept."""
    row = get_row(engine, autofix_id)
    assert row is not None, autofix_id
    return save(engine, changed(row, **fields))


def judged(row: AutofixRow, key: str) -> list[str]:
    return [*row.seen_heads[-MAX_JUDGED:], key] if key not in row.seen_heads else row.seen_heads


# -- intake -----------------------------------------------------------------------------
# The engine calls these (app/wiring.py registers them) for the events auto-fix hears of,
# beside landing's own listeners: one's failure never keeps the other from hearing.


def on_review(engine: StepContext, event: PullRequestReviewEvent) -> None:
    """A review asking for changes starts a turn; one that holds a `/hangar` command is
    that command instead."""
    if (event.action == "dismissed" or event.review.state.lower() != "changes_requested"
            or commands.parse(event.review.body or "")):
        return
    job = job_for_pr(engine, event.repository.full_name, event.pull_request.number)
    if job is not None:
        record_change_request(engine, job, event)


def on_pull_request(engine: StepContext, event: PullRequestEvent) -> None:
    if event.action not in ("closed", "synchronize"):
        return
    job = job_for_pr(engine, event.repository.full_name, event.number)
    if job is None:
        return
    if event.action == "closed":
        record_closed(engine, job.thread.repo, event.number)
    else:
        record_push(engine, job, event)


def on_ci(engine: StepContext, repo: str, head_sha: str, *, check: str | None = None,
          ours: bool = False) -> None:
    # Of hangar's own checks only `verify` is evidence for auto-fix (and the end of a
    # turn wakes it too): its agent and land checks and its suite tell it nothing.
    if not ours or check == VERIFY_CHECK:
        record_ci(engine, repo, head_sha)


def after_run_step(engine: StepContext, run_id: str) -> None:
    """A turn is over once its verification is done: look at the head's CI now (a fix
    waits for the turn)."""
    run = engine.get_run(run_id)
    if run is None or run.stage != RunStage.DONE or run.verification is None:
        return
    job = engine.get_job(run.job_id)
    if job is not None and run.head_sha:
        record_ci(engine, job.thread.repo, run.head_sha)


def record_ci(engine: StepContext, repo: str, head_sha: str) -> None:
    """A check or status finished on head_sha: look again at the PR whose head it is.

    Only that PR: a busy repository's CI must not make every open PR ask GitHub again. A
    head hangar has not heard of yet is looked at when its push event comes (or by the
    slow poll)."""
    from app.models import Run

    prs = set()
    for run in engine.store.find("run", Run, head_sha=head_sha):
        if run.pr_number:
            job = engine.get_job(run.job_id)
            if job is not None and job.thread.repo == repo:
                ensure_row(engine, job, run.pr_number)
                prs.add(run.pr_number)
    for row in engine.store.all("autofix", AutofixRow, active=True):
        if row.repo == repo and (row.pr_number in prs or head_sha in row.pushed_heads):
            patch(engine, row.id, due_at=0)


def record_closed(engine: StepContext, repo: str, pr_number: int) -> None:
    """GitHub said the PR was closed (or merged): nothing to fix there, no look needed.
    Any later event on it (a reopen, a push, CI) makes the row active again."""
    row = get_row(engine, row_id(repo, pr_number))
    if row is not None:
        save(engine, row, active=False)


def last_turn(engine: StepContext, job: Job, pr_number: int) -> Any:
    """The newest finished turn on the PR that saw it (its answer kept), or None."""
    done = [r for r in engine.runs_of(job.id)
            if r.pr_number == pr_number and r.finished and r.pr_seen]
    return max(done, key=lambda r: r.queued_at) if done else None


def record_push(engine: StepContext, job: Job, event: PullRequestEvent) -> None:
    row = ensure_row(engine, job, event.number)
    last = last_turn(engine, job, event.number)  # a push makes its answer stale
    fields: dict[str, Any] = {"due_at": 0, "turn_seen": last.id if last else row.turn_seen,
                              "pushed_heads": [
        *row.pushed_heads[-MAX_JUDGED:], event.pull_request.head.sha],
        "unknown_heads": {h: t for h, t in row.unknown_heads.items()
                          if h != event.pull_request.head.sha}}
    if not event.sender.is_bot:
        fields["last_human_push_at"] = time.time()
        fields["pushers"] = list(dict.fromkeys([*row.pushers, event.sender.login]))
    patch(engine, row.id, **fields)


def record_change_request(engine: StepContext, job: Job, event: PullRequestReviewEvent) -> None:
    """A review asking for changes starts a turn that addresses that review only."""
    row = ensure_row(engine, job, event.pull_request.number)
    if event.review.id in row.seen_reviews or event.review.user.is_bot:
        return
    patch(engine, row.id, seen_reviews=[*row.seen_reviews, event.review.id])
    from app.models import Thread

    intent_id = f"review-{event.review.id}"
    if engine.store.get("intent", intent_id, Intent) or event.installation is None:
        return
    engine.save_intent(Intent(
        id=intent_id, comment_id=0, author=event.review.user.login, command="review_turn",
        thread=Thread(repo=job.thread.repo, number=event.pull_request.number,
                      installation_id=event.installation.id, is_pr=True),
        args={"review_id": event.review.id, "body": event.review.body or ""},
    ))


async def handle_command(engine: StepContext, ops: RepoOps, intent: Intent) -> str:
    from app.intents import hangar_pr_job

    job = await hangar_pr_job(engine, ops, intent)
    if job is None:
        return "not a hangar PR"
    row = ensure_row(engine, job, intent.thread.number)
    if intent.command == "autofix":
        enabled = bool(intent.args["enabled"])
        # Turning it back on forgets what was decided while it was off.
        patch(engine, row.id, enabled=enabled, due_at=0,
              stopped=None if enabled else words.stopped(Why(Stop.OFF_FOR_PR)),
              seen_heads=row.seen_heads if not enabled else [])
        await show(engine, job)
        return f"autofix {'on' if enabled else 'off'}"
    if intent.command == "review_turn":
        return await review_turn(engine, ops, job, row, {"author": intent.author, **intent.args})
    # the "Fix with hangar" button: the person who pressed it asked for the turn
    return await fix_now(engine, ops, job, row, requested=True, requested_by=intent.author)


# -- the step ---------------------------------------------------------------------------


async def advance_autofix(engine: StepContext, autofix_id: str) -> None:
    row = get_row(engine, autofix_id)
    if row is None or row.due_at > time.time():
        return
    # The slow poll looks again later; events make the row due at once.
    row = patch(engine, autofix_id, due_at=time.time() + engine.settings.poll_interval_seconds)
    job = engine.get_job(row.job_id)
    if job is None:
        save(engine, row, active=False)
        return
    ops = await engine.repo_ops(job.thread)
    await fix_now(engine, ops, job, row, requested=False)


def turn_running(engine: StepContext, job: Job, pr_number: int) -> bool:
    return any(not r.finished for r in engine.runs_of(job.id) if r.pr_number == pr_number)


def known_head(engine: StepContext, job: Job, row: AutofixRow, head: str) -> bool:
    """hangar's turn made this head, or GitHub said who pushed it. A verification is not
    hangar's word: it records the head it found on the branch, which may be a person's."""
    fresh = get_row(engine, row.id) or row
    return head in fresh.pushed_heads or any(
        r.head_sha == head for r in engine.runs_of(job.id)
        if r.pr_number == row.pr_number and r.kind != "verify")


def merging(engine: StepContext, row: AutofixRow) -> bool:
    from app.landing import LandRequest, LandState, land_id

    request = engine.store.get("land", land_id(row.repo, row.pr_number), LandRequest)
    return bool(request and request.state == LandState.MERGING)


async def fix_now(engine: StepContext, ops: RepoOps, job: Job, row: AutofixRow, *,
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
        row = get_row(engine, row.id)
        if row.stopped and row.enabled:  # green now: what stopped hangar no longer matters
            patch(engine, row.id, stopped=None)
            await show(engine, job)
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
        row = get_row(engine, row.id)
        patch(engine, row.id, pushed_heads=[*row.pushed_heads[-MAX_JUDGED:], head],
              unknown_heads={h: t for h, t in row.unknown_heads.items() if h != head},
              last_human_push_at=max(row.last_human_push_at or 0.0, first))
    signature = failure_signature(failures)
    key = f"{head}:{signature}"
    if key in row.seen_heads and not requested:
        return "already judged"
    config, _ = parse_repo_config(await ops.get_text(CONFIG_PATH, ref=pr["base"]["ref"]))
    policy = config.autofix
    row = get_row(engine, row.id)  # fresh: a push or command may have come in meanwhile
    if turn_running(engine, job, row.pr_number):
        return "a turn is running"
    why = stop_reason(row, policy, signature, landing=merging(engine, row), now_s=time.time(),
                      requested=requested)
    if why:
        reason = words.stopped(why)
        if row.stopped != reason:
            engine.note(job.id, f"auto-fix on #{row.pr_number} not started: {reason}")
        # A reason that passes with time is looked at again; the others are said once.
        later = why.code in PASSING
        patch(engine, row.id, stopped=reason,
              seen_heads=row.seen_heads if later else judged(row, key))
        await show(engine, job)
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


async def start_followup_now(engine: StepContext, job: Job, row: AutofixRow, prompt: str, *,
                             requested_by: str, label: str) -> bool:
    """Start the turn and count it, with no await between the two (start_followup has
    none): two steps deciding at once start one turn and count one."""
    from app.intents import start_followup

    outcome = await start_followup(engine, job, row.pr_number, prompt, kind="autofix",
                                   requested_by=requested_by, label=label)
    if not outcome.startswith("autofix "):
        return False
    fresh = get_row(engine, row.id)
    patch(engine, row.id, turns=fresh.turns + 1, stopped=None)
    return True


async def show(engine: StepContext, job: Job) -> None:
    from app.runs import refresh_status

    await refresh_status(engine, job.id)


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
        details = await annotations(ops, run)
        details += await actions_log_tail(ops, run)
        if output.get("text"):
            details.append(tail(output["text"], 3000))
        failures.append(Failure(name=run["name"], title=output.get("title") or "",
                                summary=(output.get("summary") or "")[:2000], details=details))
    for status in statuses:
        if ci.of_status(status) == ci.Outcome.FAILED:
            failures.append(Failure(
                name=status["context"], title=status.get("description") or "",
                details=[f"details: {status['target_url']}"] if status.get("target_url") else []))
    return failures, finished


async def annotations(ops: RepoOps, run: dict) -> list[str]:
    if not (run.get("output") or {}).get("annotations_count"):
        return []
    found = await ops.gh.getitem(f"{ops.base}/check-runs/{run['id']}/annotations")
    return [f"{a['path']}:{a.get('start_line')}: {a.get('message', '')}" for a in found[:50]]


async def actions_log_tail(ops: RepoOps, run: dict) -> list[str]:
    """For GitHub Actions, the failed job's log (the check run id is the job id)."""
    if (run.get("app") or {}).get("slug") != "github-actions":
        return []
    try:
        data = await ops.gh.getitem(f"{ops.base}/actions/jobs/{run['id']}/logs",
                                    accept="text/plain")
    except Exception as exc:  # the log is evidence, not a requirement
        return [f"(the job log could not be fetched: {exc})"]
    text = data if isinstance(data, str) else str(data)
    return [tail(text, 3000)]


async def review_turn(engine: StepContext, ops: RepoOps, job: Job, row: AutofixRow,
                      review: dict[str, Any]) -> str:
    """A turn for one change request: {review_id, author, body}. It waits for a running
    turn to end, then starts within the same bound."""
    author = review["author"]
    config, _ = parse_repo_config(await ops.get_text(CONFIG_PATH, ref=job.base_branch))
    policy = config.autofix
    comments = await ops.gh.getitem(
        f"{ops.base}/pulls/{row.pr_number}/reviews/{review['review_id']}/comments")
    row = get_row(engine, row.id)
    if turn_running(engine, job, row.pr_number):
        patch(engine, row.id, pending_review=review,
              stopped=words.stopped(Why(Stop.REVIEW_WAITS, author=author)))
        await show(engine, job)
        return "review turn waits for the running turn"
    why = stop_reason(row, policy, None, landing=merging(engine, row), now_s=time.time(),
                      requested=True)
    if why is None and not (policy.enabled and row.enabled):
        why = Why(Stop.OFF)
    if why:
        reason = words.stopped(Why(Stop.REVIEW_NOT_STARTED, author=author, why=why))
        patch(engine, row.id, stopped=reason, pending_review=None)
        engine.note(job.id, reason)
        await show(engine, job)
        return "review turn not started"
    turn = row.turns + 1
    started = await start_followup_now(
        engine, job, row, prompt_for_review(author, review.get("body") or "", comments),
        requested_by=author,
        label=words.review_turn_label(turn, policy.max_turns, author))
    if started:
        patch(engine, row.id, pending_review=None)
        return f"review turn {turn}"
    patch(engine, row.id, pending_review=review, due_at=0)
    return "review turn waits for the running turn"


def give_up(engine: StepContext, autofix_id: str, reason: str) -> None:
    """The step failed again and again: stop looking until an event wakes the row."""
    row = get_row(engine, autofix_id)
    if row is None:
        return
    save(engine, changed(row, **{
        "stopped": words.stopped(Why(Stop.GAVE_UP, error=reason))}), active=False)
    engine.note(row.job_id, f"auto-fix #{row.pr_number} stopped: {reason}")
