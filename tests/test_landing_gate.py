"""GitHub's merge decision as hangar computes it before asking: one row per rule and
parameter, each with the words GitHub refuses a merge with when the rule is not met
(quoted from GitHub's answers as users and GitHub's own tests recorded them; fakehub
answers with the same words, tests/fakehub/test_fakehub_gate.py)."""

from __future__ import annotations

import pytest

from app.landing import Cannot, Facts, Needs, branch_gate, missing_for_merge, usable_methods
from app.landing.gate import blockers, owners_of, parse_codeowners, required_results
from app.render import landing as words

HEAD = "a" * 40
OLD = "b" * 40
CI_APP, OWN_APP = 2, 1
RULESET = {11: "main rules"}


def pr_rule(**params) -> dict:
    return {"type": "pull_request", "ruleset_id": 11, "parameters": {
        "required_approving_review_count": 0, "dismiss_stale_reviews_on_push": False,
        "require_code_owner_review": False, "require_last_push_approval": False,
        "required_review_thread_resolution": False, **params}}


def approval(login: str, commit: str = HEAD, state: str = "APPROVED") -> dict:
    return {"user": {"login": login}, "state": state, "commit_id": commit}


WRITERS = {"rita": "write", "sam": "admin", "alice": "maintain", "mona": "write",
           "rick": "read"}


def facts(**kw) -> Facts:
    return Facts(**{"author": "hangar[bot]", "head_sha": HEAD, "permissions": WRITERS, **kw})


# (case, rules, classic, facts, the Needs codes hangar finds, GitHub's words for them)
ROWS = [
    ("required_approving_review_count met", [pr_rule(required_approving_review_count=1)],
     None, facts(reviews=[approval("rita")]), [], None),
    ("required_approving_review_count: 2 asked, 1 given",
     [pr_rule(required_approving_review_count=2)], None, facts(reviews=[approval("rita")]),
     [Needs.APPROVALS],
     "At least 2 approving reviews are required by reviewers with write access."),
    ("a reader's approval does not count", [pr_rule(required_approving_review_count=1)], None,
     facts(reviews=[approval("rick")]), [Needs.APPROVALS],
     "At least 1 approving review is required by reviewers with write access."),
    ("a reviewer's later change request replaces their approval",
     [pr_rule(required_approving_review_count=1)], None,
     facts(reviews=[approval("rita"), approval("rita", state="CHANGES_REQUESTED")]),
     [Needs.CHANGES_REQUESTED, Needs.APPROVALS], None),
    ("a comment after an approval leaves the approval standing",
     [pr_rule(required_approving_review_count=1)], None,
     facts(reviews=[approval("rita"), approval("rita", state="COMMENTED")]), [], None),
    ("dismiss_stale_reviews_on_push: an approval of an older head does not count",
     [pr_rule(required_approving_review_count=1, dismiss_stale_reviews_on_push=True)], None,
     facts(reviews=[approval("rita", OLD)]), [Needs.APPROVALS], None),
    ("without dismiss_stale_reviews_on_push GitHub still counts an older head's approval",
     [pr_rule(required_approving_review_count=1)], None,
     facts(reviews=[approval("rita", OLD)]), [], None),
    ("require_last_push_approval: the last pusher's approval does not count",
     [pr_rule(required_approving_review_count=1, require_last_push_approval=True)], None,
     facts(reviews=[approval("mona")], last_pusher="mona"), [Needs.APPROVALS], None),
    ("require_code_owner_review: an owner of every owned file approved",
     [pr_rule(require_code_owner_review=True)], None,
     facts(reviews=[approval("alice")], codeowners="/src/auth/ @alice\n",
           changed_files=["src/auth/login.py"]), [], None),
    ("require_code_owner_review: no owner approved",
     [pr_rule(require_code_owner_review=True)], None,
     facts(reviews=[approval("rita")], codeowners="/src/auth/ @alice\n",
           changed_files=["src/auth/login.py"]),
     [Needs.CODE_OWNER], "Waiting on code owner review from alice."),
    ("require_code_owner_review: a team owner's member approved",
     [pr_rule(require_code_owner_review=True)], None,
     facts(reviews=[approval("sam")], codeowners="*.py @acme/core\n",
           changed_files=["calc.py"], teams={"@acme/core": ["sam"]}), [], None),
    ("require_code_owner_review: files nobody owns ask nothing",
     [pr_rule(require_code_owner_review=True)], None,
     facts(codeowners="/docs/ @alice\n", changed_files=["calc.py"]), [], None),
    ("required_review_thread_resolution: an unresolved conversation",
     [pr_rule(required_review_thread_resolution=True)], None, facts(unresolved_threads=1),
     [Needs.THREADS],
     "A conversation must be resolved before this pull request can be merged."),
    ("required_deployments: the head is not deployed to production",
     [{"type": "required_deployments", "ruleset_id": 11,
       "parameters": {"required_deployment_environments": ["production"]}}], None, facts(),
     [Needs.DEPLOYMENTS], None),
    ("required_deployments: deployed", [{"type": "required_deployments", "ruleset_id": 11,
      "parameters": {"required_deployment_environments": ["production"]}}], None,
     facts(deployed=["production"]), [], None),
    ("classic required reviews count like the rule",
     [], {"required_pull_request_reviews": {"required_approving_review_count": 2}}, facts(
         reviews=[approval("rita")]), [Needs.APPROVALS],
     "At least 2 approving reviews are required by reviewers with write access."),
    ("classic required_conversation_resolution",
     [], {"required_conversation_resolution": {"enabled": True}}, facts(unresolved_threads=2),
     [Needs.THREADS], None),
    ("classic require_code_owner_reviews",
     [], {"required_pull_request_reviews": {"require_code_owner_reviews": True,
                                           "required_approving_review_count": 0}},
     facts(codeowners="* @alice\n", changed_files=["calc.py"]), [Needs.CODE_OWNER], None),
    ("several rulesets: the strictest count wins",
     [pr_rule(required_approving_review_count=1), pr_rule(required_approving_review_count=2)],
     None, facts(reviews=[approval("rita"), approval("sam")]), [], None),
]


