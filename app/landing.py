"""Landing hangar's pull requests: a human approves the exact head, hangar merges as the
App, and the branch ruleset is the gate.

A land request is a durable row per PR:
queued → updating → waiting_ci → awaiting_approval → merging → landed, or conflict,
ci_failed, rejected, cancelled, failed — each with a reason and an append-only history.
GitHub decides what may merge; hangar only ever asks it, with the approved head pinned.
"""

from __future__ import annotations

import logging
import time
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from gidgethub import BadRequest
from pydantic import BaseModel, Field

from app.models import Intent, Job, JobState, now
from app.repoconfig import CONFIG_PATH, LandPolicy, parse_repo_config

if TYPE_CHECKING:
    from app.engine import Engine
    from app.ghops import RepoOps
    from app.payloads import PullRequestEvent, PullRequestReviewEvent

log = logging.getLogger(__name__)

LAND_CHECK = "hangar / land"
PASSING = ("success", "neutral", "skipped")
FAILING = ("failure", "cancelled", "timed_out", "action_required", "startup_failure", "stale",
           "error")


class LandState(StrEnum):
    QUEUED = "queued"
    UPDATING = "updating"
    WAITING_CI = "waiting_ci"
    AWAITING_APPROVAL = "awaiting_approval"
    MERGING = "merging"
    LANDED = "landed"
    CONFLICT = "conflict"
    CI_FAILED = "ci_failed"
    REJECTED = "rejected"
    CANCELLED = "cancelled"
    FAILED = "failed"


# The lane: one request per (repo, base) at a time brings its branch up to date, waits
# for its checks and merges. Waiting for a person's approval does not hold the lane.
IN_FLIGHT = (LandState.UPDATING, LandState.WAITING_CI, LandState.MERGING)
FINAL = (LandState.LANDED, LandState.CANCELLED)
# States a new approval, push or `/hangar land` may start again from.
RESTARTABLE = (LandState.CONFLICT, LandState.CI_FAILED, LandState.REJECTED, LandState.FAILED)


class ReviewRecord(BaseModel):
    id: int
    user: str
    user_type: str = "User"
    state: str  # lowercase, as webhooks send it
    commit_id: str | None = None
    dismissed: bool = False  # dismissed on GitHub (by a person, or a push under dismiss-stale)
    at: float = Field(default_factory=now)


class LandRequest(BaseModel):
    id: str
    job_id: str
    repo: str
    installation_id: int
    pr_number: int
    base: str
    branch: str
    requested_by: str
    state: LandState = LandState.QUEUED
    reason: str | None = None
    head_sha: str | None = None
    wished: bool = False  # someone commented `/hangar land`
    ack_sensitive_sha: str | None = None
    reviews: list[ReviewRecord] = []
    explained: list[int] = []  # reviews whose not counting was already said
    merge_sha: str | None = None
    ci_since: float | None = None
    updated_from: str | None = None  # the head hangar asked GitHub to update
    updated_at_ask: float = 0.0
    history: list[dict[str, Any]] = []
    due_at: float = 0.0  # the engine's next look; events set it to now
    problems: list[str] = []  # what is wrong in .github/hangar.yml (defaults apply)
    shown: str | None = None  # what check run `hangar / land` last said, to skip no-op edits
    version: int = 0  # bumped by every save; a step holding an older copy stops
    updated_at: float = Field(default_factory=now)

    @property
    def active(self) -> bool:
        return self.state not in FINAL


def land_id(repo: str, pr_number: int) -> str:
    return f"land-{repo.replace('/', '-')}-{pr_number}"


# -- pure rules ------------------------------------------------------------------------


