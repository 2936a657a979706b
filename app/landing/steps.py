"""Landing hangar's pull requests: a human approves the exact head, hangar merges as the
App, and the branch ruleset is the gate.

A land request is a durable row per PR:
queued → updating → waiting_ci → awaiting_approval → merging → landed, or conflict,
ci_failed, rejected, cancelled, failed — each with a reason and an append-only history.
GitHub decides what may merge; hangar only ever asks it, with the approved head pinned.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Collection
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from gidgethub import BadRequest, HTTPException
from pydantic import BaseModel, Field

from app import ci, render
from app.engine import PrNotes
from app.ghops import read_ci
from app.models import (
    AutofixRow,
    Intent,
    Job,
    JobState,
    Verification,
    autofix_row_id,
    now,
)
from app.render import landing as words
from app.render.reasons import Why
from app.repoconfig import CONFIG_PATH, LandPolicy, parse_repo_config
from app.sensitive import COMPARE_FILES, sensitive_names

if TYPE_CHECKING:
    from app.engine import StepContext
    from app.ghops import RepoOps
    from app.payloads import PullRequestEvent, PullRequestReviewEvent

log = logging.getLogger(__name__)

LAND_CHECK = "hangar / land"
VERIFY_CHECK = "hangar / verify"


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


class LandReason(StrEnum):
    """Why a land request stands where it stands (worded by render.landing)."""

    APPROVALS_WANTED = "approvals_wanted"
    SENSITIVE = "sensitive"
    LANE_TAKEN = "lane_taken"
    WAITING_FOR_CHECKS = "waiting_for_checks"
    CHECKS_FAILED = "checks_failed"
    CHECK_LATE = "check_late"
    UPDATE_PENDING = "update_pending"
    UPDATE_REFUSED_WORKFLOWS = "update_refused_workflows"
    UPDATE_REFUSED = "update_refused"
    CONFLICT = "conflict"
    BYPASS_ACTOR = "bypass_actor"
    CLOSING_COMMIT = "closing_commit"
    BASE_MOVED = "base_moved"
    HEAD_MOVED = "head_moved"
    METHOD_REFUSED = "method_refused"
    MERGE_QUEUE = "merge_queue"
    MERGE_WORKFLOWS = "merge_workflows"
    MERGE_REFUSED = "merge_refused"
    LANDED = "landed"
    NEW_APPROVAL = "new_approval"
    NEW_HEAD = "new_head"
    HEAD_MOVED_TO = "head_moved_to"
    CHECKS_AGAIN = "checks_again"
    PR_CLOSED = "pr_closed"
    ASKED_TO_LAND = "asked_to_land"
    WITHDRAWN = "withdrawn"
    GAVE_UP = "gave_up"
    BASE_CHANGED = "base_changed"
    # why a PR's file list is incomplete
    FILES_NOT_ALL_LISTED = "files_not_all_listed"
    TOO_MANY_FILES = "too_many_files"


class NotCounted(StrEnum):
    """Why an approval does not count (worded by render.landing)."""

    NOT_AN_APPROVAL = "not_an_approval"
    BOT = "bot"
    REQUESTER = "requester"
    ASKER = "asker"
    MAKER = "maker"
    MAKERS_UNKNOWN = "makers_unknown"
    NO_WRITE_ACCESS = "no_write_access"
    OTHER_COMMIT = "other_commit"
    DISMISSED = "dismissed"
    PUSHER_UNKNOWN = "pusher_unknown"
    BASE_CHANGED = "base_changed"


class GateFact(StrEnum):
    """One thing that protects a branch, or is missing (worded by render.landing)."""

    PULL_REQUEST_REQUIRED = "pull_request_required"
    NO_PULL_REQUEST_RULE = "no_pull_request_rule"
    APPROVALS_REQUIRED = "approvals_required"
    NO_APPROVALS_REQUIRED = "no_approvals_required"
    STALE_DISMISSED = "stale_dismissed"
    STALE_SURVIVE = "stale_survive"
    LAST_PUSH_APPROVED = "last_push_approved"
    LAST_PUSH_SELF = "last_push_self"
    REQUIRED_CHECKS = "required_checks"
    NO_REQUIRED_CHECKS = "no_required_checks"
    FORCE_PUSH_BLOCKED = "force_push_blocked"
    FORCE_PUSH_ALLOWED = "force_push_allowed"
    DELETION_BLOCKED = "deletion_blocked"
    DELETION_ALLOWED = "deletion_allowed"
    NOT_BYPASS = "not_bypass"
    BYPASS = "bypass"


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
    before_base: str | None = None  # given while the PR went into this base, since changed
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
    reason: str | None = None  # worded by render from reason_code and its facts
    reason_code: str | None = None  # a LandReason (None on rows older than the codes)
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
    impostors: list[str] = []  # others' checks under hangar's names, set aside (said once)
    shown: str | None = None  # what check run `hangar / land` last said, to skip no-op edits
    check_ids: dict[str, int] = {}  # head sha → id of check run `hangar / land` on it
    # Heads whose land check run is being created: after a crash it may exist already.
    check_posting: list[str] = []
    version: int = 0  # bumped by every save; a step holding an older copy stops
    updated_at: float = Field(default_factory=now)

    @property
    def active(self) -> bool:
        return self.state not in FINAL


def land_id(repo: str, pr_number: int) -> str:
    return f"land-{repo.replace('/', '-')}-{pr_number}"


# -- pure rules ------------------------------------------------------------------------


MAX_PR_COMMITS = 250  # GitHub lists at most this many commits of a pull request


def approval_verdict(
    review: ReviewRecord, *, head_sha: str | None, requester: str, permission: str,
    policy: LandPolicy, askers: Collection[str] = (), makers: Collection[str] = (),
    makers_unknown: Why | str | None = None,
) -> str | None:
    """None when this review counts as an approval of head_sha; else why not, worded
    (`makers_unknown` may come worded already)."""
    why = approval_refusal(
        review, head_sha=head_sha, requester=requester, permission=permission, policy=policy,
        askers=askers, makers=makers, makers_unknown=makers_unknown)
    return why if isinstance(why, str) else words.not_counted(why)


def approval_refusal(
    review: ReviewRecord, *, head_sha: str | None, requester: str, permission: str,
    policy: LandPolicy, askers: Collection[str] = (), makers: Collection[str] = (),
    makers_unknown: Why | str | None = None,
) -> Why | str | None:
    """None when this review counts as an approval of head_sha; else why it does not (a
    `NotCounted` code).

    `askers`: who asked for a later turn on the PR (a follow-up, a review turn, the "Fix
    with hangar" button). `makers`: who pushed to the branch, or authored or committed a
    commit on it, other than hangar's agent (GitHub's "approval of the most recent
    reviewable push" asks the same). `makers_unknown`: why hangar cannot tell them all."""
    user = review.user
    if review.state.lower() != "approved":
        return Why(NotCounted.NOT_AN_APPROVAL, user=user)
    if review.user_type == "Bot" or review.user.endswith("[bot]"):
        return Why(NotCounted.BOT, user=user)
    # GitHub logins ignore case: so does every comparison of people here.
    who = review.user.lower()
    askers, makers = {a.lower() for a in askers}, {m.lower() for m in makers}
    if policy.forbid_self_approval and who == requester.lower():
        return Why(NotCounted.REQUESTER, user=user)
    if policy.forbid_self_approval and who in askers:
        return Why(NotCounted.ASKER, user=user)
    if who in makers:
        return Why(NotCounted.MAKER, user=user)
    if makers_unknown:
        return makers_unknown
    if permission not in ("admin", "maintain", "write"):
        return Why(NotCounted.NO_WRITE_ACCESS, user=user)
    if review.commit_id != head_sha:
        return Why(NotCounted.OTHER_COMMIT, user=user, approved=review.commit_id, head=head_sha)
    if review.dismissed:
        return Why(NotCounted.DISMISSED, user=user)
    if review.before_base is not None:
        return Why(NotCounted.BASE_CHANGED, user=user, base=review.before_base)
    return None


def checks_verdict(
    required: list[str], check_runs: list[dict], statuses: list[dict], *,
    own_app_id: int | None = None,
) -> tuple[str, list[str]]:
    """("passed" | "failed" | "pending", names) for the required checks on one commit.

    Pending names list the checks nobody has reported first, then those still running.
    Under hangar's names only hangar's own App counts, and only its `success` passes.
    """
    return ci.verdict(required, ci.read(check_runs, statuses, own_app_id=own_app_id))


def required_from_rules(rules: list[dict]) -> list[str]:
    names = []
    for rule in rules:
        if rule.get("type") == "required_status_checks":
            for check in (rule.get("parameters") or {}).get("required_status_checks", []):
                names.append(check["context"])
    return list(dict.fromkeys(names))


def required_from_protection(classic: dict | None) -> list[str]:
    """The required checks of a branch's classic protection (`contexts` and `checks`)."""
    checks = (classic or {}).get("required_status_checks") or {}
    names = [*(checks.get("contexts") or []),
             *(c["context"] for c in checks.get("checks") or [] if c.get("context"))]
    return list(dict.fromkeys(names))


def with_protection(policy: LandPolicy, classic: dict | None) -> LandPolicy:
    """The land policy held at least to the branch's classic protection: GitHub applies
    it besides the rulesets, so hangar waits for what it requires before merging."""
    if not classic:
        return policy
    reviews = classic.get("required_pull_request_reviews") or {}
    return policy.model_copy(update={
        "required_approvals": max(policy.required_approvals,
                                  int(reviews.get("required_approving_review_count") or 0)),
        "required_checks": list(dict.fromkeys(
            [*policy.required_checks, *required_from_protection(classic)])),
    })


PR_FILES = 3000  # GitHub lists at most this many files of a pull request


# GitHub's closing keywords: one in a commit message that lands on the default branch
# closes the issue it names.
_CLOSING = re.compile(
    r"(?i)\b(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?)\b:?\s+"
    r"(#\d+|[\w.-]+/[\w.-]+#\d+|gh-\d+|https?://\S+/issues/\d+)")


def closing_references(message: str) -> list[str]:
    """The issues a commit message would close on merge, as written."""
    return [m.group(0) for m in _CLOSING.finditer(message)]


def file_list_gap(listed: int, changed: int | None) -> str | None:
    """Why a PR's file list is incomplete, worded, or None when it is whole."""
    return words.reason(file_list_shortfall(listed, changed))


def file_list_shortfall(listed: int, changed: int | None) -> Why | None:
    """Why a PR's file list is incomplete, or None when it is whole."""
    if changed is not None and listed < changed:
        return Why(LandReason.FILES_NOT_ALL_LISTED, listed=listed, changed=changed)
    if listed >= PR_FILES:
        return Why(LandReason.TOO_MANY_FILES, limit=PR_FILES)
    return None


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
    rules: list[dict], rulesets: list[dict], app_id: int | None, classic: dict | None = None,
) -> list[tuple[bool, str]]:
    """What protects a branch, line by line, with the fix for what is missing (worded)."""
    return words.gate_lines(gate_facts(rules, rulesets, app_id, classic))


