"""The pure rules of landing: which approvals count, which checks pass, what is sensitive,
what protects a branch, and what check run `hangar / land` says for each state."""

from __future__ import annotations

import pytest

from app.github.ci import Outcome
from app.github.ops import RepoOps, same_repository
from app.landing import (
    LandState,
    ReviewRecord,
    approval_verdict,
    checks_verdict,
    closing_references,
    file_list_gap,
    gate_report,
    land_check_status,
    required_from_rules,
    verification_outcome,
)
from app.models import Verification
from app.repoconfig import LandPolicy
from app.sensitive import UNSEEN, sensitive_files, sensitive_names

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
        ("given while the PR went into another base",
         review().model_copy(update={"before_base": "dev"}), "write", LandPolicy(),
         "approved it going into `dev`, and its base branch has changed"),
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


@pytest.mark.parametrize(
    ("case", "user", "askers", "makers", "unknown", "policy", "why"),
    [
        ("a writer who asked for nothing and made nothing", "rita", {"sam"}, {"pat"}, None,
         LandPolicy(), None),
        ("asked for a follow-up or review turn, or pressed Fix", "sam", {"sam"}, set(), None,
         LandPolicy(), "asked for a turn on this pull request"),
        ("a turn's asker when self-approval is allowed", "sam", {"sam"}, set(), None,
         LandPolicy(forbid_self_approval=False), None),
        ("pushed or made a commit", "pat", set(), {"pat"}, None, LandPolicy(),
         "pushed to this branch or made a commit on it"),
        ("a maker even when self-approval is allowed", "pat", set(), {"pat"}, None,
         LandPolicy(forbid_self_approval=False), "pushed to this branch"),
        ("the makers cannot all be known", "rita", set(), set(), "more than GitHub lists",
         LandPolicy(), "more than GitHub lists"),
        ("logins ignore case: an asker", "Sam", {"sam"}, set(), None, LandPolicy(),
         "asked for a turn"),
        ("logins ignore case: a maker", "pat", set(), {"PAT"}, None, LandPolicy(),
         "pushed to this branch"),
        ("logins ignore case: the requester", "MONA", set(), set(), None, LandPolicy(),
         "asked for this work"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_who_asked_or_made_the_work_may_not_approve_it(case, user, askers, makers, unknown,
                                                      policy, why):
    verdict = approval_verdict(review(user=user), head_sha=HEAD, requester="mona",
                               permission="write", policy=policy, askers=askers, makers=makers,
                               makers_unknown=unknown)
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


def test_a_rename_out_of_a_sensitive_path_is_sensitive():
    files = [{"filename": "docs/ci.yml", "previous_filename": ".github/workflows/ci.yml"}]
    assert sensitive_names(files, DEFAULTS) == [".github/workflows/ci.yml"]


def test_a_compare_cut_at_300_files_says_more_may_hide():
    compare = {"files": [{"filename": f"a/{i:03}"} for i in range(300)]}
    assert sensitive_files(compare, DEFAULTS) == [UNSEEN]
    compare["files"].pop()
    assert sensitive_files(compare, DEFAULTS) == []


@pytest.mark.parametrize(("listed", "changed", "gap"), [
    (12, 12, None),
    (2999, 2999, None),
    (300, 301, "GitHub listed 300 of the 301 changed files"),
    (3000, 3000, "3000 files or more"),
    (3000, 4500, "GitHub listed 3000 of the 4500 changed files"),
    (5, None, None),
])
def test_file_list_gap(listed, changed, gap):
    found = file_list_gap(listed, changed)
    assert (found is None) if gap is None else (gap in found)


# -- gate_report -----------------------------------------------------------------------

PROTECTED = [
    {"type": "deletion", "ruleset_id": 1},
    {"type": "non_fast_forward", "ruleset_id": 1},
    {"type": "pull_request", "ruleset_id": 1, "parameters": {
        "required_approving_review_count": 1, "dismiss_stale_reviews_on_push": True,
        "require_last_push_approval": True}},
    {"type": "required_status_checks", "ruleset_id": 1, "parameters": {
        "required_status_checks": [{"context": "ci / test"}]}},
]


def test_gate_report_of_a_well_protected_branch_is_all_ok():
    lines = gate_report(PROTECTED, [{"id": 1, "name": "main", "bypass_actors": []}], APP_ID)
    assert all(ok for ok, _ in lines), lines
    text = "\n".join(line for _, line in lines)
    for expected in ("pull request required", "1 approving review(s) required",
                     "stale approvals dismissed on push", "required checks: ci / test",
                     "force pushes blocked", "deletion blocked", "hangar is not a bypass actor",
                     "the most recent push needs someone else's approval"):
        assert expected in text


@pytest.mark.parametrize(("rules", "classic", "ok"), [
    ([{"type": "pull_request", "parameters": {"require_last_push_approval": True}}], None, True),
    ([{"type": "pull_request", "parameters": {"require_last_push_approval": False}}], None,
     False),
    ([], {"required_pull_request_reviews": {"require_last_push_approval": True}}, True),
    ([], {"required_pull_request_reviews": {"require_last_push_approval": False}}, False),
    ([], {"required_status_checks": {}}, False),
])
def test_gate_report_says_whether_the_last_push_needs_another_approval(rules, classic, ok):
    lines = gate_report(rules, [], APP_ID, classic)
    found = [(good, line) for good, line in lines if "recent push" in line or "last" in line]
    assert len(found) == 1 and found[0][0] is ok, found
    if not ok:
        assert "require_last_push_approval" in found[0][1]


def test_gate_report_of_a_bare_branch_names_each_fix():
    lines = gate_report([], [], APP_ID)
    missing = [line for ok, line in lines if not ok]
    assert len(missing) == 7
    assert any("require_last_push_approval" in m for m in missing)
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


CLASSIC = {  # GitHub's GET …/branches/main/protection, trimmed to what hangar reads
    "required_status_checks": {"strict": False, "contexts": ["ci / test"],
                               "checks": [{"context": "ci / test", "app_id": None},
                                          {"context": "lint", "app_id": 7}]},
    "required_pull_request_reviews": {"required_approving_review_count": 2,
                                      "dismiss_stale_reviews": True,
                                      "require_last_push_approval": True},
    "allow_force_pushes": {"enabled": False}, "allow_deletions": {"enabled": False},
}


def test_gate_report_of_a_branch_under_classic_protection_only_is_all_ok():
    lines = dict((line, ok) for ok, line in gate_report([], [], APP_ID, CLASSIC))
    assert all(lines.values()), lines
    for expected in ("pull request required", "2 approving review(s) required",
                     "stale approvals dismissed on push", "required checks: ci / test, lint",
                     "force pushes blocked", "deletion blocked",
                     "the most recent push needs someone else's approval"):
        assert expected in lines


@pytest.mark.parametrize(("classic", "approvals", "checks"), [
    (None, 1, ["hangar / verify"]),
    ({}, 1, ["hangar / verify"]),
    (CLASSIC, 2, ["hangar / verify", "ci / test", "lint"]),
    ({"required_pull_request_reviews": {"required_approving_review_count": 0}}, 1,
     ["hangar / verify"]),  # the repository's own policy never goes down
    ({"required_status_checks": {"contexts": ["hangar / verify", "e2e"], "checks": []}}, 1,
     ["hangar / verify", "e2e"]),
])
def test_the_land_policy_is_held_to_classic_protection(classic, approvals, checks):
    from app.landing import with_protection
    from app.repoconfig import LandPolicy

    held = with_protection(LandPolicy(required_checks=["hangar / verify"]), classic)
    assert held.required_approvals == approvals and held.required_checks == checks


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


# -- forks -------------------------------------------------------------------------------

def pull(number: int, head_repo: int | None, ref: str = "hangar/7-ab") -> dict:
    return {"number": number, "head": {"ref": ref, "repo": None if head_repo is None else {
        "id": head_repo, "full_name": "eve/widgets"}}, "base": {"ref": "main",
                                                                 "repo": {"id": 1}}}


@pytest.mark.parametrize(("case", "pr", "same"), [
    ("the base's own branch", pull(1, 1), True),
    ("a fork's branch", pull(2, 99), False),
    ("a deleted fork (GitHub sends head.repo null)", pull(3, None), False),
])
def test_same_repository(case, pr, same):
    assert same_repository(pr) is same, case


async def test_a_forks_branch_named_like_hangars_is_never_hangars_pr():
    from tests.test_autofix_rules import RecordingGitHub

    url = "/repos/acme/widgets/pulls?head=acme:hangar/7-ab&state=all"
    gh = RecordingGitHub({url: (200, "application/json", [pull(5, 99), pull(6, 1)])})
    assert (await RepoOps(gh, "acme/widgets").find_pr("hangar/7-ab"))["number"] == 6
    gh = RecordingGitHub({url: (200, "application/json", [pull(5, 99)])})
    assert await RepoOps(gh, "acme/widgets").find_pr("hangar/7-ab") is None


# -- closing keywords --------------------------------------------------------------------

@pytest.mark.parametrize(("message", "closes"), [
    ("Fix add()", []),
    ("Fix add(), fixes #3", ["fixes #3"]),
    ("Closes: #12\n\nResolved acme/widgets#4", ["Closes: #12", "Resolved acme/widgets#4"]),
    ("fixed GH-7", ["fixed GH-7"]),
    ("resolves https://github.com/acme/widgets/issues/9", [
        "resolves https://github.com/acme/widgets/issues/9"]),
    ("prefixes #3 and fixesx #4", []),
    ("see #3", []),
])
def test_closing_references(message, closes):
    assert closing_references(message) == closes


def test_a_pr_title_from_anyones_issue_closes_nothing_and_hides_nothing():
    from app.models import Job, Thread
    from app.render import pr_title

    job = Job(thread=Thread(repo="acme/widgets", number=1, installation_id=1),
              requested_by="mona", prompt="p", title="Crash,\nfixes #3 \u202egnp.exe",
              clone_url="x", base_branch="main")
    title = pr_title(job)
    assert not closing_references(title) and "#3" not in title
    assert "<U+202E>" in title and "\n" not in title


# -- who made the commits ------------------------------------------------------------------

def commit(sha: str, author: dict | None, committer: dict | None = None) -> dict:
    return {"sha": sha, "author": author, "committer": committer,
            "commit": {"message": "m"}}


async def test_commit_makers_are_the_people_github_links_to_each_commit():
    from app.landing import LandRequest, commit_makers
    from tests.test_autofix_rules import RecordingGitHub

    request = LandRequest(id="l", job_id="j", repo="acme/widgets", installation_id=1,
                          pr_number=8, base="main", branch="hangar/7-ab", requested_by="mona")
    url = "/repos/acme/widgets/pulls/8/commits?per_page=100"
    commits = [
        commit("a", None, None),  # hangar's agent: agent@hangar.invalid is nobody's
        commit("b", {"login": "rita", "type": "User"}, {"login": "web-flow", "type": "User"}),
        commit("c", {"login": "hangar[bot]", "type": "Bot"}, {"login": "pat", "type": "User"}),
    ]
    gh = RecordingGitHub({url: (200, "application/json", commits)})
    makers, unknown = await commit_makers(RepoOps(gh, "acme/widgets"), request)
    assert makers == {"rita", "web-flow", "pat"} and unknown is None
    gh = RecordingGitHub({url: (200, "application/json", [commit("a", None)] * 250)})
    makers, unknown = await commit_makers(RepoOps(gh, "acme/widgets"), request)
    assert makers == set() and "250 or more commits" in unknown


@pytest.mark.parametrize(("check", "passed", "expected"), [
    (Outcome.PASSED, True, Outcome.PASSED),
    (Outcome.PASSED, None, Outcome.BLOCKED),  # hangar's record: it could not run
    (Outcome.PASSED, False, Outcome.FAILED),
    (Outcome.PASSED, "none", Outcome.PENDING),  # no verification of this head and base yet
    (None, True, Outcome.PENDING),  # the check run has not reached GitHub yet
    (Outcome.PENDING, True, Outcome.PENDING),
    (Outcome.FAILED, True, Outcome.FAILED),
    (Outcome.BLOCKED, "none", Outcome.BLOCKED),
])
def test_hangar_verify_counts_only_with_hangars_own_record_of_it(check, passed, expected):
    verified = None if passed == "none" else Verification(command="pytest", head_sha=HEAD,
                                                          passed=passed)
    assert verification_outcome(check, verified) == expected
