"""The pure rules of landing: which approvals count, which checks pass, what is sensitive,
what protects a branch, and what check run `hangar / land` says for each state."""

from __future__ import annotations

import pytest

from app.landing import (
    LandState,
    ReviewRecord,
    approval_verdict,
    checks_verdict,
    gate_report,
    land_check_status,
    required_from_rules,
    sensitive_files,
)
from app.repoconfig import LandPolicy

HEAD = "a" * 40
OLD = "b" * 40
APP_ID = 7


def review(user="rita", state="approved", commit_id=HEAD, user_type="User", dismissed=False):
    return ReviewRecord(id=1, user=user, user_type=user_type, state=state, commit_id=commit_id,
                        dismissed=dismissed)


# -- approval_verdict ----------------------------------------------------------------

@pytest.mark.parametrize(
    ("case", "rev", "permission", "policy", "why"),
    [
        ("approval of the head by a writer", review(), "write", LandPolicy(), None),
        ("admin counts", review(), "admin", LandPolicy(), None),
        ("maintain counts", review(), "maintain", LandPolicy(), None),
        ("webhook state is lowercase, REST uppercase", review(state="APPROVED"), "write",
         LandPolicy(), None),
        ("a comment is no approval", review(state="commented"), "write", LandPolicy(),
         "it is not an approval"),
        ("changes requested", review(state="changes_requested"), "write", LandPolicy(),
         "it is not an approval"),
        ("a bot by type", review(user="renovate", user_type="Bot"), "write", LandPolicy(),
         "is a bot"),
        ("a bot by login", review(user="dependabot[bot]"), "write", LandPolicy(), "is a bot"),
        ("the requester", review(user="mona"), "write", LandPolicy(),
         "asked for this work"),
        ("the requester when self-approval is allowed", review(user="mona"), "write",
         LandPolicy(forbid_self_approval=False), None),
        ("read access", review(user="rick"), "read", LandPolicy(), "does not have write access"),
        ("no access", review(user="eve"), "none", LandPolicy(), "does not have write access"),
        ("an older head", review(commit_id=OLD), "write", LandPolicy(),
         "approved `bbbbbbb`, but the head is now `aaaaaaa`"),
        ("no commit id", review(commit_id=None), "write", LandPolicy(), "approved `unknown`"),
        ("dismissed on GitHub", review(dismissed=True), "write", LandPolicy(),
         "approval was dismissed"),
        ("dismissed by a push: the head is the reason", review(commit_id=OLD, dismissed=True),
         "write", LandPolicy(), "but the head is now"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_approval_verdict(case, rev, permission, policy, why):
    verdict = approval_verdict(rev, head_sha=HEAD, requester="mona", permission=permission,
                               policy=policy)
    if why is None:
        assert verdict is None, case
    else:
        assert verdict is not None and why in verdict, (case, verdict)


def test_a_requesting_bot_is_refused_as_a_bot_first():
    verdict = approval_verdict(review(user="dependabot[bot]"), head_sha=HEAD,
                               requester="dependabot[bot]", permission="write",
                               policy=LandPolicy())
    assert "is a bot" in verdict


# -- checks_verdict ------------------------------------------------------------------

def run(name, conclusion=None, status="completed"):
    return {"name": name, "status": status, "conclusion": conclusion}


def status(context, state):
    return {"context": context, "state": state}


@pytest.mark.parametrize(
    ("case", "required", "runs", "statuses", "expected"),
    [
        ("nothing required", [], [], [], ("passed", [])),
        ("a passing run", ["ci / test"], [run("ci / test", "success")], [], ("passed", [])),
        ("neutral and skipped pass", ["a", "b"], [run("a", "neutral"), run("b", "skipped")], [],
         ("passed", [])),
        ("a failing run", ["ci / test"], [run("ci / test", "failure")], [],
         ("failed", ["ci / test"])),
        ("timed out fails", ["t"], [run("t", "timed_out")], [], ("failed", ["t"])),
        ("cancelled fails", ["t"], [run("t", "cancelled")], [], ("failed", ["t"])),
        ("a running run", ["ci / test"], [run("ci / test", status="in_progress")], [],
         ("pending", ["ci / test"])),
        ("never reported", ["ci / lint"], [run("ci / test", "success")], [],
         ("pending", ["ci / lint"])),
        ("unreported are named before running", ["run", "gone"],
         [run("run", status="queued")], [], ("pending", ["gone", "run"])),
        ("a failure wins over pending", ["a", "b"], [run("a", "failure")], [],
         ("failed", ["a"])),
        ("a re-run success stands", ["t"], [run("t", "failure"), run("t", "success")], [],
         ("passed", [])),
        ("a status success", ["ci/legacy"], [], [status("ci/legacy", "success")],
         ("passed", [])),
        ("a status pending", ["ci/legacy"], [], [status("ci/legacy", "pending")],
         ("pending", ["ci/legacy"])),
        ("a status error fails", ["ci/legacy"], [], [status("ci/legacy", "error")],
         ("failed", ["ci/legacy"])),
        ("a status failure fails", ["ci/legacy"], [], [status("ci/legacy", "failure")],
         ("failed", ["ci/legacy"])),
        ("unrequired failures do not matter", ["a"], [run("a", "success"), run("b", "failure")],
         [status("c", "error")], ("passed", [])),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_checks_verdict(case, required, runs, statuses, expected):
    assert checks_verdict(required, runs, statuses) == expected, case


# -- required_from_rules ---------------------------------------------------------------

def test_required_from_rules_reads_every_required_status_checks_rule_once():
    rules = [
        {"type": "deletion"},
        {"type": "pull_request", "parameters": {"required_approving_review_count": 1}},
        {"type": "required_status_checks", "parameters": {"required_status_checks": [
            {"context": "ci / test"}, {"context": "lint", "integration_id": 3}]}},
        {"type": "required_status_checks", "parameters": {"required_status_checks": [
            {"context": "ci / test"}, {"context": "hangar / verify"}]}},
    ]
    assert required_from_rules(rules) == ["ci / test", "lint", "hangar / verify"]
    assert required_from_rules([]) == []
    assert required_from_rules([{"type": "required_status_checks"}]) == []


# -- sensitive_files -------------------------------------------------------------------

DEFAULTS = LandPolicy().sensitive_paths


@pytest.mark.parametrize(
    ("path", "patterns", "sensitive"),
    [
        (".github/workflows/x.yml", DEFAULTS, True),
        (".github/hangar.yml", DEFAULTS, True),
        ("Dockerfile", DEFAULTS, True),
        ("Dockerfile.dev", DEFAULTS, True),
        ("services/api/Dockerfile", DEFAULTS, True),
        ("deploy/prod/values.yaml", DEFAULTS, True),
        ("keys/server.pem", DEFAULTS, True),
        ("calc.py", DEFAULTS, False),
        ("docs/github/readme.md", DEFAULTS, False),
        ("src/deploy/x.py", DEFAULTS, False),  # deploy/** is anchored at the root
        ("not.github/x", DEFAULTS, False),
        ("src/app.py", ["src/*.py"], True),
        ("src/sub/app.py", ["src/*.py"], False),  # * stays inside one directory
        ("src/sub/app.py", ["src/**/*.py"], True),
        ("src/app.py", ["src/**/*.py"], True),  # ** may be no directory at all
        ("secrets.yml", ["**/secrets.yml"], True),
        ("a/b/secrets.yml", ["**/secrets.yml"], True),
        ("pyproject.toml", ["pyproject.toml"], True),
        ("tools/pyproject.toml", ["/pyproject.toml"], False),  # a leading slash anchors
        ("infra/main.tf", ["infra/"], True),
    ],
)
def test_sensitive_paths(path, patterns, sensitive):
    compare = {"files": [{"filename": path}]}
    assert sensitive_files(compare, patterns) == ([path] if sensitive else [])


def test_sensitive_files_keeps_the_diff_order_and_copes_with_no_compare():
    compare = {"files": [{"filename": n} for n in ("b.py", ".github/ci.yml", "Dockerfile")]}
    assert sensitive_files(compare, DEFAULTS) == [".github/ci.yml", "Dockerfile"]
    assert sensitive_files(None, DEFAULTS) == []
    assert sensitive_files({"files": []}, DEFAULTS) == []


# -- gate_report -----------------------------------------------------------------------

PROTECTED = [
    {"type": "deletion", "ruleset_id": 1},
    {"type": "non_fast_forward", "ruleset_id": 1},
    {"type": "pull_request", "ruleset_id": 1, "parameters": {
        "required_approving_review_count": 1, "dismiss_stale_reviews_on_push": True}},
    {"type": "required_status_checks", "ruleset_id": 1, "parameters": {
        "required_status_checks": [{"context": "ci / test"}]}},
]


def test_gate_report_of_a_well_protected_branch_is_all_ok():
    lines = gate_report(PROTECTED, [{"id": 1, "name": "main", "bypass_actors": []}], APP_ID)
    assert all(ok for ok, _ in lines), lines
    text = "\n".join(line for _, line in lines)
    for expected in ("pull request required", "1 approving review(s) required",
                     "stale approvals dismissed on push", "required checks: ci / test",
                     "force pushes blocked", "deletion blocked", "hangar is not a bypass actor"):
        assert expected in text


def test_gate_report_of_a_bare_branch_names_each_fix():
    lines = gate_report([], [], APP_ID)
    missing = [line for ok, line in lines if not ok]
    assert len(missing) == 6
    assert any("add one to a branch ruleset" in m for m in missing)
    assert any("required_approving_review_count" in m for m in missing)
    assert any("dismiss_stale_reviews_on_push" in m for m in missing)
    assert any("required_status_checks" in m for m in missing)
    assert any("non_fast_forward" in m for m in missing)
    assert any("deletion rule" in m for m in missing)
    assert (True, "hangar is not a bypass actor") in lines


@pytest.mark.parametrize(
    ("ruleset", "bypass"),
    [
        ({"bypass_actors": [{"actor_type": "Integration", "actor_id": APP_ID,
                             "bypass_mode": "always"}]}, True),
        ({"bypass_actors": [{"actor_type": "Integration", "actor_id": APP_ID + 1,
                             "bypass_mode": "always"}]}, False),
        ({"bypass_actors": [{"actor_type": "RepositoryRole", "actor_id": APP_ID,
                             "bypass_mode": "always"}]}, False),
        ({"current_user_can_bypass": "always"}, True),
        ({"current_user_can_bypass": "pull_requests_only"}, True),
        ({"current_user_can_bypass": "never"}, False),
    ],
)
def test_gate_report_finds_hangar_in_the_bypass_list(ruleset, bypass):
    lines = gate_report(PROTECTED, [{"id": 1, "name": "main", **ruleset}], APP_ID)
    ok, line = lines[-1]
    assert ok is not bypass
    assert ("bypass actor of ruleset 'main'" in line) is bypass


def test_gate_report_takes_the_strictest_pull_request_rule():
    rules = [
        {"type": "pull_request", "parameters": {"required_approving_review_count": 0}},
        {"type": "pull_request", "parameters": {"required_approving_review_count": 2,
                                                "dismiss_stale_reviews_on_push": True}},
    ]
    lines = dict((line, ok) for ok, line in gate_report(rules, [], APP_ID))
    assert lines["2 approving review(s) required"] is True
    assert lines["stale approvals dismissed on push"] is True


# -- land_check_status -----------------------------------------------------------------

@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (LandState.QUEUED, ("in_progress", None)),
        (LandState.UPDATING, ("in_progress", None)),
        (LandState.WAITING_CI, ("in_progress", None)),
        (LandState.AWAITING_APPROVAL, ("in_progress", None)),
        (LandState.MERGING, ("in_progress", None)),
        (LandState.LANDED, ("completed", "success")),
        (LandState.CONFLICT, ("completed", "failure")),
        (LandState.CI_FAILED, ("completed", "failure")),
        (LandState.REJECTED, ("completed", "failure")),
        (LandState.FAILED, ("completed", "failure")),
        (LandState.CANCELLED, ("completed", "cancelled")),
    ],
)
def test_land_check_status(state, expected):
    assert land_check_status(state) == expected


def test_every_state_has_a_consistent_check_status():
    for state in LandState:
        status, conclusion = land_check_status(state)
        assert (status == "completed") == (conclusion is not None)


# -- hangar doctor: the installation's permissions -------------------------------------

@pytest.mark.parametrize(
    ("granted", "ok", "named"),
    [
        ({"contents": "write", "pull_requests": "write", "checks": "write",
          "metadata": "read"}, True, []),
        ({"contents": "admin", "pull_requests": "write", "checks": "write"}, True, []),
        ({"contents": "read", "pull_requests": "write", "checks": "write"}, False,
         ["contents: write"]),
        ({}, False, ["contents: write", "pull_requests: write", "checks: write"]),
    ],
)
def test_doctor_permission_report(granted, ok, named):
    from app.doctor import permission_report

    verdict, line = permission_report(granted)
    assert verdict is ok
    for name in named:
        assert name in line
    if not ok:
        assert "accept the new permissions" in line


# -- GitHub's refusal, on one line -------------------------------------------------------

@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("Repository rule violations found\n\nAt least 2 approving reviews are required by "
         "reviewers with write access.\n\n",
         "Repository rule violations found: At least 2 approving reviews are required by "
         "reviewers with write access"),
        ("Repository rule violations found\n\nA.\nB.\n",
         "Repository rule violations found: A; B"),
        ("Pull Request is not mergeable", "Pull Request is not mergeable"),
        ("", "no reason given"),
    ],
)
def test_one_line(message, expected):
    from app.landing import one_line

    assert one_line(message) == expected