def gate_facts(
    rules: list[dict], rulesets: list[dict], app_id: int | None, classic: dict | None = None,
) -> list[tuple[bool, Why]]:
    """What protects a branch, fact by fact (a `GateFact` each): ok, or missing.

    `classic`: the branch's classic protection, when read (GitHub applies both)."""
    kinds = {r.get("type") for r in rules}
    facts: list[tuple[bool, Why]] = []

    def fact(ok: bool, good: GateFact, bad: GateFact, **named: Any) -> None:
        facts.append((ok, Why(good if ok else bad, **named)))

    # Several rulesets may each hold a pull_request rule: the strictest of each wins.
    pr_params = [r.get("parameters") or {} for r in rules if r.get("type") == "pull_request"]
    reviews = (classic or {}).get("required_pull_request_reviews") or {}
    if reviews:  # classic required reviews, read as the ruleset rule that says the same
        pr_params.append({
            "required_approving_review_count": reviews.get("required_approving_review_count", 0),
            "dismiss_stale_reviews_on_push": reviews.get("dismiss_stale_reviews"),
            "require_last_push_approval": reviews.get("require_last_push_approval")})
    if classic:
        if not (classic.get("allow_force_pushes") or {}).get("enabled"):
            kinds.add("non_fast_forward")
        if not (classic.get("allow_deletions") or {}).get("enabled"):
            kinds.add("deletion")
    fact(bool(pr_params), GateFact.PULL_REQUEST_REQUIRED, GateFact.NO_PULL_REQUEST_RULE)
    count = max((p.get("required_approving_review_count", 0) for p in pr_params), default=0)
    facts.append((count >= 1, Why(GateFact.APPROVALS_REQUIRED, count=count) if count
                  else Why(GateFact.NO_APPROVALS_REQUIRED)))
    fact(any(p.get("dismiss_stale_reviews_on_push") for p in pr_params),
         GateFact.STALE_DISMISSED, GateFact.STALE_SURVIVE)
    fact(any(p.get("require_last_push_approval") for p in pr_params),
         GateFact.LAST_PUSH_APPROVED, GateFact.LAST_PUSH_SELF)
    checks = list(dict.fromkeys([*required_from_rules(rules),
                                 *required_from_protection(classic)]))
    facts.append((bool(checks), Why(GateFact.REQUIRED_CHECKS, checks=checks) if checks
                  else Why(GateFact.NO_REQUIRED_CHECKS)))
    fact("non_fast_forward" in kinds, GateFact.FORCE_PUSH_BLOCKED, GateFact.FORCE_PUSH_ALLOWED)
    fact("deletion" in kinds, GateFact.DELETION_BLOCKED, GateFact.DELETION_ALLOWED)
    bypass = bypassing_rulesets(rulesets, app_id)
    facts.append((not bypass, Why(GateFact.BYPASS, ruleset=bypass[0]) if bypass
                  else Why(GateFact.NOT_BYPASS)))
    return facts