def approval_verdict(
    review: ReviewRecord, *, head_sha: str | None, requester: str, permission: str,
    policy: LandPolicy,
) -> str | None:
    """None when this review counts as an approval of head_sha; else why it does not."""
    if review.state.lower() != "approved":
        return "it is not an approval"
    if review.user_type == "Bot" or review.user.endswith("[bot]"):
        return f"@{review.user} is a bot; only people can approve hangar's work"
    if policy.forbid_self_approval and review.user == requester:
        return (f"@{review.user} asked for this work, and the policy forbids self-approval "
                "(land.forbid_self_approval); someone else with write access must approve")
    if permission not in ("admin", "maintain", "write"):
        return f"@{review.user} does not have write access to this repository"
    if review.commit_id != head_sha:
        return (f"@{review.user} approved `{(review.commit_id or 'unknown')[:7]}`, but the head "
                f"is now `{(head_sha or '')[:7]}`; approvals are bound to the exact commit")
    if review.dismissed:
        return f"@{review.user}'s approval was dismissed on GitHub"
    return None


def checks_verdict(
    required: list[str], check_runs: list[dict], statuses: list[dict]
) -> tuple[str, list[str]]:
    """("passed" | "failed" | "pending", names) for the required checks on one commit.

    Pending names list the checks nobody has reported first, then those still running.
    """
    results = check_results(check_runs, statuses)
    failed = [n for n in required if results.get(n) in FAILING]
    if failed:
        return "failed", failed
    unreported = [n for n in required if n not in results]
    running = [n for n in required if n in results and results[n] not in PASSING]
    if unreported or running:
        return "pending", [*unreported, *running]
    return "passed", []


def check_results(check_runs: list[dict], statuses: list[dict]) -> dict[str, str]:
    """Each check's result by name: a conclusion, a status state, or "pending"."""
    results: dict[str, str] = {}
    for run in check_runs:
        name = run["name"]
        value = run.get("conclusion") if run.get("status") == "completed" else "pending"
        # Of several runs with one name (a re-run), a success stands.
        if results.get(name) != "success":
            results[name] = value or "pending"
    for status in statuses:
        results.setdefault(status["context"], status["state"])
    return results


def required_from_rules(rules: list[dict]) -> list[str]:
    names = []
    for rule in rules:
        if rule.get("type") == "required_status_checks":
            for check in (rule.get("parameters") or {}).get("required_status_checks", []):
                names.append(check["context"])
    return list(dict.fromkeys(names))


def sensitive_files(compare: dict | None, patterns: list[str]) -> list[str]:
    """Changed files that match the policy's sensitive paths (gitignore-like patterns)."""
    from proxy.policy import sensitive_paths

    if not compare:
        return []
    names = [f["filename"] for f in compare.get("files", [])]
    return sensitive_paths(names, [_gitignore_style(p) for p in patterns])


def _gitignore_style(pattern: str) -> str:
    """As in .gitignore: a pattern without a slash matches a name at any depth, a leading
    slash anchors it at the top, and a trailing slash means everything under a directory."""
    if "/" not in pattern.rstrip("/"):
        pattern = "**/" + pattern
    pattern = pattern.lstrip("/")
    if pattern.endswith("/"):
        pattern += "**"
    return pattern


def bypassing_rulesets(rulesets: list[dict], app_id: int | None) -> list[str]:
    """Names of the rulesets hangar's App may bypass (none, for the ruleset to be a gate).

    GitHub says so for the caller itself (`current_user_can_bypass`); bypass_actors may
    be hidden from an installation, so both are read."""
    return [
        rs.get("name") or str(rs.get("id")) for rs in rulesets
        if rs.get("current_user_can_bypass") in ("always", "pull_requests_only", "exempt")
        or any(actor.get("actor_type") == "Integration" and actor.get("actor_id") == app_id
               for actor in rs.get("bypass_actors") or [])
    ]


