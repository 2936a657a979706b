"""The fixed ranking rules for `/hangar try N`, table-driven."""

from __future__ import annotations

import pytest

from app.fanout import ci_verdict, rank
from app.models import Run, RunStage, Verification


def attempt(n: int, *, passed=True, flaky=False, lines=10, pr=True, finished=100.0) -> Run:
    v = None if passed == "none" else Verification(
        command="t", head_sha="a" * 40, passed=passed, flaky=flaky, attempts=1)
    return Run(
        job_id="job-1", attempt=n, branch=f"hangar/1-ab-{n}", base_branch="main",
        stage=RunStage.DONE, verification=v, pr_number=10 + n if pr else None,
        finished_at=finished, compare={"files": [{"filename": "x", "additions": lines,
                                                  "deletions": 0}]})


@pytest.mark.parametrize(
    ("runs", "ci", "order"),
    [
        ([attempt(1, passed=False), attempt(2)], {}, [2, 1]),
        ([attempt(1, flaky=True), attempt(2)], {}, [2, 1]),
        ([attempt(1), attempt(2)], {1: "failed", 2: "passed"}, [2, 1]),
        ([attempt(1, lines=50), attempt(2, lines=5)], {}, [2, 1]),
        ([attempt(1, finished=200), attempt(2, finished=100)], {}, [2, 1]),
        ([attempt(1, pr=False), attempt(2, passed=False)], {}, [2, 1]),
        ([attempt(1, passed="none"), attempt(2, passed=False)], {}, [2, 1]),
        ([attempt(1, lines=500), attempt(2, lines=1, passed=False), attempt(3, lines=90)],
         {1: "passed", 3: "pending"}, [1, 3, 2]),
    ],
)
def test_rank_order(runs, ci, order):
    assert [r.run.attempt for r in rank(runs, ci)] == order


def test_rank_says_why():
    ranked = rank([attempt(1), attempt(2, passed=False, pr=False)], {1: "passed"})
    assert ranked[0].why == "verified, CI passed, 10 changed lines"
    assert ranked[1].why == "no pull request"


@pytest.mark.parametrize(
    ("checks", "statuses", "verdict"),
    [
        ([], [], "none"),
        ([{"name": "hangar / verify", "status": "completed", "conclusion": "failure"}], [],
         "none"),
        ([{"name": "ci / test", "status": "completed", "conclusion": "success"}], [],
         "passed"),
        ([{"name": "ci / test", "status": "in_progress", "conclusion": None}], [], "pending"),
        ([{"name": "ci / test", "status": "completed", "conclusion": "success"}],
         [{"context": "lint", "state": "failure"}], "failed"),
        ([], [{"context": "lint", "state": "pending"}], "pending"),
    ],
)
def test_ci_verdict(checks, statuses, verdict):
    assert ci_verdict(checks, statuses) == verdict
