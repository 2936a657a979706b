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

A repository may ask instead for the seed's weights (`fanout.weights`): the gates stand,
and the eligible attempts are ordered by their score, the sum of each weight times its
value (`score_terms`), higher first; equal scores are ties, in attempt order.
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
    # With weights: the score, and what it is the sum of: (value's name, value, weight).
    score: float | None = None
    terms: tuple[tuple[str, float, float], ...] = ()


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


def rank(runs: list[Run], ci: dict[int, str],
         weights: dict[str, float] | None = None) -> list[Ranked]:
    """`ci` maps an attempt number to its CI verdict on the PR head; `weights` (the
    repository's `fanout.weights`), when given, orders the eligible by score instead."""
    def terms(run: Run) -> tuple[tuple[str, float, float], ...]:
        return score_terms(run, ci.get(run.attempt, "none"), weights or {})

    def grade(run: Run) -> tuple:
        verdict = ci.get(run.attempt, "none")
        gated = (bool(failed_gates(run, verdict)), run.pr_number is None)
        if weights is not None:
            return (*gated, -score_of(terms(run)))
        return (*gated, CI_RANK[verdict], verification_rank(run), diff_lines(run),
                diff_files(run))

    def then(run: Run) -> float:
        return 0.0 if weights is not None else duration(run)

    ordered = sorted(runs, key=lambda r: (grade(r), then(r), r.attempt))
    ranked = []
    for i, r in enumerate(ordered):
        verdict = ci.get(r.attempt, "none")
        gates = failed_gates(r, verdict)
        ties = tuple(o.attempt for o in ordered if o is not r and grade(o) == grade(r))
        weighed = terms(r) if weights is not None else ()
        ranked.append(Ranked(place=i + 1, run=r, ci=verdict, diff_lines=diff_lines(r),
                             why=_why(r, verdict), eligible=not gates, gates=gates,
                             tie_with=ties, terms=weighed,
                             score=score_of(weighed) if weights is not None else None))
    return ranked


WEIGHED = ("ci", "verification", "diff_lines", "files", "duration")


def score_terms(run: Run, ci: str, weights: dict[str, float]) -> tuple[tuple[str, float,
                                                                             float], ...]:
    """(name, value, weight) of each value a nonzero weight counts, in the seed's order."""
    v = run.verification
    values = {
        "ci": 1.0 if ci == "passed" else 0.0,
        "verification": (0.5 if v.flaky else 1.0) if v is not None and v.passed else 0.0,
        "diff_lines": float(diff_lines(run)),
        "files": float(diff_files(run)),
        "duration": round(duration(run) / 60, 2) if run.finished_at is not None else 0.0,
    }
    return tuple((name, values[name], weights[name]) for name in WEIGHED
                 if weights.get(name))


def score_of(terms: tuple[tuple[str, float, float], ...]) -> float:
    return round(sum(value * weight for _, value, weight in terms), 4)


def pass_rate(runs: list[Run]) -> tuple[int, int]:
    """Attempts whose verification passed, of those verified."""
    verified = [r.verification for r in runs if r.verification is not None]
    return sum(1 for v in verified if v.passed), len(verified)


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