@pytest.mark.parametrize(("case", "rules", "classic", "pr", "needs", "github_says"), ROWS,
                         ids=[r[0] for r in ROWS])
def test_what_a_person_must_still_do(case, rules, classic, pr, needs, github_says):
    gate = branch_gate(rules, classic, RULESET)
    found = missing_for_merge(gate, pr)
    assert [w.code for w in found] == needs, case
    for why in found:  # every need reads as what a person must do
        assert words.gate_needs([why])


def test_the_code_owner_need_names_the_owned_paths_and_the_owners():
    gate = branch_gate([pr_rule(require_code_owner_review=True)], None, RULESET)
    found = missing_for_merge(gate, facts(codeowners="/src/auth/ @alice @acme/sec\n",
                                          changed_files=["src/auth/login.py"]))
    assert words.gate_needs(found) == (
        "1 more approval from a code owner of `/src/auth/` (@alice or @acme/sec)")


def test_the_approvals_need_names_the_rule():
    gate = branch_gate([pr_rule(required_approving_review_count=2)], None, RULESET)
    found = missing_for_merge(gate, facts(reviews=[approval("rita")]))
    assert words.gate_needs(found) == (
        "1 more approval(s) from someone with write access (main rules asks for 2)")


# -- merge methods: (case, rules, repo settings, commits, methods GitHub takes, words) --

METHODS = [
    ("nothing narrows them", [], {"squash", "merge", "rebase"}, {}, ["squash", "merge", "rebase"],
     None),
    ("the repository's settings", [], {"merge"}, {}, ["merge"],
     "Squash merges are not allowed on this repository."),
    ("pull_request allowed_merge_methods", [pr_rule(allowed_merge_methods=["rebase"])],
     {"squash", "merge", "rebase"}, {}, ["rebase"], None),
    ("required_linear_history forbids merge commits",
     [{"type": "required_linear_history", "ruleset_id": 11}], {"squash", "merge", "rebase"},
     {}, ["squash", "rebase"], "This branch must not contain merge commits."),
    ("required_linear_history: a rebase that would bring a merge commit along",
     [{"type": "required_linear_history", "ruleset_id": 11}], {"squash", "merge", "rebase"},
     {"merge_commits_in_pr": True}, ["squash"], "This branch must not contain merge commits."),
    ("required_signatures: GitHub signs the squash it makes, not a rebase or unsigned commits",
     [{"type": "required_signatures", "ruleset_id": 11}], {"squash", "merge", "rebase"}, {},
     ["squash"], "Commits must have verified signatures."),
    ("required_signatures: a merge of verified commits", [
        {"type": "required_signatures", "ruleset_id": 11}], {"squash", "merge", "rebase"},
     {"commits_verified": True}, ["squash", "merge"], None),
]


@pytest.mark.parametrize(("case", "rules", "repo", "commits", "usable", "github_says"), METHODS,
                         ids=[m[0] for m in METHODS])
def test_the_merge_methods_github_takes(case, rules, repo, commits, usable, github_says):
    got, _ = usable_methods(branch_gate(rules, None, RULESET), repo, **commits)
    assert got == usable, case


# -- what hangar cannot satisfy: (case, rules, classic, the code, GitHub's words) ----