# -- intake (from handlers, via the engine): record and wake -----------------------------


def job_for_pr(engine: StepContext, repo: str, pr_number: int) -> Job | None:
    from app.intents import job_for_pr as find

    return find(engine, repo, pr_number)


def ensure_request(engine: StepContext, job: Job, pr_number: int) -> LandRequest:
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


def save(engine: StepContext, request: LandRequest) -> LandRequest:
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


def get(engine: StepContext, request_id: str) -> LandRequest | None:
    return engine.store.get("land", request_id, LandRequest)


def move(engine: StepContext, request: LandRequest, state: LandState, why: Why | None) -> None:
    reason = words.reason(why)
    if request.state == state and request.reason == reason:
        return
    request.history.append({"at": time.time(), "state": state.value, "reason": reason})
    request.state = state
    set_reason(request, why)
    save(engine, request)
    engine.note(request.job_id, f"land #{request.pr_number}: {state.value}"
                + (f" ({reason})" if reason else ""))


def set_reason(request: LandRequest, why: Why | None) -> None:
    """Why the request stands where it stands: its code, and render's words for it."""
    request.reason_code = None if why is None else str(why.code)
    request.reason = words.reason(why)


def record_review(engine: StepContext, event: PullRequestReviewEvent) -> None:
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
        move(engine, request, LandState.QUEUED, Why(LandReason.NEW_APPROVAL))
    request.due_at = 0
    save(engine, request)


def record_pull_request(engine: StepContext, event: PullRequestEvent) -> None:
    job = job_for_pr(engine, event.repository.full_name, event.number)
    if job is None:
        return
    request = get(engine, land_id(job.thread.repo, event.number))
    if request:  # a close or a merge is the step's to record: it reads the PR and shows it
        request.due_at = 0
        save(engine, request)
    if event.action == "synchronize":
        if request and request.state in RESTARTABLE:
            move(engine, request, LandState.QUEUED, Why(LandReason.NEW_HEAD))


def record_ci(
    engine: StepContext, repo: str, head_sha: str, *, check: str | None = None, ours: bool = False
) -> None:
    """A check or status completed on head_sha: wake the landings of that head, and look
    again at one that checks stopped (a re-run may have passed). hangar's own land check
    and check suite say nothing new about CI: looking again on them would loop."""
    says_ci = not (ours and check in (None, LAND_CHECK))
    for request in engine.store.all("land", LandRequest, active=True):
        if request.repo == repo and request.head_sha == head_sha:
            request.due_at = 0
            if says_ci and stopped_by_checks(request):
                move(engine, request, LandState.QUEUED, Why(LandReason.CHECKS_AGAIN))
            save(engine, request)


def stopped_by_checks(request: LandRequest) -> bool:
    if request.state == LandState.CI_FAILED:
        return True
    if request.state != LandState.REJECTED:
        return False
    if request.reason_code is None:  # a row from before the codes: its words tell
        return "check" in (request.reason or "").lower()
    # GitHub's refusal of the merge may name a check its ruleset requires
    return (request.reason_code in (LandReason.MERGE_REFUSED, LandReason.METHOD_REFUSED)
            and "check" in (request.reason or "").lower())


def give_up(engine: StepContext, request_id: str, reason: str) -> None:
    """The step failed again and again: stop, and say so (a person can start it again)."""
    request = get(engine, request_id)
    if request is None or not request.active or request.state == LandState.FAILED:
        return
    move(engine, request, LandState.FAILED, Why(LandReason.GAVE_UP, error=reason))


