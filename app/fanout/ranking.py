"""Ranking the attempts of `/hangar try N` by fixed rules, best first.

1. hangar's verification passed (flaky passes after clean ones; could-not-run last);
2. CI on the PR's head: passing, then pending or none, then failing;
3. the smaller diff (lines added plus deleted);
4. the attempt that finished first.
An attempt without a PR ranks below every attempt with one. The agent's words play no part.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.github import ci
from app.models import Run


@dataclass(frozen=True)
class Ranked:
    place: int
    run: Run
    ci: str  # passed | failed | pending | none
    diff_lines: int
    why: str


def verification_rank(run: Run) -> int:
    v = run.verification
    if v is None or v.passed is None:
        return 3
    if v.passed:
        return 1 if v.flaky else 0
    return 2


CI_RANK = {"passed": 0, "pending": 1, "none": 1, "failed": 2}


def diff_lines(run: Run) -> int:
    files = (run.compare or {}).get("files", [])
    return sum(f.get("additions", 0) + f.get("deletions", 0) for f in files)


def rank(runs: list[Run], ci: dict[int, str]) -> list[Ranked]:
    """`ci` maps an attempt number to its CI verdict on the PR head."""
    def key(run: Run) -> tuple:
        return (run.pr_number is None, verification_rank(run),
                CI_RANK[ci.get(run.attempt, "none")], diff_lines(run),
                run.finished_at or float("inf"), run.attempt)

    ordered = sorted(runs, key=key)
    return [
        Ranked(place=i + 1, run=r, ci=ci.get(r.attempt, "none"), diff_lines=diff_lines(r),
               why=_why(r, ci.get(r.attempt, "none")))
        for i, r in enumerate(ordered)
    ]


def _why(run: Run, ci: str) -> str:
    if run.pr_number is None:
        return "no pull request"
    v = run.verification
    verified = ("verified" if v and v.passed and not v.flaky else
                "verified (flaky)" if v and v.passed else
                "verification failed" if v and v.passed is False else "not verified")
    return f"{verified}, CI {ci}, {diff_lines(run)} changed lines"


def ci_verdict(check_runs: list[dict], statuses: list[dict]) -> str:
    """passed | failed | pending | none for everything but hangar's own checks (others'
    checks under hangar's names are set aside too)."""
    return ci.ci_summary(ci.read(check_runs, statuses, own_app_id=None))
