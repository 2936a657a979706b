"""Classic branch protection: what a PUT stores, what a GET shows, what a merge meets.

Pure over the records it is given, like the rulesets: the REST routes and the merge
both ask here. GitHub applies classic protection and rulesets together; a merge that
classic protection refuses gets one sentence (not the rulesets' list).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DOCS = "https://docs.github.com/articles/about-protected-branches"
NOT_PROTECTED = "Branch not protected"
REQUIRED_KEYS = ("required_status_checks", "enforce_admins", "required_pull_request_reviews",
                 "restrictions")
FLAGS = ("required_linear_history", "allow_force_pushes", "allow_deletions", "block_creations",
         "required_conversation_resolution", "lock_branch", "allow_fork_syncing")


class Invalid(ValueError):
    """A PUT body GitHub would answer 422."""


@dataclass(frozen=True)
class RequiredCheck:
    context: str
    app_id: int | None  # None: any App or status may report it


def normalize(body: dict[str, Any]) -> dict[str, Any]:
    """The protection a PUT body sets (all four top-level keys are required, as on GitHub)."""
    missing = [k for k in REQUIRED_KEYS if k not in body]
    if missing:
        raise Invalid(f"Invalid request.\n\n\"{missing[0]}\" wasn't supplied.")
    stored: dict[str, Any] = {"enforce_admins": bool(body.get("enforce_admins"))}
    checks = body.get("required_status_checks")
    if checks is not None:
        if not isinstance(checks, dict) or "strict" not in checks or not (
                "contexts" in checks or "checks" in checks):
            raise Invalid("Invalid request.\n\n\"strict\" and \"contexts\" are required in "
                          "required_status_checks.")
        listed = [RequiredCheck(c["context"], c.get("app_id") if c.get("app_id") != -1 else None)
                  for c in checks.get("checks") or []]
        listed += [RequiredCheck(c, None) for c in checks.get("contexts") or []
                   if c not in {r.context for r in listed}]
        stored["required_status_checks"] = {"strict": bool(checks["strict"]), "checks": listed}
    reviews = body.get("required_pull_request_reviews")
    if reviews is not None:
        count = reviews.get("required_approving_review_count", 1)
        if not isinstance(count, int) or not 0 <= count <= 6:
            raise Invalid("Invalid request.\n\nrequired_approving_review_count must be "
                          "between 0 and 6.")
        stored["required_pull_request_reviews"] = {
            "dismiss_stale_reviews": bool(reviews.get("dismiss_stale_reviews")),
            "require_code_owner_reviews": bool(reviews.get("require_code_owner_reviews")),
            "required_approving_review_count": count,
            "require_last_push_approval": bool(reviews.get("require_last_push_approval")),
        }
    for flag in FLAGS:
        stored[flag] = bool(body.get(flag))
    # Set through its own endpoint on GitHub (POST .../required_signatures); here also
    # through the PUT, for tests.
    stored["required_signatures"] = bool(body.get("required_signatures"))
    return stored


def as_github(stored: dict[str, Any], url: str) -> dict[str, Any]:
    """GitHub's branch protection object (GET, and the PUT's answer)."""
    shaped: dict[str, Any] = {"url": url}
    checks = stored.get("required_status_checks")
    if checks is not None:
        shaped["required_status_checks"] = {
            "url": f"{url}/required_status_checks", "strict": checks["strict"],
            "contexts": [c.context for c in checks["checks"]],
            "contexts_url": f"{url}/required_status_checks/contexts",
            "checks": [{"context": c.context, "app_id": c.app_id} for c in checks["checks"]],
        }
    reviews = stored.get("required_pull_request_reviews")
    if reviews is not None:
        shaped["required_pull_request_reviews"] = {
            "url": f"{url}/required_pull_request_reviews", **reviews}
    shaped["required_signatures"] = {"url": f"{url}/required_signatures",
                                     "enabled": bool(stored.get("required_signatures"))}
    shaped["enforce_admins"] = {"url": f"{url}/enforce_admins",
                                "enabled": stored["enforce_admins"]}
    for flag in FLAGS:
        shaped[flag] = {"enabled": stored[flag]}
    return shaped


def required_checks(stored: dict[str, Any] | None) -> list[RequiredCheck]:
    checks = (stored or {}).get("required_status_checks")
    return list(checks["checks"]) if checks else []


def merge_refusal(
    stored: dict[str, Any] | None,
    *,
    is_admin: bool,
    approvals: int,
    changes_requested: bool,
    check_states: dict[str, str],
    behind: bool,
) -> str | None:
    """GitHub's one sentence against merging now, or None.

    `approvals` counts approvals from writers other than the author (and, with
    require_last_push_approval, other than the last pusher); `check_states` maps each
    required check to success|pending|failure|missing."""
    if stored is None or (is_admin and not stored["enforce_admins"]):
        return None
    reviews = stored.get("required_pull_request_reviews")
    if reviews is not None:
        if changes_requested:
            return "Changes requested by a reviewer with write access."
        needed = reviews["required_approving_review_count"]
        if approvals < needed:
            noun = "review is" if needed == 1 else "reviews are"
            return f"At least {needed} approving {noun} required by reviewers with write access."
    checks = required_checks(stored)
    if checks:
        if stored["required_status_checks"]["strict"] and behind:
            return "Head branch is out of date. Review and try the merge again."
        failing = [c.context for c in checks if check_states.get(c.context) == "failure"]
        waiting = [c.context for c in checks if check_states.get(c.context) in (None, "pending",
                                                                              "missing")]
        if failing:
            return (f"Required status check \"{failing[0]}\" is failing." if len(checks) == 1
                    else f"{len(failing)} of {len(checks)} required status checks are failing.")
        if waiting:
            return (f"Required status check \"{waiting[0]}\" is expected." if len(checks) == 1
                    else f"{len(waiting)} of {len(checks)} required status checks are expected.")
    return None