async def handle_command(engine: StepContext, ops: RepoOps, intent: Intent) -> str:
    from app.intents import hangar_pr_job, reply

    job = await hangar_pr_job(engine, ops, intent)
    if job is None:
        return "not a hangar PR"
    request = ensure_request(engine, job, intent.thread.number)
    if intent.command == "land_cancel":
        return await cancel(engine, ops, intent, request)
    if intent.args.get("ack_sensitive"):
        config, _ = parse_repo_config(await ops.get_text(CONFIG_PATH, ref=request.base))
        pr = await ops.get_pr(intent.thread.number)
        # The acknowledgement is an approver's: the same people may not give it.
        as_review = ReviewRecord(id=0, user=intent.author, user_type=intent.author_type,
                                 state="approved", commit_id=pr["head"]["sha"])
        why = approval_refusal(as_review, head_sha=pr["head"]["sha"],
                               requester=request.requested_by, permission="write",
                               policy=config.land, **await who_made(engine, ops, request))
        if why:
            await reply(ops, intent, words.ack_refused(why),
                        key=f"ack-refused-{intent.author}-{request.pr_number}")
            return "ack refused"
        request = get(engine, request.id) or request
        request.ack_sensitive_sha = pr["head"]["sha"]
    request.wished = True
    request.due_at = 0
    if request.state in (*RESTARTABLE, LandState.CANCELLED):
        move(engine, request, LandState.QUEUED, Why(LandReason.ASKED_TO_LAND, login=intent.author))
    save(engine, request)
    engine.wake()
    return "land requested"


async def cancel(engine: StepContext, ops: RepoOps, intent: Intent, request: LandRequest) -> str:
    from app.intents import reply

    if request.state in (LandState.LANDED, LandState.MERGING):
        await reply(ops, intent, words.nothing_to_cancel(request.pr_number, request.state.value))
        return f"too late to cancel: {request.state.value}"
    request.wished = False
    move(engine, request, LandState.CANCELLED, Why(LandReason.WITHDRAWN, login=intent.author))
    save(engine, request)
    await show(engine, ops, request)
    return "land cancelled"


# -- the state machine -----------------------------------------------------------------


async def advance_land(engine: StepContext, request_id: str) -> None:
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
                and request.state in (LandState.UPDATING, LandState.MERGING)):
            # GitHub is mid-change: look again when it has moved the head (its push wakes
            # the row) or patience runs out; else at once (after a failure, its backoff).
            due = request.updated_at_ask + UPDATE_PATIENCE_S if asked_update(request) else 0
            if request.due_at > due:
                request.due_at = due
                save(engine, request)


async def land_step(engine: StepContext, request: LandRequest) -> None:
    job = engine.get_job(request.job_id)
    ops = await engine.repo_ops(job.thread)
    pr = await ops.get_pr(request.pr_number)
    if pr.get("merged"):
        return await landed(engine, ops, request, pr.get("merge_commit_sha"))
    if pr.get("state") == "closed":
        move(engine, request, LandState.CANCELLED, Why(LandReason.PR_CLOSED))
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
            move(engine, request, LandState.QUEUED, Why(LandReason.HEAD_MOVED_TO, head=head))
    if pr["base"]["ref"] != request.base:
        await base_changed(engine, ops, request, pr["base"]["ref"])
    # Head against the base as it is now (its ETag makes it free while neither moves): what
    # the base holds, the PR's commits and files, read once for the whole step.
    compare = await ops.compare(request.base, head)
    config, problems = parse_repo_config(
        await engine.config_text(ops, request.base, compare.get("base_sha")))
    if problems != request.problems:
        request.problems = problems
        save(engine, request)
    policy = config.land
    await sync_reviews(engine, ops, request)
    verdicts = await review_verdicts(engine, ops, request, policy, compare)
    approved = [r for r, why in verdicts if why is None]
    await explain_reviews(engine, ops, request, verdicts)
    if request.state in RESTARTABLE:
        return await show(engine, ops, request)
    if request.state == LandState.QUEUED:
        if not (request.wished or approved):
            set_reason(request, approvals_wanted(request, policy, 0))
            save(engine, request)
            return await show(engine, ops, request)
        if lane_taken(engine, request):
            return await show(engine, ops, request)
        move(engine, request, LandState.UPDATING, None)
    if request.state == LandState.UPDATING:
        await update(engine, ops, request, compare)
    if request.state in (LandState.WAITING_CI, LandState.AWAITING_APPROVAL):
        policy = with_protection(policy, await read_protection(ops, request.base))
    if request.state == LandState.WAITING_CI or (
            request.state == LandState.AWAITING_APPROVAL
            and len(approved) >= policy.required_approvals):
        # What passed while it waited for a person may have failed since (a re-run, a
        # "Verify again"): read once more in the step that would merge.
        await wait_for_ci(engine, ops, request, policy)
    if request.state == LandState.AWAITING_APPROVAL:
        await await_approval(engine, ops, request, policy, approved, compare)
    if request.state == LandState.MERGING:
        await merge_shown_if_slow(engine, ops, request, policy)
    await show(engine, ops, request)


async def base_changed(
    engine: StepContext, ops: RepoOps, request: LandRequest, base: str
) -> None:
    """The PR was retargeted: it lands into the base GitHub has now, checked against it,
    and an approval (or acknowledgement) given for the old base says nothing about the new
    one. Every review GitHub lists now is older than this look, so it lapses."""
    await sync_reviews(engine, ops, request)
    old = request.base
    for review in request.reviews:
        if review.before_base is None:
            review.before_base = old
    request.base, request.ack_sensitive_sha, request.ci_since = base, None, None
    save(engine, request)
    if request.state not in RESTARTABLE:
        move(engine, request, LandState.QUEUED, Why(LandReason.BASE_CHANGED, old=old, new=base))