def gate_report(
    rules: list[dict], rulesets: list[dict], app_id: int | None
) -> list[tuple[bool, str]]:
    """What protects a branch, line by line, with the fix for what is missing."""
    kinds = {r.get("type") for r in rules}
    lines: list[tuple[bool, str]] = []
    # Several rulesets may each hold a pull_request rule: the strictest of each wins.
    pr_params = [r.get("parameters") or {} for r in rules if r.get("type") == "pull_request"]
    lines.append((bool(pr_params), "pull request required" if pr_params else
                  "no pull_request rule: add one to a branch ruleset so nothing lands unreviewed"))
    count = max((p.get("required_approving_review_count", 0) for p in pr_params), default=0)
    lines.append((count >= 1, f"{count} approving review(s) required" if count else
                  "no approvals required: set required_approving_review_count to 1 or more"))
    dismiss = any(p.get("dismiss_stale_reviews_on_push") for p in pr_params)
    lines.append((dismiss, "stale approvals dismissed on push" if dismiss else
                  "approvals survive new pushes: turn on dismiss_stale_reviews_on_push"))
    checks = required_from_rules(rules)
    lines.append((bool(checks), f"required checks: {', '.join(checks)}" if checks else
                  "no required status checks: add required_status_checks (e.g. hangar / verify)"))
    lines.append(("non_fast_forward" in kinds, "force pushes blocked"
                  if "non_fast_forward" in kinds else "force pushes allowed: add non_fast_forward"))
    lines.append(("deletion" in kinds, "deletion blocked"
                  if "deletion" in kinds else "the branch can be deleted: add the deletion rule"))
    bypass = bypassing_rulesets(rulesets, app_id)
    lines.append((not bypass, "hangar is not a bypass actor" if not bypass else
                  f"hangar's App is a bypass actor of ruleset {bypass[0]!r}: remove it from "
                  "the bypass list, or the ruleset is no gate for hangar"))
    return lines


# -- intake (from handlers, via the engine): record and wake -----------------------------


def job_for_pr(engine: Engine, repo: str, pr_number: int) -> Job | None:
    from app.intents import job_for_pr as find

    return find(engine, repo, pr_number)


def ensure_request(engine: Engine, job: Job, pr_number: int) -> LandRequest:
    request_id = land_id(job.thread.repo, pr_number)
    existing = engine.store.get("land", request_id, LandRequest)
    if existing:
        return existing
    run = next(r for r in engine.runs_of(job.id) if r.pr_number == pr_number)
    request = LandRequest(
        id=request_id, job_id=job.id, repo=job.thread.repo,
        installation_id=job.thread.installation_id, pr_number=pr_number,
        base=run.base_branch, branch=run.branch, requested_by=job.requested_by,
    )
    save(engine, request)
    return request


class RowChanged(Exception):
    """The row changed under a step (a review, a push, `/hangar land cancel`): the step
    stops and the next one starts from the fresh row."""


def save(engine: Engine, request: LandRequest) -> LandRequest:
    """Write the row, unless someone else wrote it since this copy was read.

    Intake (events, commands) reads and writes without awaiting in between, so only a
    step that awaited GitHub can hold a stale copy; it must not undo what arrived."""
    stored = get(engine, request.id)
    if stored is not None and stored.version != request.version:
        raise RowChanged(request.id)
    request.version += 1
    request.updated_at = time.time()
    engine.store.put("land", request.id, request, active=request.active)
    return request


def get(engine: Engine, request_id: str) -> LandRequest | None:
    return engine.store.get("land", request_id, LandRequest)


def move(engine: Engine, request: LandRequest, state: LandState, reason: str | None) -> None:
    if request.state == state and request.reason == reason:
        return
    request.history.append({"at": time.time(), "state": state.value, "reason": reason})
    request.state, request.reason = state, reason
    save(engine, request)
    engine.note(request.job_id, f"land #{request.pr_number}: {state.value}"
                + (f" ({reason})" if reason else ""))


def record_review(engine: Engine, event: PullRequestReviewEvent) -> None:
    job = job_for_pr(engine, event.repository.full_name, event.pull_request.number)
    if job is None:
        return
    request = ensure_request(engine, job, event.pull_request.number)
    existing = next((r for r in request.reviews if r.id == event.review.id), None)
    # A dismissal names the review it dismisses: mark it; a redelivery changes nothing.
    if event.action == "dismissed" and existing is not None and not existing.dismissed:
        existing.dismissed = True
        request.due_at = 0
        save(engine, request)
        return
    if existing is not None:
        return
    state = event.review.state.lower()
    request.reviews.append(ReviewRecord(
        id=event.review.id, user=event.review.user.login, user_type=event.review.user.type,
        state=state, commit_id=event.review.commit_id, dismissed=event.action == "dismissed"))
    if state == "approved" and request.state in RESTARTABLE:
        move(engine, request, LandState.QUEUED, "a new approval arrived")
    request.due_at = 0
    save(engine, request)
    if state == "changes_requested":
        from app import autofix

        autofix.record_change_request(engine, job, event)


