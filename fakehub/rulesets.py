"""Branch rulesets: which rules apply to a branch, and what they refuse.

The evaluation is pure over the records it is given, so merges, pushes and
`mergeable_state` all reach the same verdict.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from fakehub.state import (
    CheckRun,
    Identity,
    Repo,
    Review,
    Status,
    permission_at_least,
)

PASSING_CONCLUSIONS = {"success", "neutral", "skipped"}
# GitHub's built-in repository role ids as rulesets' bypass actors name them.
ROLE_IDS = {"maintain": 2, "write": 4, "admin": 5}
RULE_VIOLATION_HEADER = "Repository rule violations found"


@dataclass
class ActiveRule:
    rule: dict[str, Any]
    ruleset: dict[str, Any]

    @property
    def type(self) -> str:
        return self.rule["type"]

    @property
    def parameters(self) -> dict[str, Any]:
        return self.rule.get("parameters") or {}


def normalize_ruleset(raw: dict[str, Any], ruleset_id: int, repo: Repo) -> dict[str, Any]:
    """A ruleset as GitHub stores it, with the defaults GitHub fills in."""
    return {
        "id": ruleset_id,
        "name": raw.get("name", f"ruleset-{ruleset_id}"),
        "target": raw.get("target", "branch"),
        "source_type": "Repository",
        "source": repo.full_name,
        "enforcement": raw.get("enforcement", "active"),
        "conditions": raw.get("conditions")
        or {"ref_name": {"include": ["~DEFAULT_BRANCH"], "exclude": []}},
        "rules": [dict(rule) for rule in raw.get("rules", [])],
        "bypass_actors": [dict(actor) for actor in raw.get("bypass_actors", [])],
    }


def ref_pattern(pattern: str) -> re.Pattern[str]:
    """GitHub's fnmatch-like ref pattern as a regex: `*` and `?` stay within one path
    segment, `**` crosses `/`, `[...]` is a character class."""
    out, i = [], 0
    while i < len(pattern):
        char = pattern[i]
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[" and "]" in pattern[i + 2:]:
            end = pattern.index("]", i + 2)
            inner = pattern[i + 1:end]
            out.append("[" + ("^" + inner[1:] if inner.startswith("!") else inner) + "]")
            i = end
        else:
            out.append(re.escape(char))
        i += 1
    return re.compile("".join(out))


def _matches(pattern: str, branch: str, repo: Repo) -> bool:
    if pattern == "~ALL":
        return True
    if pattern == "~DEFAULT_BRANCH":
        return branch == repo.default_branch
    full = pattern if pattern.startswith("refs/") else f"refs/heads/{pattern}"
    return ref_pattern(full).fullmatch(f"refs/heads/{branch}") is not None


def applies_to(ruleset: dict[str, Any], repo: Repo, branch: str) -> bool:
    if ruleset.get("enforcement") != "active" or ruleset.get("target", "branch") != "branch":
        return False
    ref_name = (ruleset.get("conditions") or {}).get("ref_name") or {}
    include = ref_name.get("include") or []
    exclude = ref_name.get("exclude") or []
    return any(_matches(p, branch, repo) for p in include) and not any(
        _matches(p, branch, repo) for p in exclude
    )


def active_rules(repo: Repo, branch: str) -> list[ActiveRule]:
    return [
        ActiveRule(rule, ruleset)
        for ruleset in repo.rulesets
        if applies_to(ruleset, repo, branch)
        for rule in ruleset["rules"]
    ]


def bypass_mode(ruleset: dict[str, Any], actor: Identity | None, permission: str) -> str:
    """GitHub's `current_user_can_bypass` for this caller: always, pull_requests_only or
    never."""
    modes = []
    for bypass in ruleset.get("bypass_actors", []) if actor is not None else []:
        kind, ident = bypass.get("actor_type"), bypass.get("actor_id")
        listed = False
        if kind == "Integration" and actor.app_id is not None and ident == actor.app_id:
            listed = True
        if kind == "RepositoryRole" and actor.kind == "user":
            needed = next((r for r, i in ROLE_IDS.items() if i == ident), None)
            listed = bool(needed and permission_at_least(permission, needed))
        if kind == "OrganizationAdmin" and actor.kind == "user" and permission == "admin":
            listed = True
        if listed:
            modes.append(bypass.get("bypass_mode", "always"))
    for mode, answer in (("always", "always"), ("exempt", "exempt"),
                         ("pull_request", "pull_requests_only")):
        if mode in modes:
            return answer
    return "never"


def may_bypass(ruleset: dict[str, Any], actor: Identity, permission: str) -> bool:
    return bypass_mode(ruleset, actor, permission) != "never"


def render_violations(ref: str, reasons: list[str]) -> str:
    """GitHub's wording for a merge the rules refuse."""
    body = "\n".join(f"{reason}" for reason in reasons)
    return f"{RULE_VIOLATION_HEADER}\n\n{body}\n\n"


