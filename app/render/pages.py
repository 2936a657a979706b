"""The words of hangar's own web pages (sign-in, the job page): plain text, escaped by the
page that shows it."""

from __future__ import annotations

from typing import Any

SIGN_IN_PROBLEMS = {
    "state": "This sign-in was not started in this browser, or it took longer than ten "
             "minutes: sign in again.",
    "denied": "GitHub sent you back without signing you in: sign in again and authorize "
              "the App.",
    "github": "GitHub did not confirm who you are, so you are not signed in: sign in again; "
              "if it keeps failing, the operator should check HANGAR_CLIENT_ID and "
              "HANGAR_CLIENT_SECRET against the App's settings.",
}
SIGN_IN_WITH_GITHUB = "Sign in with GitHub"
SIGN_IN_TOKEN = "A hangar API token with the read scope"
SIGN_IN_HINT = "Sign in with GitHub to see the work on repositories you can read."
NOT_FOUND = ("No job here, or not one you can see: jobs are shown to people who can read "
             "their repository on GitHub.")
SIGNED_IN_AS = "Signed in as"
SIGN_OUT = "Sign out"
OPERATOR = "Signed in with an operator's token"


def job_link(public_url: str | None, job_id: str) -> str | None:
    """The job page's address, for the status comment and check runs' `details_url`; None
    without a public URL (no page a person on GitHub could reach)."""
    return f"{public_url.rstrip('/')}/jobs/{job_id}" if public_url else None


VIEW_JOB = "View job"


def sign_in_problem(code: str) -> str:
    return SIGN_IN_PROBLEMS[code]


JOB_SECTIONS = {
    "facts": "The job",
    "runs": "Runs",
    "verification": "Verification",
    "ranking": "Ranking of the attempts",
    "land": "Landing",
    "timeline": "Timeline",
}
JOB_FACTS = {
    "issue": "Asked on",
    "asked_by": "Asked by",
    "state": "State",
    "prompt": "Prompt",
    "attempts": "Attempts",
}
RUN_FACTS = {
    "where": "Attempt.turn",
    "kind": "Kind",
    "harness": "Harness",
    "now": "Where it is",
    "ended": "How it ended",
    "branch": "Branch",
    "pr": "Pull request",
    "checks": "Checks",
    "usage": "Model usage",
    "cost": "Cost",
    "prompt": "Prompt",
    "told_environment": "Instructions from hangar's operator (in the prompt)",
    "told_repository": "Instructions from the repository's .github/hangar.yml (in the prompt)",
    "tail": "The agent's last lines of output (secrets redacted)",
    "steps": "The agent's latest steps (unverified, from its event stream)",
    "says": "Agent says (unverified)",
}
NO_RUNS = "No run has started yet."
NO_TIMELINE = "Nothing has happened yet."
NO_LAND = "No land request: hangar lands a PR once a person with write access approves it."
NO_VERIFICATION = "Verification has not run yet."
NO_RANKING = "The attempts are ranked once every one of them has ended."
RANKING_COLUMNS = ["place", "attempt", "PR", "eligible", "why"]
PICKED = "picked"
DISCARDED = "not picked"
LAND_AWAITS = {
    "awaiting_approval": "a person's approving review of this head on GitHub",
    "waiting_ci": "the required checks on this head to pass",
    "updating": "the branch to be brought up to date with its base",
    "merging": "GitHub's answer to the merge",
}


def land_text(request: Any) -> str:
    """A land request in one plain line: its state in words, then why or the merge."""
    from app.render.landing import land_title

    text = land_title(request)
    if request.merge_sha:
        return f"{text} as {request.merge_sha[:7]}"
    return f"{text}: {request.reason}" if request.reason else text


def check_label(name: str, head_sha: str) -> str:
    """A check run link's text: its name and the commit it is on."""
    return f"{name} on {head_sha[:7]}" if head_sha else name


def land_awaits(state: str) -> str:
    """What a land request in `state` waits for ("" when it waits for nothing)."""
    return LAND_AWAITS.get(state, "")


def usage_text(agent: dict) -> str:
    """A turn's model usage from what the agent reported: tokens in and out, turns."""
    usage = agent.get("usage") or {}
    parts = []
    if usage.get("input_tokens") is not None:
        parts.append(f"{usage['input_tokens']} tokens in")
    if usage.get("output_tokens") is not None:
        parts.append(f"{usage['output_tokens']} out")
    if agent.get("turns") is not None:
        parts.append(f"{agent['turns']} model turn(s)")
    return ", ".join(parts) or "not reported"


# -- the fleet page's "what needs me" -------------------------------------------------------

NEEDS = {
    "reviews": "Pull requests waiting for your review",
    "blocked": "Pull requests blocked",
    "paused": "Paused model credentials",
    "failed_builds": "Environment builds that failed",
}
NOTHING_NEEDS_YOU = "Nothing needs you: no pull request waits for a review or is blocked, " \
                    "no credential is paused, no environment build failed."
REVIEW_WAITS = "verified; waits for an approving review from a person with write access"
OUTCOME_LANDED = "landed"
OUTCOME_CLOSED = "closed without landing"


def outcome_failed(cause: str) -> str:
    return f"failed: {cause}" if cause else "failed"


def picked_outcome(attempt: int, words: str) -> str:
    return f"attempt {attempt} picked: {words}"
