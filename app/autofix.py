"""Auto-fix turns: when CI fails on a hangar PR, hangar tries to fix it, within a bound.

Per PR one durable row says what was tried. A turn starts only when every check suite
and status on the PR's current head has finished and one failed; it carries the failures'
evidence. It never starts twice for one head, never past `autofix.max_turns`, never when
the failure repeats the previous turn's, never while a human asked for changes or pushed
recently, and never while the PR is being merged.
"""

from __future__ import annotations

import hashlib
import logging
import time
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from app.models import Intent, Job, now
from app.redact import redact, tail
from app.repoconfig import CONFIG_PATH, AutofixPolicy, parse_repo_config

if TYPE_CHECKING:
    from app.engine import Engine
    from app.ghops import RepoOps
    from app.payloads import PullRequestEvent, PullRequestReviewEvent

log = logging.getLogger(__name__)

IGNORED_CHECKS = ("hangar / agent", "hangar / land")
FAILED = ("failure", "timed_out", "cancelled", "action_required", "startup_failure")
EVIDENCE_CHARS = 6000


class Failure(BaseModel):
    name: str
    title: str = ""
    summary: str = ""
    details: list[str] = []  # annotations, log lines, the status's description and URL


class AutofixRow(BaseModel):
    id: str
    job_id: str
    repo: str
    pr_number: int
    enabled: bool = True
    turns: int = 0
    last_signature: str | None = None
    seen_heads: list[str] = []  # heads already judged: one turn per head at most
    seen_reviews: list[int] = []
    last_human_push_at: float | None = None
    stopped: str | None = None  # why hangar stopped trying, shown in the status comment
    due_at: float = 0.0
    created_at: float = Field(default_factory=now)


def row_id(repo: str, pr_number: int) -> str:
    return f"autofix-{repo.replace('/', '-')}-{pr_number}"


# -- pure rules ------------------------------------------------------------------------


def failure_signature(failures: list[Failure]) -> str:
    """Names of the failed checks plus their first failing lines: 'the same failure'."""
    parts = []
    for failure in sorted(failures, key=lambda f: f.name):
        first = next((d for d in failure.details if d.strip()), failure.title)
        parts.append(f"{failure.name}\n{first.strip()[:200]}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def why_not(
    row: AutofixRow, policy: AutofixPolicy, signature: str, *, landing: bool, now_s: float
) -> str | None:
    """None when a turn may start; else the reason, said to the humans."""
    if not policy.enabled or not row.enabled:
        return "auto-fix is off for this pull request (`/hangar autofix on` turns it back on)"
    if row.turns >= policy.max_turns:
        return (f"auto-fix used its {policy.max_turns} turn(s); comment `/hangar <instruction>` "
                "to ask for another turn, or fix it by hand")
    if row.last_signature == signature:
        return ("the last auto-fix turn failed the same way; hangar stopped repeating itself. "
                "Comment `/hangar <instruction>` with a hint, or fix it by hand")
    if row.last_human_push_at and now_s - row.last_human_push_at < policy.quiet_minutes * 60:
        return "someone pushed to the branch recently; hangar leaves it to them"
    if landing:
        return "the pull request is being merged"
    return None


def prompt_for_failures(failures: list[Failure], turn: int, max_turns: int) -> str:
    lines = [f"Auto-fix turn {turn} of {max_turns}: CI failed on this pull request. "
             "Fix the cause (not the tests' expectations, unless they are wrong) and commit.",
             ""]
    for failure in failures:
        lines.append(f"## {failure.name} failed")
        if failure.title:
            lines.append(failure.title)
        if failure.summary:
            lines.append(failure.summary)
        lines += failure.details
        lines.append("")
    return redact("\n".join(lines))[:EVIDENCE_CHARS * 2]


# -- intake -----------------------------------------------------------------------------


def ensure_row(engine: Engine, job: Job, pr_number: int) -> AutofixRow:
    existing = engine.store.get("autofix", row_id(job.thread.repo, pr_number), AutofixRow)
    if existing:
        return existing
    row = AutofixRow(id=row_id(job.thread.repo, pr_number), job_id=job.id,
                     repo=job.thread.repo, pr_number=pr_number, enabled=job.autofix)
    return save(engine, row)


def save(engine: Engine, row: AutofixRow) -> AutofixRow:
    engine.store.put("autofix", row.id, row, active=True)
    return row


def record_ci(engine: Engine, repo: str, head_sha: str) -> None:
    for row in engine.store.all("autofix", AutofixRow, active=True):
        if row.repo == repo:
            row.due_at = 0
            save(engine, row)
    from app.landing import LandRequest

    for request in engine.store.all("land", LandRequest, active=True):
        if request.repo == repo:
            request.due_at = 0
            engine.store.put("land", request.id, request, active=True)


def record_push(engine: Engine, job: Job, event: PullRequestEvent) -> None:
    row = ensure_row(engine, job, event.number)
    if not event.sender.is_bot:
        row.last_human_push_at = time.time()
    row.due_at = 0
    save(engine, row)


def record_change_request(engine: Engine, job: Job, event: PullRequestReviewEvent) -> None:
    """A review asking for changes starts a turn that addresses that review only."""
    row = ensure_row(engine, job, event.pull_request.number)
    if event.review.id in row.seen_reviews or event.review.user.is_bot:
        return
    row.seen_reviews.append(event.review.id)
    save(engine, row)
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


