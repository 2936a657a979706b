"""Ranking the attempts of `/hangar try N`, by the seed's grade spec, best first.

Gates first: an attempt is eligible only with a pull request, a verification that did
not fail or fail to run (when the environment verifies), and CI that did not fail. Every
eligible attempt ranks above every ineligible one. Then, in order:
1. CI on the PR's head: passing, then pending or none;
2. hangar's verification: passed, then passed on a retry (flaky), then none defined;
3. the smaller diff (lines added plus deleted), then the fewer files;
4. the shorter run; then the attempt number, so the order is always the same.
Attempts equal on all but the last rule are ties, and called so. The agent's words play
no part.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from app.github import ci
from app.models import Run


class Gate(StrEnum):
    """Why an attempt is not eligible (worded by render)."""

    NO_PR = "no_pr"
    VERIFICATION_FAILED = "verification_failed"
    VERIFICATION_NOT_RUN = "verification_not_run"
    CI_FAILED = "ci_failed"


@dataclass(frozen=True)
class Ranked:
    place: int
    run: Run
    ci: str  # passed | failed | pending | none
    diff_lines: int
    why: str
    eligible: bool = True
    gates: tuple[Gate, ...] = ()  # the gates it failed
    tie_with: tuple[int, ...] = ()  # attempts equal to it on everything but time


def verification_rank(run: Run) -> int:
    v = run.verification
    if v is None:
        return 2  # the environment defines no verification: not a gate
    if v.passed:
        return 1 if v.flaky else 0
    return 3


CI_RANK = {"passed": 0, "pending": 1, "none": 1, "failed": 2}


def diff_lines(run: Run) -> int:
    files = (run.compare or {}).get("files", [])
    return sum(f.get("additions", 0) + f.get("deletions", 0) for f in files)


def diff_files(run: Run) -> int:
    return len((run.compare or {}).get("files", []))


def failed_gates(run: Run, ci: str) -> tuple[Gate, ...]:
    gates = []
    if run.pr_number is None:
        gates.append(Gate.NO_PR)
    v = run.verification
    if v is not None and v.passed is False:
        gates.append(Gate.VERIFICATION_FAILED)
    elif v is not None and v.passed is None:
        gates.append(Gate.VERIFICATION_NOT_RUN)
    if ci == "failed":
        gates.append(Gate.CI_FAILED)
    return tuple(gates)


def duration(run: Run) -> float:
    if run.finished_at is None:
        return float("inf")
    start = run.started_at if run.started_at is not None else run.finished_at
    return run.finished_at - start


def rank(runs: list[Run], ci: dict[int, str]) -> list[Ranked]:
    """`ci` maps an attempt number to its CI verdict on the PR head."""
    def grade(run: Run) -> tuple:
        verdict = ci.get(run.attempt, "none")
        return (bool(failed_gates(run, verdict)), run.pr_number is None, CI_RANK[verdict],
                verification_rank(run), diff_lines(run), diff_files(run))

    ordered = sorted(runs, key=lambda r: (grade(r), duration(r), r.attempt))
    ranked = []
    for i, r in enumerate(ordered):
        verdict = ci.get(r.attempt, "none")
        gates = failed_gates(r, verdict)
        ties = tuple(o.attempt for o in ordered if o is not r and grade(o) == grade(r))
        ranked.append(Ranked(place=i + 1, run=r, ci=verdict, diff_lines=diff_lines(r),
                             why=_why(r, verdict), eligible=not gates, gates=gates,
                             tie_with=ties))
    return ranked


def pass_rate(runs: list[Run]) -> tuple[int, int]:
    """Attempts whose verification passed, of those verified."""
    verified = [r for r in runs if r.verification is not None]
    return sum(1 for r in verified if r.verification.passed), len(verified)


def _why(run: Run, ci: str) -> str:
    if run.pr_number is None:
        return "no pull request"
    v = run.verification
    verified = ("verified" if v and v.passed and not v.flaky else
                "verified (flaky)" if v and v.passed else
                "verification failed" if v and v.passed is False else
                "verification could not run" if v else "not verified")
    return f"{verified}, CI {ci}, {diff_lines(run)} changed lines"


def ci_verdict(check_runs: list[dict], statuses: list[dict]) -> str:
    """passed | failed | pending | none for everything but hangar's own checks (others'
    checks under hangar's names are set aside too)."""
    return ci.ci_summary(ci.read(check_runs, statuses, own_app_id=None))
