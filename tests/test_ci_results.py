"""One vocabulary for CI results: every value GitHub describes is classified, the same
way for landing, ranking and auto-fix, and only hangar's own App counts under its names."""

from __future__ import annotations

import pytest

from app.fanout import ci_verdict
from app.github import ci
from app.github.ci import Outcome
from app.landing import checks_verdict
from tests.github_reference import openapi

OWN, OTHER = 7, 8


def _enum(schema: dict) -> set:
    return {e for e in schema.get("enum", []) if e is not None}


def _body(path: str, method: str) -> dict:
    op = openapi()["paths"][path][method]
    if method == "get":
        return op["responses"]["200"]["content"]["application/json"]["schema"]["properties"]
    return op["requestBody"]["content"]["application/json"]["schema"]["properties"]


def test_the_table_covers_every_value_github_describes():
    run = _body("/repos/{owner}/{repo}/check-runs/{check_run_id}", "get")
    listed = _body("/repos/{owner}/{repo}/commits/{ref}/check-runs", "get")[
        "check_runs"]["items"]["properties"]
    created = _body("/repos/{owner}/{repo}/check-runs", "post")
    suite = _body("/repos/{owner}/{repo}/commits/{ref}/check-suites", "get")[
        "check_suites"]["items"]["properties"]
    combined = _body("/repos/{owner}/{repo}/statuses/{sha}", "post")
    conclusions = set().union(*(_enum(p["conclusion"]) for p in (run, listed, created, suite)))
    statuses = set().union(*(_enum(p["status"]) for p in (run, listed, created, suite)))
    states = _enum(combined["state"])
    assert {"stale", "startup_failure", "action_required"} <= conclusions
    assert {"waiting", "requested", "pending"} <= statuses
    assert conclusions == set(ci.CONCLUSIONS)
    assert statuses == {*ci.UNFINISHED, "completed"}
    assert states == set(ci.STATES)


CONCLUSION_TABLE = [
    # conclusion, as anyone's check, as hangar's own (only success passes)
    ("success", Outcome.PASSED, Outcome.PASSED),
    ("neutral", Outcome.PASSED, Outcome.BLOCKED),
    ("skipped", Outcome.PASSED, Outcome.BLOCKED),
    ("failure", Outcome.FAILED, Outcome.FAILED),
    ("timed_out", Outcome.FAILED, Outcome.FAILED),
    ("startup_failure", Outcome.FAILED, Outcome.FAILED),
    ("cancelled", Outcome.BLOCKED, Outcome.BLOCKED),
    ("action_required", Outcome.BLOCKED, Outcome.BLOCKED),
    ("stale", Outcome.BLOCKED, Outcome.BLOCKED),
    ("a-word-github-adds-later", Outcome.BLOCKED, Outcome.BLOCKED),
]


@pytest.mark.parametrize(("conclusion", "anyone", "own"), CONCLUSION_TABLE)
def test_each_conclusion(conclusion, anyone, own):
    run = {"name": "x", "status": "completed", "conclusion": conclusion}
    assert ci.of_check_run(run) == anyone
    assert ci.of_check_run(run, strict=True) == own


@pytest.mark.parametrize("status", [*ci.UNFINISHED, None, "something-new"])
def test_an_unfinished_run_is_pending_whatever_its_conclusion(status):
    for conclusion in (None, "success"):
        run = {"name": "x", "status": status, "conclusion": conclusion}
        assert ci.of_check_run(run) == Outcome.PENDING


def test_completed_without_a_conclusion_is_not_a_pass():
    assert ci.of_check_run({"status": "completed", "conclusion": None}) == Outcome.PENDING


@pytest.mark.parametrize(("state", "outcome"), [
    ("success", Outcome.PASSED), ("failure", Outcome.FAILED), ("error", Outcome.FAILED),
    ("pending", Outcome.PENDING), ("", Outcome.BLOCKED), ("weird", Outcome.BLOCKED)])
def test_each_status_state(state, outcome):
    assert ci.of_status({"context": "x", "state": state}) == outcome


def crun(name, conclusion="success", app=OTHER, status="completed", slug="other-ci"):
    return {"name": name, "status": status, "conclusion": conclusion,
            "app": {"id": app, "slug": slug}}


