"""Landing's pure decisions: whether an approval counts, what the checks say, what guards a
branch, what GitHub's answer to a merge or an update means. Each reads only its arguments
(and the clock): no engine, no GitHub; the reasons they give are codes render words."""

from __future__ import annotations

import re
import time
from collections.abc import Collection
from enum import StrEnum
from typing import Any

from app.github import ci
from app.landing.rows import LandRequest, LandState, ReviewRecord
from app.models import Verification
from app.render import landing as words
from app.render.reasons import Why
from app.repoconfig import LandPolicy
from app.sensitive import sensitive_names

LAND_CHECK = "hangar / land"
VERIFY_CHECK = "hangar / verify"


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
    GATE_WAITS = "gate_waits"  # GitHub's rules still ask a person for something
    GATE_CANNOT = "gate_cannot"  # a rule hangar cannot meet on this branch
    MERGE_REFUSED_WAITS = "merge_refused_waits"  # GitHub's 405 named a rule: wait for it
    REOPENED = "reopened"
    RERUN = "rerun"
    GATE_CHANGED = "gate_changed"
    REPO_REMOVED = "repo_removed"
    INSTALLATION_ENDED = "installation_ended"  # the App suspended or uninstalled
    IN_QUEUE = "in_queue"
    QUEUE_REMOVED = "queue_removed"
    DRAFT = "draft"  # the PR is a draft until its verification passes
    LARGE = "large"  # more changed lines than land.max_diff_lines: an ack is needed
    FROZEN_OPERATOR = "frozen_operator"  # HANGAR_LAND=off
    FROZEN_REPO = "frozen_repo"  # land.enabled: false
    EXPIRED = "expired"  # approved, not landed within land.approval_ttl_minutes
    AUTO_LAND = "auto_land"  # auto-land approved this head by its rule
    AUTO_LAND_REFUSED = "auto_land_refused"  # auto-land is on, and does not apply here
    REBASE_FAILED = "rebase_failed"  # the land worker could not rebase and push
    RESOLVING = "resolving"  # a turn merges the base and resolves the conflicts
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
    EXPIRED = "expired"  # given before the request expired


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


class AutoLandOut(StrEnum):
    """Why auto-land does not apply to a pull request (worded by render.landing)."""

    SENSITIVE = "auto_sensitive"
    OUTSIDE_PATHS = "auto_outside_paths"
    TOO_LARGE = "auto_too_large"
    FILES_UNKNOWN = "auto_files_unknown"
    NOT_VERIFIED = "auto_not_verified"
    CHECKS = "auto_checks"
    MORE_APPROVALS = "auto_more_approvals"


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
    makers_unknown: Why | str | None = None, carried_from: Collection[str] = (),
    expired: Collection[int] = (),
) -> Why | str | None:
    """None when this review counts as an approval of head_sha; else why it does not (a
    `NotCounted` code).

    `carried_from`: heads hangar's own clean update made head_sha from, whose approvals
    still count (land.approval_survives_clean_update). `expired`: reviews given before the
    request expired (a new approval restarts it).

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
    if review.commit_id != head_sha and review.commit_id not in carried_from:
        return Why(NotCounted.OTHER_COMMIT, user=user, approved=review.commit_id, head=head_sha)
    if review.id in expired:
        return Why(NotCounted.EXPIRED, user=user)
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


def approvals_wanted(request: LandRequest, policy: LandPolicy, have: int,
                     need: int | None = None) -> Why:
    need = policy.required_approvals if need is None else need
    return Why(LandReason.APPROVALS_WANTED, missing=need - have, head=request.head_sha,
               other_than=request.requested_by if policy.forbid_self_approval else None)


# -- the policy a request keeps, and what it asks beyond approvals -----------------------


def policy_in_force(request: LandRequest, fresh: LandPolicy) -> LandPolicy:
    """The land policy kept with the request since it was made (later edits of
    .github/hangar.yml apply to new requests); `enabled`, a freeze, is read fresh."""
    if request.policy is None:
        return fresh
    return LandPolicy.model_validate({**request.policy, "enabled": fresh.enabled})


def freeze(landing_on: bool, policy: LandPolicy) -> Why | None:
    """Why nothing merges now (the operator's HANGAR_LAND=off, the repository's
    land.enabled: false), or None. Approved requests wait, and land once it is lifted."""
    if not landing_on:
        return Why(LandReason.FROZEN_OPERATOR)
    if not policy.enabled:
        return Why(LandReason.FROZEN_REPO)
    return None


def approvals_needed(policy: LandPolicy, sensitive: bool) -> int:
    """Approvals that must count: the policy's, and land.sensitive_extra_approvals more
    when the PR changes sensitive paths."""
    return policy.required_approvals + (policy.sensitive_extra_approvals if sensitive else 0)


def changed_lines(pr: dict) -> int:
    """Lines added plus lines deleted, as GitHub counts the pull request."""
    return int(pr.get("additions") or 0) + int(pr.get("deletions") or 0)


def too_large(request: LandRequest, policy: LandPolicy, lines: int) -> Why | None:
    """Why the change needs `/hangar land --ack-large` on this head, or None."""
    if lines <= policy.max_diff_lines or request.ack_large_sha == request.head_sha:
        return None
    return Why(LandReason.LARGE, lines=lines, limit=policy.max_diff_lines)


def expires_at(request: LandRequest, policy: LandPolicy) -> float | None:
    """When an approved request that has not landed expires (None: not approved)."""
    if request.approved_at is None:
        return None
    return request.approved_at + policy.approval_ttl_minutes * 60


def expired(request: LandRequest, policy: LandPolicy, now_s: float) -> bool:
    at = expires_at(request, policy)
    return (at is not None and now_s >= at
            and request.state not in (LandState.LANDED, LandState.CANCELLED, LandState.EXPIRED)
            and request.enqueued != request.head_sha)  # GitHub's queue holds it


def auto_rule(policy: LandPolicy) -> str:
    """Auto-land's rule, as written in the policy (kept with what it approves)."""
    when = policy.auto_land.when
    return (f"verification: {when.verification}, checks: {when.checks}, at most "
            f"{when.max_diff_lines} changed lines, only_paths: {', '.join(when.only_paths)}")