def record_pull_request(engine: Engine, event: PullRequestEvent) -> None:
    job = job_for_pr(engine, event.repository.full_name, event.number)
    if job is None:
        return
    request = get(engine, land_id(job.thread.repo, event.number))
    if request:  # a close or a merge is the step's to record: it reads the PR and shows it
        request.due_at = 0
        save(engine, request)
    if event.action == "synchronize":
        from app import autofix

        autofix.record_push(engine, job, event)
        if request and request.state in RESTARTABLE:
            move(engine, request, LandState.QUEUED, "the branch has a new head")


def record_ci(engine: Engine, repo: str, head_sha: str) -> None:
    from app import autofix

    for request in engine.store.all("land", LandRequest, active=True):
        if request.repo == repo and request.head_sha == head_sha:
            request.due_at = 0
            save(engine, request)
    autofix.record_ci(engine, repo, head_sha)


async def handle_command(engine: Engine, ops: RepoOps, intent: Intent) -> str:
    from app.intents import hangar_pr_job, reply

    job = await hangar_pr_job(engine, ops, intent)
    if job is None:
        return "not a hangar PR"
    request = ensure_request(engine, job, intent.thread.number)
    if intent.command == "land_cancel":
        return await cancel(engine, ops, intent, request)
    if intent.args.get("ack_sensitive"):
        config, _ = parse_repo_config(await ops.get_text(CONFIG_PATH, ref=request.base))
        if config.land.forbid_self_approval and intent.author == request.requested_by:
            await reply(ops, intent, (
                f"@{intent.author}, you asked for this work, so your acknowledgement of the "
                "sensitive files does not count (land.forbid_self_approval): another person "
                "with write access must comment `/hangar land --ack-sensitive`."),
                key=f"ack-refused-{intent.author}-{request.pr_number}")
            return "ack refused: the requester"
        pr = await ops.get_pr(intent.thread.number)
        request = get(engine, request.id) or request
        request.ack_sensitive_sha = pr["head"]["sha"]
    request.wished = True
    request.due_at = 0
    if request.state in (*RESTARTABLE, LandState.CANCELLED):
        move(engine, request, LandState.QUEUED, f"@{intent.author} asked to land")
    save(engine, request)
    engine.wake()
    return "land requested"


async def cancel(engine: Engine, ops: RepoOps, intent: Intent, request: LandRequest) -> str:
    from app.intents import reply

    if request.state in (LandState.LANDED, LandState.MERGING):
        await reply(ops, intent, f"#{request.pr_number} is already {request.state.value}; "
                                 "there is nothing to cancel.")
        return f"too late to cancel: {request.state.value}"
    request.wished = False
    move(engine, request, LandState.CANCELLED,
         f"@{intent.author} withdrew the request; approvals do not land it until someone "
         "comments `/hangar land`")
    save(engine, request)
    await show(engine, ops, request)
    return "land cancelled"


# -- the state machine -----------------------------------------------------------------


async def advance_land(engine: Engine, request_id: str) -> None:
    request = get(engine, request_id)
    if request is None or not request.active or request.due_at > time.time():
        return
    # Take the wake now: an event during the step sets due_at to 0 again and is not lost.
    request.due_at = time.time() + engine.settings.poll_interval_seconds
    save(engine, request)
    try:
        await land_step(engine, request)
    except RowChanged:
        pass
    finally:
        request = get(engine, request_id)
        if (request is not None and request.active
                and request.state in (LandState.UPDATING, LandState.MERGING)
                and request.due_at > time.time() + 2):
            request.due_at = time.time() + 2  # GitHub is mid-change: look again soon
            save(engine, request)