async def sync_reviews(engine: StepContext, ops: RepoOps, request: LandRequest) -> None:
    """Read the PR's reviews from GitHub: a review whose webhook was missed (hangar was
    down, a delivery failed) still counts, and a dismissal is seen."""
    changed = False
    known = {r.id: r for r in request.reviews}
    url = f"{ops.base}/pulls/{request.pr_number}/reviews?per_page=100"
    async for review in ops.gh.getiter(url):
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


def lane_taken(engine: StepContext, request: LandRequest) -> bool:
    """Whether another request on this repo and base is updating, waiting for CI or
    merging; if so, say so on this one. (No await: the check and the move are one.)"""
    busy = [r for r in engine.store.all("land", LandRequest, active=True)
            if r.id != request.id and r.repo == request.repo and r.base == request.base
            and r.state in IN_FLIGHT]
    if busy:
        set_reason(request, Why(LandReason.LANE_TAKEN, pr=busy[0].pr_number))
        save(engine, request)
    return bool(busy)


async def review_verdicts(
    engine: StepContext, ops: RepoOps, request: LandRequest, policy: LandPolicy,
    compare: dict | None = None,
) -> list[tuple[ReviewRecord, Why | str | None]]:
    latest: dict[str, ReviewRecord] = {}
    # A person's latest review is their word (GitHub's review ids grow with time).
    for review in sorted(request.reviews, key=lambda r: r.id):
        if review.state in ("approved", "changes_requested", "dismissed"):
            latest[review.user] = review
    verdicts: list[tuple[ReviewRecord, Why | str | None]] = []
    approvals = [r for r in latest.values() if r.state == "approved"]
    if not approvals:
        return verdicts
    made = await who_made(engine, ops, request, compare)
    for review in approvals:
        is_bot = review.user_type == "Bot" or review.user.endswith("[bot]")
        permission = "none" if is_bot else await engine.permission(ops, review.user)
        verdicts.append((review, approval_refusal(
            review, head_sha=request.head_sha, requester=request.requested_by,
            permission=permission, policy=policy, **made)))
    return verdicts


async def who_made(engine: StepContext, ops: RepoOps, request: LandRequest,
                   compare: dict | None = None) -> dict[str, Any]:
    """approval_verdict's askers, makers and makers_unknown for this PR, read now
    (`compare`: the base against the PR's head, read in this step)."""
    askers = {r.requested_by for r in engine.runs_of(request.job_id)
              if r.pr_number == request.pr_number and r.requested_by not in (None, "hangar")}
    makers, unknown = await read_commit_makers(ops, request, compare)
    return {"askers": askers, "makers": {*pushers(engine, request), *makers},
            "makers_unknown": unknown or pusher_unknown(engine, request)}


def status_notes(engine: StepContext, repo: str, pr_number: int) -> PrNotes:
    """What landing says about a PR in its job's status comment, and whether it landed."""
    request = engine.store.get("land", land_id(repo, pr_number), LandRequest)
    if request is None:
        return PrNotes()
    notes = words.land_notes(request)
    if request.impostors:
        notes.append(render.impostors_note(request.impostors))
    return PrNotes(tuple(notes), landed=request.state == LandState.LANDED)


def pushers(engine: StepContext, request: LandRequest) -> list[str]:
    """People GitHub named as pushers to the branch (hangar's own pushes are its bot's)."""
    row = engine.store.get("autofix", autofix_row_id(request.repo, request.pr_number),
                           AutofixRow)
    return row.pushers if row else []


def pusher_unknown(engine: StepContext, request: LandRequest) -> Why | None:
    """Why the head's pusher is not known yet, or None: hangar's agent pushed it, or
    GitHub's push event (synchronize) named who did. A commit's author and committer can
    be anyone's; only the event names the pusher, and it may come after an approval."""
    head = request.head_sha
    if head is None:
        return None
    row = engine.store.get("autofix", autofix_row_id(request.repo, request.pr_number),
                           AutofixRow)
    if row is not None and head in row.pushed_heads:
        return None
    # A verification's head is whatever the branch held: it says nothing of who pushed.
    if any(r.head_sha == head for r in engine.runs_of(request.job_id)
           if r.pr_number == request.pr_number and r.kind != "verify"):
        return None
    return Why(NotCounted.PUSHER_UNKNOWN, head=head)


async def closing_commits(ops: RepoOps, request: LandRequest) -> list[tuple[str, str]]:
    """(sha, closing words) for each commit on the PR whose message would close an issue."""
    found = []
    async for commit in ops.gh.getiter(
            f"{ops.base}/pulls/{request.pr_number}/commits?per_page=100"):
        said = closing_references((commit.get("commit") or {}).get("message") or "")
        if said:
            found.append((commit["sha"], said[0]))
    return found


def compare_makers(compare: dict | None) -> set[str] | None:
    """commit_makers from a compare of the base against the PR's head, which lists the
    PR's commits with the same accounts; None when it did not list them all."""
    if not compare or compare.get("base_sha") is None:
        return None
    commits = compare.get("commits") or []
    if compare.get("total_commits", len(commits)) != len(commits) or any(
            "people" not in c for c in commits):
        return None
    return {p["login"] for c in commits for p in c["people"] if p.get("type") != "Bot"}


async def commit_makers(ops: RepoOps, request: LandRequest,
                        compare: dict | None = None) -> tuple[set[str], str | None]:
    """read_commit_makers, with why not all are known worded."""
    people, unknown = await read_commit_makers(ops, request, compare)
    return people, words.not_counted(unknown)


async def read_commit_makers(ops: RepoOps, request: LandRequest,
                             compare: dict | None = None) -> tuple[set[str], Why | None]:
    """The people GitHub links as author or committer of a commit on the PR (hangar's
    agent commits as `agent@hangar.invalid`, which is nobody's), and why not all are
    known when the PR has more commits than GitHub lists."""
    known = compare_makers(compare)
    if known is not None:
        return known, None
    people: set[str] = set()
    count = 0
    async for commit in ops.gh.getiter(
            f"{ops.base}/pulls/{request.pr_number}/commits?per_page=100"):
        count += 1
        for role in ("author", "committer"):
            user = commit.get(role) or {}
            if user.get("login") and user.get("type") != "Bot":
                people.add(user["login"])
    if count >= MAX_PR_COMMITS:
        return people, Why(NotCounted.MAKERS_UNKNOWN, limit=MAX_PR_COMMITS)
    return people, None