def auto_land_verdict(
    policy: LandPolicy, *, files: list[dict], complete: bool, lines: int,
    verified: bool, checks_passed: bool,
) -> Why | None:
    """None when auto-land may approve this head by its rule; else why not (an
    `AutoLandOut`). Never on sensitive paths, never past its own approval count."""
    when = policy.auto_land.when
    sensitive = sensitive_names(files, policy.sensitive_paths)
    if sensitive:
        return Why(AutoLandOut.SENSITIVE, paths=sensitive)
    if not complete:
        return Why(AutoLandOut.FILES_UNKNOWN)
    names = [n for f in files for n in (f.get("filename"), f.get("previous_filename")) if n]
    inside = set(sensitive_names(files, when.only_paths))
    outside = [n for n in dict.fromkeys(names) if n not in inside]
    if outside:
        return Why(AutoLandOut.OUTSIDE_PATHS, paths=outside, only=when.only_paths)
    if lines > when.max_diff_lines:
        return Why(AutoLandOut.TOO_LARGE, lines=lines, limit=when.max_diff_lines)
    if policy.required_approvals > 1:
        return Why(AutoLandOut.MORE_APPROVALS, count=policy.required_approvals)
    if not verified:
        return Why(AutoLandOut.NOT_VERIFIED)
    if when.checks == "pass" and not checks_passed:
        return Why(AutoLandOut.CHECKS)
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


UPDATE_PATIENCE_S = 120  # GitHub answers update-branch 202 and moves the head a bit later


def asked_update(request: LandRequest) -> bool:
    """hangar asked GitHub to update this head, and GitHub may still be at it."""
    return (request.state == LandState.UPDATING and request.updated_from == request.head_sha
            and time.time() - request.updated_at_ask < UPDATE_PATIENCE_S)


def update_refused(request: LandRequest, message: str) -> Why:
    """Why GitHub would not bring the branch up to date, and what a person can do."""
    if "workflow" in message.lower():
        return Why(LandReason.UPDATE_REFUSED_WORKFLOWS, base=request.base)
    return Why(LandReason.UPDATE_REFUSED, said=one_line(message))


MERGE_METHODS = ("squash", "merge", "rebase")


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
    if lowered.strip().rstrip(".") == "pull request is not mergeable":
        return "transient"  # GitHub answers so while it still computes mergeability
    if "merge queue" in lowered:
        return "queue"
    if "not allowed on this repository" in lowered:
        return "method"
    if "workflow" in lowered:
        return "workflows"
    return "rejected"


def one_line(message: str) -> str:
    """GitHub's multi-line message (a header, then one line per rule) as one sentence."""
    lines = [line.strip().rstrip(".") for line in message.splitlines() if line.strip()]
    if not lines:
        return "no reason given"
    return lines[0] + (": " + "; ".join(lines[1:]) if len(lines) > 1 else "")


def land_check_status(state: LandState) -> tuple[str, str | None]:
    if state == LandState.LANDED:
        return "completed", "success"
    if state in (LandState.CONFLICT, LandState.CI_FAILED, LandState.REJECTED, LandState.FAILED):
        return "completed", "failure"
    if state == LandState.EXPIRED:
        return "completed", "timed_out"
    if state == LandState.CANCELLED:
        return "completed", "cancelled"
    return "in_progress", None
