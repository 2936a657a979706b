"""What a CI result means, in one place: every check run status and conclusion and every
commit status state GitHub sends, classified once for landing, ranking and auto-fix.

Names starting `hangar / ` are hangar's: only check runs of hangar's own App count under
them. Another App's check run, or any commit status, with such a name is an impostor: it
is set aside and said once, never counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from app.render import code_span

OWN_PREFIX = "hangar / "


class Outcome(StrEnum):
    PASSED = "passed"  # success; neutral and skipped too, as GitHub's required checks take them
    FAILED = "failed"  # the code or its checks failed: something a new commit may fix
    BLOCKED = "blocked"  # neither passed nor the code's fault: a person must act
    PENDING = "pending"  # not finished yet


# Check run and check suite conclusions (GitHub's full list; `stale` and
# `startup_failure` are GitHub's own, never set by an App).
CONCLUSIONS: dict[str, Outcome] = {
    "success": Outcome.PASSED,
    "neutral": Outcome.PASSED,
    "skipped": Outcome.PASSED,
    "failure": Outcome.FAILED,
    "timed_out": Outcome.FAILED,
    "startup_failure": Outcome.FAILED,  # the workflow file itself is broken
    "cancelled": Outcome.BLOCKED,  # someone (or a concurrency group) stopped it
    "action_required": Outcome.BLOCKED,  # waits for a person (e.g. approve a workflow)
    "stale": Outcome.BLOCKED,  # incomplete for 14 days; GitHub gave up on it
}
# Check run statuses other than `completed` (waiting, requested and pending are Actions').
UNFINISHED = ("queued", "in_progress", "waiting", "requested", "pending")
# Commit status states.
STATES: dict[str, Outcome] = {
    "success": Outcome.PASSED,
    "failure": Outcome.FAILED,
    "error": Outcome.FAILED,
    "pending": Outcome.PENDING,
}
# Worst first: across sources, the worst result of a name is its result.
SEVERITY = (Outcome.FAILED, Outcome.BLOCKED, Outcome.PENDING, Outcome.PASSED)


def of_check_run(run: dict[str, Any], *, strict: bool = False) -> Outcome:
    """One check run's outcome. `strict`: only `success` passes (hangar's own checks,
    whose neutral or skipped would mean they did not really run)."""
    if run.get("status") != "completed" or run.get("conclusion") is None:
        return Outcome.PENDING
    outcome = CONCLUSIONS.get(run["conclusion"], Outcome.BLOCKED)  # an unknown word never passes
    if strict and outcome == Outcome.PASSED and run["conclusion"] != "success":
        return Outcome.BLOCKED
    return outcome


def of_status(status: dict[str, Any]) -> Outcome:
    return STATES.get(status.get("state") or "", Outcome.BLOCKED)


def is_hangars_name(name: str) -> bool:
    return name.startswith(OWN_PREFIX)


def worst(outcomes: list[Outcome]) -> Outcome | None:
    return min(outcomes, key=SEVERITY.index) if outcomes else None


@dataclass
class Results:
    """Each check's outcome by name, and the impostors that were set aside."""

    outcomes: dict[str, Outcome] = field(default_factory=dict)
    impostors: list[str] = field(default_factory=list)

    def others(self) -> dict[str, Outcome]:
        """Everything but hangar's own checks (what "CI" means in ranking)."""
        return {n: o for n, o in self.outcomes.items() if not is_hangars_name(n)}


def read(check_runs: list[dict], statuses: list[dict], *, own_app_id: int | None) -> Results:
    """The outcome of every named check on one commit.

    Within one source (an App, or commit statuses) a success of a re-run stands; across
    sources the worst stands, so a second App cannot paint over another's failure.
    """
    by_source: dict[str, dict[Any, list[Outcome]]] = {}
    impostors: list[str] = []
    for run in check_runs:
        name = run.get("name") or ""
        app = (run.get("app") or {}).get("id")
        if is_hangars_name(name) and app != own_app_id:
            slug = (run.get("app") or {}).get("slug") or "an unknown App"
            impostors.append(f"check run {code_span(name)} from App {code_span(slug)} "
                             f"(id {int(app) if isinstance(app, int) else 'unknown'})")
            continue
        outcome = of_check_run(run, strict=is_hangars_name(name))
        by_source.setdefault(name, {}).setdefault(("app", app), []).append(outcome)
    for status in statuses:
        name = status.get("context") or ""
        if is_hangars_name(name):
            who = (status.get("creator") or {}).get("login") or "someone"
            impostors.append(f"commit status {code_span(name)} set by {code_span(who)}")
            continue
        by_source.setdefault(name, {}).setdefault("status", []).append(of_status(status))
    results = Results(impostors=list(dict.fromkeys(impostors)))
    for name, sources in by_source.items():
        per_source = [Outcome.PASSED if Outcome.PASSED in found else worst(found)
                      for found in sources.values()]
        results.outcomes[name] = worst([o for o in per_source if o is not None])  # type: ignore[assignment]
    return results


def verdict(required: list[str], results: Results) -> tuple[str, list[str]]:
    """("passed" | "failed" | "pending", names) for the required checks.

    Failed and blocked checks both fail; pending names list the checks nobody has
    reported first, then those still running.
    """
    got = results.outcomes
    failed = [n for n in required if got.get(n) in (Outcome.FAILED, Outcome.BLOCKED)]
    if failed:
        return "failed", failed
    unreported = [n for n in required if n not in got]
    running = [n for n in required if got.get(n) == Outcome.PENDING]
    if unreported or running:
        return "pending", [*unreported, *running]
    return "passed", []


def ci_summary(results: Results) -> str:
    """passed | failed | pending | none over everything but hangar's own checks."""
    found = worst(list(results.others().values()))
    if found is None:
        return "none"
    return {Outcome.FAILED: "failed", Outcome.BLOCKED: "failed", Outcome.PENDING: "pending",
            Outcome.PASSED: "passed"}[found]