async def land_step(engine: Engine, request: LandRequest) -> None:
    job = engine.get_job(request.job_id)
    ops = await engine.repo_ops(job.thread)
    pr = await ops.get_pr(request.pr_number)
    if pr.get("merged"):
        return await landed(engine, ops, request, pr.get("merge_commit_sha"))
    if pr.get("state") == "closed":
        move(engine, request, LandState.CANCELLED, "the pull request was closed")
        return await show(engine, ops, request)
    head = pr["head"]["sha"]
    if head != request.head_sha:
        moved_from = request.head_sha
        request.head_sha = head
        request.ci_since = None
        save(engine, request)
        # A new head (a push; not hangar's own update) is checked again from the start.
        if moved_from and request.state in (LandState.WAITING_CI, LandState.AWAITING_APPROVAL,
                                            LandState.MERGING):
            move(engine, request, LandState.QUEUED, f"the head moved to `{head[:7]}`")
    config, problems = parse_repo_config(await ops.get_text(CONFIG_PATH, ref=request.base))
    if problems != request.problems:
        request.problems = problems
        save(engine, request)
    policy = config.land
    await sync_reviews(engine, ops, request)
    verdicts = await review_verdicts(engine, ops, request, policy)
    approved = [r for r, why in verdicts if why is None]
    await explain_reviews(engine, ops, request, verdicts)
    if request.state in RESTARTABLE:
        return await show(engine, ops, request)
    if request.state == LandState.QUEUED:
        if not (request.wished or approved):
            request.reason = approvals_wanted(request, policy, 0)
            save(engine, request)
            return await show(engine, ops, request)
        if lane_taken(engine, request):
            return await show(engine, ops, request)
        move(engine, request, LandState.UPDATING, None)
    if request.state == LandState.UPDATING:
        await update(engine, ops, request, pr)
    if request.state == LandState.WAITING_CI:
        await wait_for_ci(engine, ops, request, policy)
    if request.state == LandState.AWAITING_APPROVAL:
        await await_approval(engine, ops, request, policy, approved)
    if request.state == LandState.MERGING:
        await show(engine, ops, request)  # people see "merging" while GitHub works
        await merge(engine, ops, request, policy)
    await show(engine, ops, request)


async def sync_reviews(engine: Engine, ops: RepoOps, request: LandRequest) -> None:
    """Read the PR's reviews from GitHub: a review whose webhook was missed (hangar was
    down, a delivery failed) still counts, and a dismissal is seen."""
    changed = False
    known = {r.id: r for r in request.reviews}
    async for review in ops.gh.getiter(f"{ops.base}/pulls/{request.pr_number}/reviews"):
        state = (review.get("state") or "").lower()
        existing = known.get(review["id"])
        if existing is not None:
            if state == "dismissed" and not existing.dismissed:
                existing.dismissed = changed = True
            continue
        user = review.get("user") or {}
        request.reviews.append(ReviewRecord(
            id=review["id"], user=user.get("login", ""), user_type=user.get("type", "User"),
            state=state, commit_id=review.get("commit_id"), dismissed=state == "dismissed"))
        changed = True
    if changed:
        save(engine, request)


def lane_taken(engine: Engine, request: LandRequest) -> bool:
    """Whether another request on this repo and base is updating, waiting for CI or
    merging; if so, say so on this one. (No await: the check and the move are one.)"""
    busy = [r for r in engine.store.all("land", LandRequest, active=True)
            if r.id != request.id and r.repo == request.repo and r.base == request.base
            and r.state in IN_FLIGHT]
    if busy:
        request.reason = f"waiting for #{busy[0].pr_number} to finish landing"
        save(engine, request)
    return bool(busy)


