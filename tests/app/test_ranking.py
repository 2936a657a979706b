"""The fixed ranking rules for `/hangar try N`, table-driven."""

from __future__ import annotations

import pytest

from app.commands import Answer
from app.fanout import ci_verdict, rank
from app.fanout.commands import pick_refusal
from app.fanout.ranking import Gate, pass_rate
from app.models import Run, RunStage, Verification


def attempt(n: int, *, passed=True, flaky=False, lines=10, pr=True, finished=100.0,
            files=1) -> Run:
    v = None if passed == "none" else Verification(
        command="t", head_sha="a" * 40, passed=passed, flaky=flaky, attempts=1)
    changed = [{"filename": f"x{i}", "additions": lines if i == 0 else 0, "deletions": 0}
               for i in range(files)]
    return Run(
        job_id="job-1", attempt=n, branch=f"hangar/1-ab-{n}", base_branch="main",
        stage=RunStage.DONE, verification=v, pr_number=10 + n if pr else None,
        started_at=0.0, finished_at=finished, compare={"files": changed})


@pytest.mark.parametrize(
    ("runs", "ci", "order"),
    [
        ([attempt(1, passed=False), attempt(2)], {}, [2, 1]),
        ([attempt(1, flaky=True), attempt(2)], {}, [2, 1]),
        ([attempt(1), attempt(2)], {1: "failed", 2: "passed"}, [2, 1]),
        ([attempt(1, lines=50), attempt(2, lines=5)], {}, [2, 1]),
        ([attempt(1, finished=200), attempt(2, finished=100)], {}, [2, 1]),
        ([attempt(1, pr=False), attempt(2, passed=False)], {}, [2, 1]),
        # no verification defined is no gate; one that failed is
        ([attempt(1, passed=False), attempt(2, passed="none")], {}, [2, 1]),
        ([attempt(1, passed=None), attempt(2, passed="none")], {}, [2, 1]),
        # CI is weighed before verification among the eligible; a failed CI is a gate
        ([attempt(1), attempt(2, flaky=True)], {2: "passed"}, [2, 1]),
        ([attempt(1, lines=1), attempt(2, lines=900)], {1: "failed"}, [2, 1]),
        # a failing one-liner never beats a passing rewrite
        ([attempt(1, lines=1, passed=False), attempt(2, lines=900)], {}, [2, 1]),
        ([attempt(1, files=3), attempt(2, files=1)], {}, [2, 1]),
        # equal grades: the shorter run, then the attempt number
        ([attempt(2), attempt(1)], {}, [1, 2]),
        ([attempt(1, lines=500), attempt(2, lines=1, passed=False), attempt(3, lines=90)],
         {1: "passed", 3: "pending"}, [1, 3, 2]),
    ],
)
def test_rank_order(runs, ci, order):
    assert [r.run.attempt for r in rank(runs, ci)] == order


@pytest.mark.parametrize(
    ("run", "ci", "gates"),
    [
        (attempt(1), "passed", ()),
        (attempt(1, passed="none"), "none", ()),
        (attempt(1), "pending", ()),
        (attempt(1, flaky=True), "none", ()),
        (attempt(1, passed=False), "none", (Gate.VERIFICATION_FAILED,)),
        (attempt(1, passed=None), "none", (Gate.VERIFICATION_NOT_RUN,)),
        (attempt(1), "failed", (Gate.CI_FAILED,)),
        (attempt(1, pr=False, passed=False), "none", (Gate.NO_PR, Gate.VERIFICATION_FAILED)),
    ],
)
def test_eligibility_is_the_gates(run, ci, gates):
    [ranked] = rank([run], {1: ci})
    assert ranked.gates == gates and ranked.eligible is (not gates)


def test_ties_are_called_ties_and_ordered_by_run_time():
    ranked = rank([attempt(1, finished=300), attempt(2, finished=100), attempt(3, lines=50)],
                  {})
    assert [(r.run.attempt, r.tie_with) for r in ranked] == [(2, (1,)), (1, (2,)), (3, ())]


def test_pass_rate_counts_the_verified_attempts():
    runs = [attempt(1), attempt(2, flaky=True), attempt(3, passed=False),
            attempt(4, passed="none")]
    assert pass_rate(runs) == (2, 3)


RANKING = [{"attempt": 2, "eligible": True}, {"attempt": 1, "eligible": False,
                                              "gates": ["verification_failed"]}]


@pytest.mark.parametrize(
    ("ranking", "n", "running", "force", "code"),
    [
        (RANKING, 2, False, False, None),
        (RANKING, 1, False, False, Answer.PICK_INELIGIBLE),
        (RANKING, 1, False, True, None),
        ([], 1, True, False, Answer.PICK_NOT_RANKED),
        ([], 1, True, True, None),
        ([], 1, False, False, None),  # nothing ranked once all finished: nothing to weigh
    ],
)
def test_a_pick_of_an_ineligible_attempt_needs_force(ranking, n, running, force, code):
    why = pick_refusal(ranking, n, running=running, force=force)
    assert (why.code if why else None) == code


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


# -- the repository's weights (`fanout.weights`) -------------------------------------------


@pytest.mark.parametrize(
    ("runs", "ci", "weights", "order", "scores"),
    [
        # a larger change may be wanted: weights can prefer it, the fixed order never does
        ([attempt(1, lines=5), attempt(2, lines=50)], {}, {"diff_lines": 0.01}, [2, 1],
         [0.5, 0.05]),
        ([attempt(1, lines=5), attempt(2, lines=50)], {}, {"diff_lines": -0.01}, [1, 2],
         [-0.05, -0.5]),
        # CI passed is worth what its weight says
        ([attempt(1), attempt(2)], {2: "passed"}, {"ci": 2, "verification": 1}, [2, 1],
         [3, 1]),
        # a flaky pass counts half
        ([attempt(1, flaky=True), attempt(2)], {}, {"verification": 1}, [2, 1], [1, 0.5]),
        # the gates stand: a failed verification ranks last whatever it scores
        ([attempt(1, passed=False, lines=900), attempt(2, lines=1)], {},
         {"diff_lines": 1}, [2, 1], [1, 900]),
        ([attempt(1, files=3), attempt(2, files=1)], {}, {"files": -1}, [2, 1], [-1, -3]),
        ([attempt(1, finished=600), attempt(2, finished=60)], {}, {"duration": -1}, [2, 1],
         [-1, -10]),
    ],
)
def test_weights_order_the_eligible_by_score(runs, ci, weights, order, scores):
    ranked = rank(runs, ci, weights)
    assert [r.run.attempt for r in ranked] == order
    assert [r.score for r in ranked] == scores
    assert all(name in weights and weights[name] == w for r in ranked for name, _, w in r.terms)


def test_equal_scores_are_ties_in_attempt_order_and_no_weights_is_the_fixed_order():
    runs = [attempt(1, lines=50, finished=10), attempt(2, lines=5, finished=900)]
    weighed = rank(runs, {}, {"verification": 1})
    assert [(r.run.attempt, r.score, r.tie_with) for r in weighed] == [
        (1, 1, (2,)), (2, 1, (1,))]
    assert [r.terms for r in weighed] == [(("verification", 1.0, 1),)] * 2
    fixed = rank(runs, {})
    assert [r.run.attempt for r in fixed] == [2, 1]
    assert all(r.score is None and r.terms == () for r in fixed)