async def explain_reviews(
    engine: StepContext, ops: RepoOps, request: LandRequest,
    verdicts: list[tuple[ReviewRecord, Why | str | None]],
) -> None:
    """Say once, per review, why an approval does not count."""
    from app.render import reply_marker

    for review, why in verdicts:
        if why is None or review.id in request.explained:
            continue
        if isinstance(why, Why) and why.code == NotCounted.PUSHER_UNKNOWN:
            continue  # the push event comes within seconds: not said in a lasting reply
        marker = reply_marker(f"review-{review.id}")
        await ops.upsert_comment(request.pr_number, marker, words.review_not_counted(marker, why))
        request.explained.append(review.id)
        save(engine, request)


UPDATE_PATIENCE_S = 120  # GitHub answers update-branch 202 and moves the head a bit later


async def update(engine: StepContext, ops: RepoOps, request: LandRequest, compare: dict) -> None:
    """Bring the branch up to date with the base (`compare`: base against head, now)."""
    if compare["behind_by"] == 0:
        request.updated_from = None
        return move(engine, request, LandState.WAITING_CI, None)
    if asked_update(request):
        set_reason(request, Why(LandReason.UPDATE_PENDING))
        save(engine, request)
        return None
    try:
        await ops.gh.put(f"{ops.base}/pulls/{request.pr_number}/update-branch",
                         data={"expected_head_sha": request.head_sha})
    except BadRequest as exc:
        status = int(exc.status_code)
        if status in (403, 404):  # a refusal that asking again will not change
            return move(engine, request, LandState.FAILED, update_refused(request, str(exc)))
        if status != 422:
            raise  # not GitHub's word on the branch: the step is tried again, backing off
        if await head_moved(ops, request):
            return None  # the next pass sees the new head
        files = await conflicting_files(ops, request)
        return move(engine, request, LandState.CONFLICT,
                    Why(LandReason.CONFLICT, base=request.base, files=files))
    # The update makes a new head: earlier approvals lapse, verification runs again on it.
    request.updated_from, request.updated_at_ask = request.head_sha, time.time()
    save(engine, request)
    engine.note(request.job_id, f"land #{request.pr_number}: updating the branch from "
                                f"{request.base}")


def asked_update(request: LandRequest) -> bool:
    """hangar asked GitHub to update this head, and GitHub may still be at it."""
    return (request.state == LandState.UPDATING and request.updated_from == request.head_sha
            and time.time() - request.updated_at_ask < UPDATE_PATIENCE_S)


def update_refused(request: LandRequest, message: str) -> Why:
    """Why GitHub would not bring the branch up to date, and what a person can do."""
    if "workflow" in message.lower():
        return Why(LandReason.UPDATE_REFUSED_WORKFLOWS, base=request.base)
    return Why(LandReason.UPDATE_REFUSED, said=one_line(message))


async def head_moved(ops: RepoOps, request: LandRequest) -> bool:
    pr = await ops.get_pr(request.pr_number)
    return pr["head"]["sha"] != request.head_sha


async def conflicting_files(ops: RepoOps, request: LandRequest) -> list[str]:
    ours = await ops.compare(request.base, request.head_sha)
    theirs = await ops.compare(request.head_sha, request.base)
    changed_here = {f["filename"] for f in ours["files"]}
    return sorted(changed_here & {f["filename"] for f in theirs["files"]})


async def wait_for_ci(
    engine: StepContext, ops: RepoOps, request: LandRequest, policy: LandPolicy
) -> None:
    rules = await ops.gh.getitem(f"{ops.base}/rules/branches/{request.base}")
    required = list(dict.fromkeys([*required_from_rules(rules), *policy.required_checks]))
    if policy.require_verification and VERIFY_CHECK not in required:
        required.append(VERIFY_CHECK)
    verified = ensure_verified(engine, request)
    check_runs, statuses = await read_ci(ops, request.head_sha)
    results = ci.read(check_runs, statuses, own_app_id=engine.settings.app_id)
    if VERIFY_CHECK in required:
        results.outcomes[VERIFY_CHECK] = verification_outcome(
            results.outcomes.get(VERIFY_CHECK), verified)
    if set(results.impostors) - set(request.impostors):
        request.impostors = list(dict.fromkeys([*request.impostors, *results.impostors]))
        save(engine, request)
    verdict, names = ci.verdict(required, results)
    if verdict == "failed":
        return move(engine, request, LandState.CI_FAILED,
                    Why(LandReason.CHECKS_FAILED, head=request.head_sha, checks=names))
    if verdict == "pending":
        if request.ci_since is None:
            request.ci_since = time.time()
            save(engine, request)
        waited = time.time() - request.ci_since
        if waited > policy.ci_timeout_minutes * 60:
            late = names[0]
            return move(engine, request, LandState.CI_FAILED, Why(
                LandReason.CHECK_LATE, check=late, running=late in results.outcomes,
                head=request.head_sha, minutes=policy.ci_timeout_minutes))
        if request.state == LandState.AWAITING_APPROVAL:  # a check runs again
            return move(engine, request, LandState.WAITING_CI,
                        Why(LandReason.WAITING_FOR_CHECKS, checks=names))
        set_reason(request, Why(LandReason.WAITING_FOR_CHECKS, checks=names))
        save(engine, request)
        return None
    if request.state != LandState.AWAITING_APPROVAL:
        request.ci_since = None  # a later re-run of a check is waited for afresh
        move(engine, request, LandState.AWAITING_APPROVAL, None)