# -- pushes ----------------------------------------------------------------------------


def push_violations(
    rules: list[ActiveRule],
    actor: Identity,
    permission: str,
    *,
    old: str | None,
    new: str | None,
    fast_forward: bool,
    checks_pass: bool,
) -> list[str]:
    """Why a direct push of one ref breaks the rules (empty when it may go)."""
    reasons: list[str] = []
    for active in rules:
        if may_bypass(active.ruleset, actor, permission):
            continue
        kind = active.type
        if kind == "deletion" and new is None:
            reasons.append("Cannot delete this branch")
        elif kind == "non_fast_forward" and old and new and not fast_forward:
            reasons.append("Cannot force-push to this branch")
        elif kind == "pull_request" and new is not None:
            reasons.append("Changes must be made through a pull request.")
        elif kind == "required_status_checks" and new is not None and not checks_pass:
            contexts = [c["context"] for c in active.parameters.get("required_status_checks", [])]
            reasons.extend(f"Required status check \"{c}\" is expected." for c in contexts)
    return list(dict.fromkeys(reasons))


# -- merges ----------------------------------------------------------------------------


@dataclass
class ReviewVerdict:
    approvals: int
    changes_requested: bool


def count_reviews(
    reviews: list[Review],
    *,
    author_id: int,
    head_sha: str,
    only_current_head: bool,
    has_write: Any,
    last_pusher_id: int | None = None,
) -> ReviewVerdict:
    """Each reviewer's latest decisive review; authors and readers do not count, nor
    (given `last_pusher_id`, for require_last_push_approval) whoever pushed last."""
    latest: dict[int, Review] = {}
    for review in reviews:  # chronological
        if review.state not in ("APPROVED", "CHANGES_REQUESTED", "DISMISSED"):
            continue
        latest[review.user.id] = review
    approvals, changes = 0, False
    for review in latest.values():
        if review.user.id in (author_id, last_pusher_id) or not has_write(review.user):
            continue
        if only_current_head and review.commit_id != head_sha:
            continue
        if review.state == "APPROVED":
            approvals += 1
        elif review.state == "CHANGES_REQUESTED":
            changes = True
    return ReviewVerdict(approvals, changes)


def check_state(
    context: str,
    integration_id: int | None,
    runs: list[CheckRun],
    statuses: list[Status],
) -> str:
    """"success", "pending", "failure" or "missing" for one required check."""
    matching = [
        r
        for r in runs
        if r.name == context and (integration_id is None or r.app_id == integration_id)
    ]
    if matching:
        latest = max(matching, key=lambda r: r.id)
        if latest.status != "completed":
            return "pending"
        return "success" if latest.conclusion in PASSING_CONCLUSIONS else "failure"
    if integration_id is not None:
        return "missing"  # a check bound to an App: nobody else's report counts, statuses none
    for status in statuses:  # newest first
        if status.context == context:
            return {"success": "success", "pending": "pending"}.get(status.state, "failure")
    return "missing"