async def review_verdicts(
    engine: Engine, ops: RepoOps, request: LandRequest, policy: LandPolicy
) -> list[tuple[ReviewRecord, str | None]]:
    latest: dict[str, ReviewRecord] = {}
    # A person's latest review is their word (GitHub's review ids grow with time).
    for review in sorted(request.reviews, key=lambda r: r.id):
        if review.state in ("approved", "changes_requested", "dismissed"):
            latest[review.user] = review
    verdicts = []
    for review in latest.values():
        if review.state != "approved":
            continue
        is_bot = review.user_type == "Bot" or review.user.endswith("[bot]")
        permission = "none" if is_bot else await engine.permission(ops, review.user)
        verdicts.append((review, approval_verdict(
            review, head_sha=request.head_sha, requester=request.requested_by,
            permission=permission, policy=policy)))
    return verdicts


async def explain_reviews(
    engine: Engine, ops: RepoOps, request: LandRequest,
    verdicts: list[tuple[ReviewRecord, str | None]],
) -> None:
    """Say once, per review, why an approval does not count."""
    from app.render import reply_marker

    for review, why in verdicts:
        if why is None or review.id in request.explained:
            continue
        marker = reply_marker(f"review-{review.id}")
        await ops.upsert_comment(request.pr_number, marker,
                                 f"{marker}\nThis approval does not count for landing: {why}.")
        request.explained.append(review.id)
        save(engine, request)


UPDATE_PATIENCE_S = 120  # GitHub answers update-branch 202 and moves the head a bit later


async def update(engine: Engine, ops: RepoOps, request: LandRequest, pr: dict) -> None:
    compare = await ops.compare(request.base, request.head_sha)
    if compare["behind_by"] == 0:
        request.updated_from = None
        return move(engine, request, LandState.WAITING_CI, None)
    if (request.updated_from == request.head_sha
            and time.time() - request.updated_at_ask < UPDATE_PATIENCE_S):
        request.reason = "waiting for GitHub to update the branch"
        save(engine, request)
        return None
    try:
        await ops.gh.put(f"{ops.base}/pulls/{request.pr_number}/update-branch",
                         data={"expected_head_sha": request.head_sha})
    except BadRequest as exc:
        if int(exc.status_code) != 422:
            raise  # not GitHub's word on the branch: the step is tried again
        if await head_moved(ops, request):
            return None  # the next pass sees the new head
        files = await conflicting_files(ops, request)
        named = ", ".join(f"`{f}`" for f in files[:20]) or "files GitHub did not name"
        return move(engine, request, LandState.CONFLICT,
                    f"the branch conflicts with {request.base} in {named}; hangar does not "
                    "resolve conflicts silently — ask for a turn (`/hangar resolve the "
                    "conflicts`) or resolve them by hand")
    # The update makes a new head: earlier approvals lapse, verification runs again on it.
    request.updated_from, request.updated_at_ask = request.head_sha, time.time()
    save(engine, request)
    engine.note(request.job_id, f"land #{request.pr_number}: updating the branch from "
                                f"{request.base}")


async def head_moved(ops: RepoOps, request: LandRequest) -> bool:
    pr = await ops.get_pr(request.pr_number)
    return pr["head"]["sha"] != request.head_sha


async def conflicting_files(ops: RepoOps, request: LandRequest) -> list[str]:
    ours = await ops.compare(request.base, request.head_sha)
    theirs = await ops.compare(request.head_sha, request.base)
    changed_here = {f["filename"] for f in ours["files"]}
    return sorted(changed_here & {f["filename"] for f in theirs["files"]})