def ensure_verified(engine: StepContext, request: LandRequest) -> Verification | None:
    """hangar's latest verification of exactly this head with the environment of the base
    it lands into; None while there is none (one is asked for when nothing runs)."""
    from app.intents import request_verification

    runs = [r for r in engine.runs_of(request.job_id) if r.pr_number == request.pr_number]
    # Every turn (auto-fix ones too) verifies its own head on its way to done.
    here = [r for r in runs if r.head_sha == request.head_sha and r.base_branch == request.base]
    done = [r.verification for r in here
            if r.verification is not None and r.verification.head_sha == request.head_sha]
    if done:
        return max(done, key=lambda v: v.at)
    if here or any(not r.finished for r in runs):
        return None
    job = engine.get_job(request.job_id)
    request_verification(engine, job, request.pr_number, base=request.base)
    return None


def verification_outcome(check: ci.Outcome | None, verified: Verification | None) -> ci.Outcome:
    """`hangar / verify` as landing counts it: its check run on the head, and hangar's own
    record of a verification of that head against the PR's base now (a check run from a
    verification against a base the PR has since left says nothing of this one)."""
    if check in (ci.Outcome.FAILED, ci.Outcome.BLOCKED):
        return check
    if verified is None:
        return ci.Outcome.PENDING
    if verified.passed is not True:
        return ci.Outcome.FAILED if verified.passed is False else ci.Outcome.BLOCKED
    return check or ci.Outcome.PENDING


async def await_approval(
    engine: StepContext, ops: RepoOps, request: LandRequest, policy: LandPolicy,
    approved: list[ReviewRecord], compare: dict | None = None,
) -> None:
    if len(approved) < policy.required_approvals:
        set_reason(request, approvals_wanted(request, policy, len(approved)))
        save(engine, request)
        return
    touched, gap = await sensitive_on_pr(ops, request, policy, compare)
    if (touched or gap) and request.ack_sensitive_sha != request.head_sha:
        set_reason(request, Why(LandReason.SENSITIVE, paths=touched, gap=gap))
        save(engine, request)
        return
    if lane_taken(engine, request):
        return
    move(engine, request, LandState.MERGING, None)


async def sensitive_on_pr(
    ops: RepoOps, request: LandRequest, policy: LandPolicy, compare: dict | None = None,
) -> tuple[list[str], Why | None]:
    """The PR's sensitive files from its whole file list (every page), and why the list
    is incomplete when it is. A compare of the base against the PR's head lists the same
    files (renames with their old names): below GitHub's cut of it, it is the list."""
    if compare and compare.get("base_sha") and len(compare.get("files") or []) < COMPARE_FILES:
        return sensitive_names(compare["files"], policy.sensitive_paths), None
    files = [f async for f in ops.gh.getiter(
        f"{ops.base}/pulls/{request.pr_number}/files?per_page=100")]
    pr = await ops.get_pr(request.pr_number)
    return (sensitive_names(files, policy.sensitive_paths),
            file_list_shortfall(len(files), pr.get("changed_files")))


def approvals_wanted(request: LandRequest, policy: LandPolicy, have: int) -> Why:
    return Why(LandReason.APPROVALS_WANTED, missing=policy.required_approvals - have,
               head=request.head_sha,
               other_than=request.requested_by if policy.forbid_self_approval else None)


async def merge(
    engine: StepContext, ops: RepoOps, request: LandRequest, policy: LandPolicy
) -> None:
    job = engine.get_job(request.job_id)
    pr = await ops.get_pr(request.pr_number)
    if pr.get("merged"):  # a crash after GitHub merged: record it once
        return await landed(engine, ops, request, pr.get("merge_commit_sha"))
    _, rulesets = await read_rules(ops, request.base)
    bypass = bypassing_rulesets(rulesets, engine.settings.app_id)
    if bypass:  # GitHub would not hold hangar to the ruleset: it is no gate
        return move(engine, request, LandState.REJECTED,
                    Why(LandReason.BYPASS_ACTOR, ruleset=bypass[0]))
    if policy.method != "squash":  # the agent's own commit messages would land as written
        closing = await closing_commits(ops, request)
        if closing:
            sha, said = closing[0]
            return move(engine, request, LandState.REJECTED, Why(
                LandReason.CLOSING_COMMIT, sha=sha, said=said, method=policy.method))
    # GitHub merges onto whatever the base is now; what was checked is head on the old base.
    if (await ops.compare(request.base, request.head_sha))["behind_by"] > 0:
        return move(engine, request, LandState.UPDATING,
                    Why(LandReason.BASE_MOVED, base=request.base))
    method = policy.method
    for _ in range(2):  # a second try only with a method the repository allows
        try:
            result = await ops.gh.put(
                f"{ops.base}/pulls/{request.pr_number}/merge",
                data={"sha": request.head_sha, "merge_method": method,
                      **words.merge_commit(pr["title"], request.pr_number, job.requested_by)},
            )
            break
        except BadRequest as exc:
            status = int(exc.status_code)
            answer = merge_answer(status, str(exc))
            if answer == "head_moved":
                return move(engine, request, LandState.UPDATING, Why(LandReason.HEAD_MOVED))
            if answer == "base_moved":
                raise BaseMoved(one_line(str(exc))) from exc  # tried again, backing off
            if answer == "method":
                allowed = await allowed_methods(ops)
                other = next((m for m in (method, *MERGE_METHODS) if m in allowed), None)
                if other is None or other == method:
                    return move(engine, request, LandState.REJECTED, Why(
                        LandReason.METHOD_REFUSED, method=method, said=one_line(str(exc)),
                        allowed=allowed))
                engine.note(request.job_id,
                            words.method_fallback_note(request.pr_number, method, other))
                method = other
                continue
            if answer == "queue":
                return move(engine, request, LandState.REJECTED,
                            Why(LandReason.MERGE_QUEUE, base=request.base))
            if answer == "workflows":
                return move(engine, request, LandState.FAILED, Why(LandReason.MERGE_WORKFLOWS))
            if answer == "rejected":
                return move(engine, request, LandState.REJECTED,
                            Why(LandReason.MERGE_REFUSED, said=one_line(str(exc))))
            raise
    else:
        return None
    await landed(engine, ops, request, result.get("sha"))