async def handle_command(engine: Engine, ops: RepoOps, intent: Intent) -> str:
    from app.intents import NOT_A_HANGAR_PR, job_for_pr, reply

    job = job_for_pr(engine, intent.thread.repo, intent.thread.number)
    if job is None:
        await reply(ops, intent, NOT_A_HANGAR_PR)
        return "not a hangar PR"
    row = ensure_row(engine, job, intent.thread.number)
    if intent.command == "autofix":
        row.enabled = bool(intent.args["enabled"])
        row.stopped = None if row.enabled else "auto-fix is off for this pull request"
        row.due_at = 0
        save(engine, row)
        return f"autofix {'on' if row.enabled else 'off'}"
    if intent.command == "review_turn":
        return await review_turn(engine, ops, job, row, intent)
    if intent.command == "autofix_button":
        return await fix_now(engine, ops, job, row, requested=True)
    await reply(ops, intent, "`/hangar pick` chooses among attempts of `/hangar try`; this "
                             "job has a single attempt.")
    return "pick without attempts"


# -- the step ---------------------------------------------------------------------------


async def advance_autofix(engine: Engine, autofix_id: str) -> None:
    row = engine.store.get("autofix", autofix_id, AutofixRow)
    if row is None or row.due_at > time.time():
        return
    row.due_at = time.time() + engine.settings.poll_interval_seconds
    save(engine, row)
    job = engine.get_job(row.job_id)
    ops = await engine.repo_ops(job.thread)
    await fix_now(engine, ops, job, row, requested=False)


async def fix_now(engine: Engine, ops: RepoOps, job: Job, row: AutofixRow, *,
                  requested: bool) -> str:
    from app.intents import start_followup
    from app.landing import LandRequest, LandState, land_id

    pr = await ops.get_pr(row.pr_number)
    if pr.get("state") != "open":
        engine.store.put("autofix", row.id, row, active=False)
        return "PR not open"
    head = pr["head"]["sha"]
    runs = [r for r in engine.runs_of(job.id) if r.pr_number == row.pr_number]
    if any(not r.finished for r in runs):
        return "a turn is running"
    if head in row.seen_heads and not requested:
        return "head already judged"
    failures, finished = await collect_failures(ops, head)
    if not finished and not requested:
        return "CI still running"
    if not failures:
        row.seen_heads.append(head)
        save(engine, row)
        return "CI green"
    config, _ = parse_repo_config(await ops.get_text(CONFIG_PATH, ref=pr["base"]["ref"]))
    request = engine.store.get("land", land_id(row.repo, row.pr_number), LandRequest)
    signature = failure_signature(failures)
    reason = why_not(row, config.autofix, signature,
                     landing=bool(request and request.state == LandState.MERGING),
                     now_s=time.time())
    row.seen_heads.append(head)
    if reason:
        row.stopped = reason
        save(engine, row)
        engine.note(job.id, f"auto-fix on #{row.pr_number} not started: {reason}")
        return "not started"
    row.turns += 1
    row.last_signature = signature
    row.stopped = None
    save(engine, row)
    names = ", ".join(f.name for f in failures)
    prompt = prompt_for_failures(failures, row.turns, config.autofix.max_turns)
    await start_followup(engine, job, row.pr_number, prompt, kind="autofix",
                         requested_by="hangar",
                         label=f"auto-fix turn {row.turns} of {config.autofix.max_turns}: "
                               f"{names} failed")
    return f"auto-fix turn {row.turns}"


async def collect_failures(ops: RepoOps, head: str) -> tuple[list[Failure], bool]:
    """The failed checks on head with their evidence, and whether everything finished."""
    suites = await ops.gh.getitem(f"{ops.base}/commits/{head}/check-suites")
    runs = await ops.gh.getitem(f"{ops.base}/commits/{head}/check-runs?filter=latest")
    combined = await ops.gh.getitem(f"{ops.base}/commits/{head}/status")
    finished = all(s.get("status") == "completed" for s in suites.get("check_suites", []))
    finished = finished and all(r.get("status") == "completed"
                                for r in runs.get("check_runs", []))
    finished = finished and all(s.get("state") != "pending"
                                for s in combined.get("statuses", []))
    failures = []
    for run in runs.get("check_runs", []):
        if run["name"] in IGNORED_CHECKS or run.get("conclusion") not in FAILED:
            continue
        output = run.get("output") or {}
        details = await annotations(ops, run)
        details += await actions_log_tail(ops, run)
        if output.get("text"):
            details.append(tail(output["text"], 3000))
        failures.append(Failure(name=run["name"], title=output.get("title") or "",
                                summary=(output.get("summary") or "")[:2000], details=details))
    for status in combined.get("statuses", []):
        if status.get("state") in ("failure", "error"):
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


async def review_turn(engine: Engine, ops: RepoOps, job: Job, row: AutofixRow,
                      intent: Intent) -> str:
    from app.intents import start_followup

    config, _ = parse_repo_config(await ops.get_text(CONFIG_PATH))
    if row.turns >= config.autofix.max_turns or not row.enabled:
        row.stopped = (f"a review asked for changes, but auto-fix used its "
                       f"{config.autofix.max_turns} turn(s) or is off")
        save(engine, row)
        return "review turn not started"
    review_id = intent.args["review_id"]
    comments = await ops.gh.getitem(
        f"{ops.base}/pulls/{row.pr_number}/reviews/{review_id}/comments")
    lines = [f"@{intent.author} requested changes in a review. Address this review "
             "(and only this review), then commit.", "", intent.args.get("body") or ""]
    for c in comments:
        lines.append(f"- {c.get('path')}:{c.get('line') or c.get('original_line')}: {c['body']}")
    row.turns += 1
    save(engine, row)
    await start_followup(engine, job, row.pr_number, redact("\n".join(lines)),
                         kind="autofix", requested_by=intent.author,
                         label=f"auto-fix turn {row.turns} of {config.autofix.max_turns}: "
                               f"changes requested by @{intent.author}")
    return f"review turn {row.turns}"