async def wait_for_ci(
    engine: Engine, ops: RepoOps, request: LandRequest, policy: LandPolicy
) -> None:
    rules = await ops.gh.getitem(f"{ops.base}/rules/branches/{request.base}")
    required = list(dict.fromkeys([*required_from_rules(rules), *policy.required_checks]))
    if policy.require_verification and "hangar / verify" not in required:
        required.append("hangar / verify")
    await ensure_verified(engine, request)
    data = await ops.gh.getitem(f"{ops.base}/commits/{request.head_sha}/check-runs?filter=latest")
    combined = await ops.gh.getitem(f"{ops.base}/commits/{request.head_sha}/status")
    verdict, names = checks_verdict(required, data.get("check_runs", []),
                                    combined.get("statuses", []))
    if verdict == "failed":
        return move(engine, request, LandState.CI_FAILED,
                    f"required check(s) failed on `{request.head_sha[:7]}`: {', '.join(names)}")
    if verdict == "pending":
        if request.ci_since is None:
            request.ci_since = time.time()
            save(engine, request)
        waited = time.time() - request.ci_since
        if waited > policy.ci_timeout_minutes * 60:
            reported = check_results(data.get("check_runs", []), combined.get("statuses", []))
            late = names[0]
            what = "is still running" if late in reported else "never reported"
            return move(engine, request, LandState.CI_FAILED,
                        f"check {late} {what} on `{request.head_sha[:7]}` within "
                        f"{policy.ci_timeout_minutes:g} minutes (land.ci_timeout_minutes); "
                        "check that it still runs under this name, then `/hangar land`")
        request.reason = f"waiting for {', '.join(names)}"
        save(engine, request)
        return None
    move(engine, request, LandState.AWAITING_APPROVAL, None)


async def ensure_verified(engine: Engine, request: LandRequest) -> None:
    """hangar's own verification must have run on exactly this head."""
    from app.intents import request_verification

    runs = [r for r in engine.runs_of(request.job_id) if r.pr_number == request.pr_number]
    # Every turn (auto-fix ones too) verifies its own head on its way to done.
    if any(r.head_sha == request.head_sha for r in runs):
        return
    if any(not r.finished for r in runs):
        return
    job = engine.get_job(request.job_id)
    request_verification(engine, job, request.pr_number)


async def await_approval(
    engine: Engine, ops: RepoOps, request: LandRequest, policy: LandPolicy,
    approved: list[ReviewRecord],
) -> None:
    if len(approved) < policy.required_approvals:
        request.reason = approvals_wanted(request, policy, len(approved))
        save(engine, request)
        return
    runs = [r for r in engine.runs_of(request.job_id) if r.pr_number == request.pr_number]
    touched = sorted({p for r in runs for p in r.sensitive})
    if touched and request.ack_sensitive_sha != request.head_sha:
        request.reason = ("sensitive files changed (" + ", ".join(f"`{p}`" for p in touched[:5])
                          + "): an approver must comment `/hangar land --ack-sensitive`")
        save(engine, request)
        return
    if lane_taken(engine, request):
        return
    move(engine, request, LandState.MERGING, None)


def approvals_wanted(request: LandRequest, policy: LandPolicy, have: int) -> str:
    return (f"waiting for {policy.required_approvals - have} approval(s) of "
            f"`{(request.head_sha or '')[:7]}` from someone with write access"
            + (f" other than @{request.requested_by}" if policy.forbid_self_approval else ""))


async def merge(engine: Engine, ops: RepoOps, request: LandRequest, policy: LandPolicy) -> None:
    job = engine.get_job(request.job_id)
    pr = await ops.get_pr(request.pr_number)
    if pr.get("merged"):  # a crash after GitHub merged: record it once
        return await landed(engine, ops, request, pr.get("merge_commit_sha"))
    _, rulesets = await read_rules(ops, request.base)
    bypass = bypassing_rulesets(rulesets, engine.settings.app_id)
    if bypass:  # GitHub would not hold hangar to the ruleset: it is no gate
        return move(engine, request, LandState.REJECTED,
                    f"hangar's App is a bypass actor of ruleset {bypass[0]!r}, so GitHub would "
                    "not hold this merge to the ruleset; hangar does not merge around it. "
                    "Remove the App from the bypass list, then `/hangar land`")
    # GitHub merges onto whatever the base is now; what was checked is head on the old base.
    if (await ops.compare(request.base, request.head_sha))["behind_by"] > 0:
        return move(engine, request, LandState.UPDATING,
                    f"{request.base} moved since the checks ran; updating again")
    try:
        result = await ops.gh.put(
            f"{ops.base}/pulls/{request.pr_number}/merge",
            data={"sha": request.head_sha, "merge_method": policy.method,
                  "commit_title": f"{pr['title']} (#{request.pr_number})",
                  "commit_message": f"Landed by hangar for @{job.requested_by}."},
        )
    except BadRequest as exc:
        status = int(exc.status_code)
        message = one_line(str(exc))
        if status == 409:
            return move(engine, request, LandState.UPDATING, "the head moved; updating again")
        if status == 405:
            return move(engine, request, LandState.REJECTED,
                        f"GitHub refused the merge: {message}. hangar does not get around "
                        "the ruleset; fix what it names and approve again")
        raise
    await landed(engine, ops, request, result.get("sha"))