# The three users agree: a table of commits, with what landing (hangar / verify and
# ci / test required), ranking (CI of the PR) and auto-fix (failures) make of each.
AGREEMENT = [
    ("all green", [crun("hangar / verify", app=OWN), crun("ci / test")], [],
     "passed", "passed"),
    ("stale CI", [crun("hangar / verify", app=OWN), crun("ci / test", "stale")], [],
     "failed", "failed"),
    ("startup_failure", [crun("hangar / verify", app=OWN), crun("ci / test", "startup_failure")],
     [], "failed", "failed"),
    ("Actions waiting",
     [crun("hangar / verify", app=OWN), crun("ci / test", None, status="waiting")], [],
     "pending", "pending"),
    ("skipped CI passes", [crun("hangar / verify", app=OWN), crun("ci / test", "skipped")], [],
     "passed", "passed"),
    ("a status error", [crun("hangar / verify", app=OWN)], [{"context": "ci / test",
                                                             "state": "error"}],
     "failed", "failed"),
]


@pytest.mark.parametrize(("case", "runs", "statuses", "landing", "ranking"), AGREEMENT,
                         ids=[a[0] for a in AGREEMENT])
def test_landing_and_ranking_agree(case, runs, statuses, landing, ranking):
    verdict, _ = checks_verdict(["hangar / verify", "ci / test"], runs, statuses,
                                own_app_id=OWN)
    assert verdict == landing
    assert ci_verdict(runs, statuses) == ranking


# -- hangar's names ----------------------------------------------------------------------

@pytest.mark.parametrize(("case", "runs", "statuses", "expected"), [
    ("another App's success does not override hangar's failure",
     [crun("hangar / verify", "failure", app=OWN), crun("hangar / verify", "success")], [],
     ("failed", ["hangar / verify"])),
    ("another App's success alone is as if nothing reported",
     [crun("hangar / verify", "success")], [], ("pending", ["hangar / verify"])),
    ("a commit status named hangar / verify counts for nothing",
     [], [{"context": "hangar / verify", "state": "success"}], ("pending", ["hangar / verify"])),
    ("a run without an App counts for nothing",
     [{"name": "hangar / verify", "status": "completed", "conclusion": "success"}], [],
     ("pending", ["hangar / verify"])),
    ("hangar's own neutral is no pass",
     [crun("hangar / verify", "neutral", app=OWN)], [], ("failed", ["hangar / verify"])),
    ("hangar's own success passes", [crun("hangar / verify", app=OWN)], [], ("passed", [])),
    ("another App's look-alike name (case) stands in for nothing",
     [crun("hangar / verify", "failure", app=OWN), crun("Hangar / Verify", "success")], [],
     ("failed", ["hangar / verify"])),
    ("another App's look-alike name (spacing) stands in for nothing",
     [crun("hangar / verify", "failure", app=OWN), crun("hangar  / verify ", "success")], [],
     ("failed", ["hangar / verify"])),
    ("another App's look-alike name (no-break space) stands in for nothing",
     [crun("hangar / verify", "failure", app=OWN), crun("hangar\xa0/ verify", "success")], [],
     ("failed", ["hangar / verify"])),
    ("another App's look-alike name (Cyrillic a) stands in for nothing",
     [crun("hangar / verify", "failure", app=OWN), crun("h\u0430ngar / verify", "success")], [],
     ("failed", ["hangar / verify"])),
    ("across Apps the worst stands for other names",
     [crun("ci / test", "failure"), crun("ci / test", "success", app=99)], [],
     ("failed", ["ci / test"])),
    ("a success painted over a failing status does not count",
     [crun("ci / test", "success", app=99)], [{"context": "ci / test", "state": "failure"}],
     ("failed", ["ci / test"])),
    ("one App's re-run success stands",
     [crun("ci / test", "failure"), crun("ci / test", "success")], [], ("passed", [])),
])
def test_only_hangars_own_app_counts_for_hangars_names(case, runs, statuses, expected):
    assert checks_verdict([r for r in dict.fromkeys(
        [*(x["name"] for x in runs), *(s["context"] for s in statuses)])], runs, statuses,
        own_app_id=OWN) == expected, case


def test_impostors_are_named_once_and_as_code():
    runs = [crun("hangar / verify", slug="evil[x](http://e)")] * 2
    results = ci.read(runs, [{"context": "hangar / land", "state": "success",
                              "creator": {"login": "mallory"}}], own_app_id=OWN)
    assert results.outcomes == {}
    assert results.impostors == [
        "check run `hangar / verify` from App `evil[x](http://e)` (id 8)",
        "commit status `hangar / land` set by `mallory`"]


def test_ranking_ignores_hangars_names_whoever_reports_them():
    assert ci_verdict([crun("hangar / verify", "failure")], [
        {"context": "hangar / land", "state": "failure"}]) == "none"