MERGE_METHODS = ("squash", "merge", "rebase")
SHOW_MERGING_AFTER_S = 2.0


async def merge_shown_if_slow(
    engine: StepContext, ops: RepoOps, request: LandRequest, policy: LandPolicy
) -> None:
    """Merge; the status comment says "merging" only if GitHub takes a while. A merge
    is one request: shown at once, that edit would be two writes (the issue's comment
    and the PR's) made stale a second later by the ones that say "landed"."""
    merging = asyncio.ensure_future(merge(engine, ops, request, policy))
    try:
        done, _ = await asyncio.wait({merging}, timeout=SHOW_MERGING_AFTER_S)
        if not done:
            await show(engine, ops, request, check=False)
        await merging
    finally:
        merging.cancel()  # only when this step itself was stopped: as a crash would


class BaseMoved(Exception):
    """GitHub's 405 "Base branch was modified": the merge is asked again, after a wait."""


def merge_answer(status: int, message: str) -> str | None:
    """What GitHub's refusal of a merge means for hangar (None: not GitHub's word on
    this merge, so the step is tried again)."""
    lowered = message.lower()
    if status == 409:
        return "head_moved" if "head branch" in lowered or "base" not in lowered else "base_moved"
    if status == 403 and "workflow" in lowered:
        return "workflows"
    if status != 405:
        return None
    if "base branch was modified" in lowered:
        return "base_moved"
    if "merge queue" in lowered:
        return "queue"
    if "not allowed on this repository" in lowered:
        return "method"
    if "workflow" in lowered:
        return "workflows"
    return "rejected"


async def allowed_methods(ops: RepoOps) -> list[str]:
    """The merge methods the repository's settings allow, in hangar's order of liking."""
    repo = await ops.gh.getitem(ops.base)
    flags = {"squash": "allow_squash_merge", "merge": "allow_merge_commit",
             "rebase": "allow_rebase_merge"}
    return [m for m in MERGE_METHODS if repo.get(flags[m], True)]


def one_line(message: str) -> str:
    """GitHub's multi-line message (a header, then one line per rule) as one sentence."""
    lines = [line.strip().rstrip(".") for line in message.splitlines() if line.strip()]
    if not lines:
        return "no reason given"
    return lines[0] + (": " + "; ".join(lines[1:]) if len(lines) > 1 else "")


async def landed(
    engine: StepContext, ops: RepoOps, request: LandRequest, merge_sha: str | None
) -> None:
    if request.state == LandState.LANDED:
        return
    request.merge_sha = merge_sha
    move(engine, request, LandState.LANDED, Why(LandReason.LANDED, sha=merge_sha))
    engine.tokens.revoke_branch(request.repo, request.branch)
    job = engine.get_job(request.job_id)
    if all(r.finished for r in engine.runs_of(job.id)):
        engine.patch_job(job.id, state=JobState.DONE)
    await show(engine, ops, request)


async def show(engine: StepContext, ops: RepoOps, request: LandRequest, *,
               check: bool = True) -> None:
    """The land state in check run `hangar / land` on the head (unless not `check`), and
    in the status comment."""
    from app import render, runs

    if request.head_sha and check:
        status, conclusion = land_check_status(request.state)
        gate = await read_gate(ops, request.base, engine.settings.app_id)
        summary = render.fit_output(words.land_check_summary(request, gate))
        title = render.land_title(request)
        shown = f"{request.head_sha} {status} {conclusion} {title}\n{summary}"
        if shown != request.shown:
            await show_check(engine, ops, request, shown, status=status, conclusion=conclusion,
                             output={"title": title, "summary": summary})
    await runs.refresh_status(engine, request.job_id)


async def show_check(engine: StepContext, ops: RepoOps, request: LandRequest, shown: str,
                     **fields: Any) -> None:
    """Write check run `hangar / land` on the head: by its id once known; a create is
    marked on the row first, so only one that may have been sent is looked for."""
    head = request.head_sha
    known = request.check_ids.get(head)
    may_exist = head in request.check_posting
    try:
        if known is None and not may_exist:
            request.check_posting = [*request.check_posting[-9:], head]
            save(engine, request)
        check_id = await ops.upsert_check_run(LAND_CHECK, head, request.id, known_id=known,
                                              look_first=may_exist, **fields)
        request.check_ids = {**dict(list(request.check_ids.items())[-9:]), head: check_id}
        request.check_posting = [h for h in request.check_posting if h != head]
        request.shown = shown
        save(engine, request)
    except RowChanged:
        pass  # the next step shows it again from the fresh row (its mark, if made, kept)


async def read_gate(
    ops: RepoOps, branch: str, app_id: int | None, *, classic: bool = False
) -> list[tuple[bool, str]]:
    """gate_report for a branch, read from GitHub: its rules and their rulesets (and with
    `classic`, its classic protection too)."""
    rules, rulesets = await read_rules(ops, branch)
    protection = await read_protection(ops, branch) if classic else None
    return gate_report(rules, rulesets, app_id, protection)


async def read_protection(ops: RepoOps, branch: str) -> dict | None:
    """The branch's classic protection; None when it has none (404 "Branch not
    protected") or the installation may not read it (no administration: read)."""
    try:
        return await ops.gh.getitem(f"{ops.base}/branches/{branch}/protection")
    except HTTPException as exc:
        status = int(exc.status_code)
        if status == 404 or (status == 403 and "not accessible" in str(exc)):
            return None
        raise  # a rate limit is no answer: the step is tried again


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