def one_line(message: str) -> str:
    """GitHub's multi-line message (a header, then one line per rule) as one sentence."""
    lines = [line.strip().rstrip(".") for line in message.splitlines() if line.strip()]
    if not lines:
        return "no reason given"
    return lines[0] + (": " + "; ".join(lines[1:]) if len(lines) > 1 else "")


async def landed(engine: Engine, ops: RepoOps, request: LandRequest, merge_sha: str | None) -> None:
    if request.state == LandState.LANDED:
        return
    request.merge_sha = merge_sha
    move(engine, request, LandState.LANDED, f"merged as `{(merge_sha or '')[:7]}`")
    engine.tokens.revoke_branch(request.repo, request.branch)
    job = engine.get_job(request.job_id)
    if all(r.finished for r in engine.runs_of(job.id)):
        engine.patch_job(job.id, state=JobState.DONE)
    await show(engine, ops, request)


async def show(engine: Engine, ops: RepoOps, request: LandRequest) -> None:
    """The land state in check run `hangar / land` on the head, and in the status comment."""
    from app import render, runs

    if request.head_sha:
        status, conclusion = land_check_status(request.state)
        gate = await read_gate(ops, request.base, engine.settings.app_id)
        summary = "\n".join([
            f"**{request.state.value}**" + (f": {request.reason}" if request.reason else ""),
            *([f"Merged as `{request.merge_sha}`."] if request.merge_sha else []),
            "", "What protects the base branch:",
            *[f"- {'✅' if ok else '⚠️'} {line}" for ok, line in gate],
            *([""] + [f"- ⚠️ {p}" for p in request.problems] if request.problems else []),
        ])[:65000]
        title = render.land_title(request)
        shown = f"{request.head_sha} {status} {conclusion} {title}\n{summary}"
        if shown != request.shown:
            await ops.upsert_check_run(
                LAND_CHECK, request.head_sha, request.id, status=status, conclusion=conclusion,
                output={"title": title, "summary": summary},
            )
            request.shown = shown
            try:
                save(engine, request)
            except RowChanged:
                pass  # the next step shows it again from the fresh row
    await runs.refresh_status(engine, request.job_id)


async def read_gate(ops: RepoOps, branch: str, app_id: int | None) -> list[tuple[bool, str]]:
    """gate_report for a branch, read from GitHub: its rules and their rulesets."""
    rules, rulesets = await read_rules(ops, branch)
    return gate_report(rules, rulesets, app_id)


async def read_rules(ops: RepoOps, branch: str) -> tuple[list[dict], list[dict]]:
    """The active rules for a branch, and the rulesets they come from."""
    from app.github import get_or_none

    rules = await ops.gh.getitem(f"{ops.base}/rules/branches/{branch}")
    rulesets = []
    for ruleset_id in sorted({r["ruleset_id"] for r in rules if r.get("ruleset_id")}):
        found = await get_or_none(ops.gh, f"{ops.base}/rulesets/{ruleset_id}")
        if found:
            rulesets.append(found)
    return rules, rulesets


def land_check_status(state: LandState) -> tuple[str, str | None]:
    if state == LandState.LANDED:
        return "completed", "success"
    if state in (LandState.CONFLICT, LandState.CI_FAILED, LandState.REJECTED, LandState.FAILED):
        return "completed", "failure"
    if state == LandState.CANCELLED:
        return "completed", "cancelled"
    return "in_progress", None