CANNOT = [
    ("update: only bypass actors update the branch",
     [{"type": "update", "ruleset_id": 11, "parameters": {"update_allows_fetch_and_merge": False}}],
     None, Cannot.UPDATE_RESTRICTED, "Cannot update this protected ref."),
    ("classic lock_branch", [], {"lock_branch": {"enabled": True}}, Cannot.LOCKED, None),
    ("classic restrictions without hangar's App", [],
     {"restrictions": {"users": [], "teams": [], "apps": [{"slug": "ci"}]}},
     Cannot.PUSH_RESTRICTED, None),
    ("hangar / verify required from another App",
     [{"type": "required_status_checks", "ruleset_id": 11, "parameters": {
         "required_status_checks": [{"context": "hangar / verify", "integration_id": 99}],
         "strict_required_status_checks_policy": False}}], None,
     Cannot.CHECK_FROM_OTHER_APP, None),
    ("no merge method left", [pr_rule(allowed_merge_methods=["merge"]),
                              {"type": "required_linear_history", "ruleset_id": 11}], None,
     Cannot.NO_METHOD, None),
]


@pytest.mark.parametrize(("case", "rules", "classic", "code", "github_says"), CANNOT,
                         ids=[c[0] for c in CANNOT])
def test_what_hangar_cannot_satisfy_is_named_with_its_rule(case, rules, classic, code,
                                                           github_says):
    gate = branch_gate(rules, classic, RULESET, app_slug="hangar")
    usable, out = usable_methods(gate, {"squash", "merge", "rebase"})
    found = blockers(gate, own_app_id=OWN_APP, usable=usable, methods_out=out)
    assert [w.code for w in found] == [code], case
    said = words.gate_needs(found)
    assert "main rules" in said or "classic branch protection" in said or "merge" in said


def test_hangars_own_app_bound_verify_is_no_blocker():
    gate = branch_gate([{"type": "required_status_checks", "ruleset_id": 11, "parameters": {
        "required_status_checks": [{"context": "hangar / verify", "integration_id": OWN_APP}],
        "strict_required_status_checks_policy": False}}], None, RULESET)
    assert blockers(gate, own_app_id=OWN_APP, usable=["squash"], methods_out=[]) == []


# -- required checks by source: integration_id ---------------------------------------

def run(name, conclusion="success", app=CI_APP):
    return {"name": name, "status": "completed", "conclusion": conclusion, "app": {"id": app}}


def status(name, state="success"):
    return {"context": name, "state": state, "creator": {"login": "eve"}}


BOUND = [{"type": "required_status_checks", "ruleset_id": 11, "parameters": {
    "required_status_checks": [{"context": "ci / test", "integration_id": CI_APP}],
    "strict_required_status_checks_policy": False}}]
ANY = [{"type": "required_status_checks", "ruleset_id": 11, "parameters": {
    "required_status_checks": [{"context": "ci / test"}],
    "strict_required_status_checks_policy": False}}]

SOURCES = [
    ("bound to the CI App: its check run passes", BOUND, [run("ci / test")], [], "passed"),
    ("bound to the CI App: a person's commit status of that name counts for nothing", BOUND,
     [], [status("ci / test")], None),
    ("bound to the CI App: another App's check run counts for nothing", BOUND,
     [run("ci / test", app=77)], [], None),
    ("bound to the CI App: its failure stands over another App's success", BOUND,
     [run("ci / test", "failure"), run("ci / test", app=77)], [], "failed"),
    ("any source: a commit status counts", ANY, [], [status("ci / test")], "passed"),
    ("classic checks[].app_id binds the same way", [], [], [status("ci / test")], None),
]


@pytest.mark.parametrize(("case", "rules", "runs", "statuses", "outcome"), SOURCES,
                         ids=[s[0] for s in SOURCES])
def test_a_required_check_counts_only_from_the_source_its_rule_takes(case, rules, runs,
                                                                     statuses, outcome):
    classic = None if rules else {"required_status_checks": {
        "strict": False, "contexts": ["ci / test"],
        "checks": [{"context": "ci / test", "app_id": CI_APP}]}}
    gate = branch_gate(rules, classic, RULESET)
    got = required_results(gate, [], runs, statuses, own_app_id=OWN_APP).outcomes
    assert (got.get("ci / test") and str(got["ci / test"])) == outcome, case


# -- CODEOWNERS ------------------------------------------------------------------------

@pytest.mark.parametrize(("path", "owners"), [
    ("calc.py", ("@everyone",)),
    ("src/auth/login.py", ("@alice",)),
    ("src/auth/deep/x.py", ("@alice",)),
    ("docs/a.md", ()),  # a pattern without owners: nobody owns it
    ("lib/auth/x.py", ("@everyone",)),  # /src/auth/ is anchored at the root
    ("a/build/out.txt", ("@builders",)),  # build/ matches a directory at any depth
    ("x.js", ("@js",)),
])
def test_codeowners_last_match_wins(path, owners):
    rules = parse_codeowners(
        "# owners\n* @everyone\n*.js @js\n/src/auth/ @alice\nbuild/ @builders\n/docs/\n")
    assert owners_of(path, rules).owners == owners