def required_checks_reasons(
    rules: list[ActiveRule],
    runs: list[CheckRun],
    statuses: list[Status],
) -> tuple[list[str], bool]:
    """(reasons, any_pending) for the required status checks on one head, in GitHub's
    words: one check is named ("Required status check "ci / test" is expected."), several
    are counted ("2 of 3 required status checks are expected.", "... have not succeeded:
    1 expected and 1 failing.")."""
    states: dict[str, str] = {}
    for active in rules:
        if active.type != "required_status_checks":
            continue
        for check in active.parameters.get("required_status_checks", []):
            state = check_state(check["context"], check.get("integration_id"), runs, statuses)
            if states.get(check["context"]) in (None, "success"):
                states[check["context"]] = state
    return checks_sentence(states), any(s in ("pending", "missing") for s in states.values())


CHECK_WORDS = {"missing": "expected", "pending": "in progress", "failure": "failing"}


def checks_sentence(states: dict[str, str]) -> list[str]:
    """GitHub's one sentence for the required checks that have not succeeded."""
    bad = {name: state for name, state in states.items() if state != "success"}
    if not bad:
        return []
    if len(states) == 1:
        name, state = next(iter(bad.items()))
        return [f"Required status check \"{name}\" is {CHECK_WORDS[state]}."]
    kinds = [CHECK_WORDS[k] for k in ("missing", "pending", "failure")
             if k in bad.values()]
    if len(kinds) == 1:
        return [f"{len(bad)} of {len(states)} required status checks are {kinds[0]}."]
    counts = " and ".join(f"{sum(1 for s in bad.values() if CHECK_WORDS[s] == k)} {k}"
                          for k in kinds)
    return [f"{len(bad)} of {len(states)} required status checks have not succeeded: "
            f"{counts}."]


# GitHub's words for a merge the other rules refuse.
NOT_LINEAR = "This branch must not contain merge commits."
UNSIGNED = "Commits must have verified signatures."
THROUGH_QUEUE = "Changes must be made through the merge queue"
UPDATE_RESTRICTED = "Cannot update this protected ref."
UNRESOLVED = "A conversation must be resolved before this pull request can be merged."


def owners_sentence(owners: list[str]) -> str:
    """GitHub's words for a missing code owner approval."""
    return f"Waiting on code owner review from {' and/or '.join(o.lstrip('@') for o in owners)}."


def method_reasons(rules: list[ActiveRule], method: str, *, pr_has_merge_commits: bool,
                   pr_commits_signed: bool) -> list[str]:
    """What the rules say against merging with `method` (fakehub signs nothing a person
    pushed; the squash and merge commits it makes count as GitHub's, signed)."""
    reasons = []
    for active in rules:
        kind, params = active.type, active.parameters
        allowed = params.get("allowed_merge_methods") if kind == "pull_request" else None
        if allowed and method not in allowed:
            # [unconfirmed] GitHub's wording for a method a ruleset leaves out.
            reasons.append(f"Merge method {method} is not allowed on this branch.")
        if kind == "required_linear_history" and (
                method == "merge" or (method == "rebase" and pr_has_merge_commits)):
            reasons.append(NOT_LINEAR)
        if kind == "required_signatures" and (
                method == "rebase" or (method == "merge" and not pr_commits_signed)):
            reasons.append(UNSIGNED)
    return reasons


def strict_policy(rules: list[ActiveRule]) -> bool:
    return any(
        a.type == "required_status_checks"
        and a.parameters.get("strict_required_status_checks_policy")
        for a in rules
    )


def rule_as_github_returns(active: ActiveRule) -> dict[str, Any]:
    shaped = {
        "type": active.type,
        "ruleset_source_type": "Repository",
        "ruleset_source": active.ruleset["source"],
        "ruleset_id": active.ruleset["id"],
    }
    if active.rule.get("parameters") is not None:
        shaped["parameters"] = active.rule["parameters"]
    return shaped
