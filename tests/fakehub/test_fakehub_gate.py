"""fakehub holds a merge to every ruleset rule as GitHub does, with GitHub's words (the same
words hangar's own reading of the gate quotes, tests/test_landing_gate.py): required
approvals, code owners, resolved conversations, a check bound to one App, merge methods,
linear history, signatures, deployments, merge queues, restricted updates, and the 405
GitHub answers while it still computes mergeability. Also its GraphQL review threads."""

from __future__ import annotations

import pytest
from fakehub_helpers import call

PR_RULE = {"required_approving_review_count": 0, "dismiss_stale_reviews_on_push": False,
           "require_code_owner_review": False, "require_last_push_approval": False,
           "required_review_thread_resolution": False}


def _token(world) -> str:
    return world.hub.installation_token(world.installation_id)


def _pr(world, files=None, branch="hangar/1-gate") -> dict:
    world.hub.push_files(world.repo, branch, files or {"widgets.py": "x = 1\n"},
                         f"change on {branch}", as_user="dev")
    resp = call(world.hub.api_url, "POST", f"/repos/{world.repo}/pulls", _token(world),
                {"title": "gate", "head": branch, "base": "main"})
    assert resp.status == 201, resp.body
    return resp.body


def _ruleset(world, *rules) -> None:
    world.hub.set_ruleset(world.repo, {"name": "gate", "enforcement": "active",
                                       "target": "branch", "rules": list(rules)})


def _merge(world, number, method="squash"):
    return call(world.hub.api_url, "PUT", f"/repos/{world.repo}/pulls/{number}/merge",
                _token(world), {"merge_method": method})


def refused(resp) -> str:
    assert resp.status == 405, resp.body
    return resp.body["message"]


def test_two_approvals_asked_one_given(world):
    _ruleset(world, {"type": "pull_request",
                     "parameters": {**PR_RULE, "required_approving_review_count": 2}})
    pr = _pr(world)
    world.hub.review(world.repo, pr["number"], "reviewer", "APPROVE")
    said = refused(_merge(world, pr["number"]))
    assert said == ("Repository rule violations found\n\nAt least 2 approving reviews are "
                    "required by reviewers with write access.\n\n")
    world.hub.review(world.repo, pr["number"], "dev", "APPROVE")
    assert _merge(world, pr["number"]).status == 200


def test_code_owners_review_is_asked_of_the_owned_files_owners(world):
    world.hub.push_files(world.repo, "main", {".github/CODEOWNERS": "/src/ @reviewer\n"},
                         "owners", as_user="acme", bypass_rules=True)
    _ruleset(world, {"type": "pull_request",
                     "parameters": {**PR_RULE, "require_code_owner_review": True}})
    pr = _pr(world, {"src/auth.py": "x = 1\n"})
    world.hub.review(world.repo, pr["number"], "dev", "APPROVE")  # a writer, not the owner
    assert "Waiting on code owner review from reviewer." in refused(_merge(world, pr["number"]))
    world.hub.review(world.repo, pr["number"], "reviewer", "APPROVE")
    assert _merge(world, pr["number"]).status == 200


def test_an_unresolved_conversation_holds_the_merge_until_resolved(world):
    _ruleset(world, {"type": "pull_request",
                     "parameters": {**PR_RULE, "required_review_thread_resolution": True}})
    pr = _pr(world)
    review = world.hub.review(world.repo, pr["number"], "reviewer", "COMMENT",
                              comments=[{"path": "widgets.py", "line": 1, "body": "why?"}])
    assert ("A conversation must be resolved before this pull request can be merged."
            in refused(_merge(world, pr["number"])))
    query = ("query($o: String!, $n: String!, $pr: Int!) { repository(owner: $o, name: $n) "
             "{ pullRequest(number: $pr) { reviewThreads(first: 10) { nodes { isResolved } "
             "pageInfo { hasNextPage } } } } }")
    graphql = world.hub.base_url + "/api/graphql"
    variables = {"o": "acme", "n": "widgets", "pr": pr["number"]}
    answer = call(graphql, "POST", "", _token(world), {"query": query, "variables": variables})
    threads = answer.body["data"]["repository"]["pullRequest"]["reviewThreads"]
    assert threads["nodes"] == [{"isResolved": False}]
    world.hub.resolve_thread(world.repo, pr["number"], review)
    answer = call(graphql, "POST", "", _token(world), {"query": query, "variables": variables})
    assert answer.body["data"]["repository"]["pullRequest"]["reviewThreads"]["nodes"] == [
        {"isResolved": True}]
    assert _merge(world, pr["number"]).status == 200


def test_a_thread_is_resolved_through_graphql_and_a_reply_is_no_thread_of_its_own(world):
    _ruleset(world, {"type": "pull_request",
                     "parameters": {**PR_RULE, "required_review_thread_resolution": True}})
    pr = _pr(world)
    world.hub.review(world.repo, pr["number"], "reviewer", "COMMENT",
                     comments=[{"path": "widgets.py", "line": 1, "body": "why?"}])
    root = world.hub.review_comments(world.repo, pr["number"])[0]["id"]
    world.hub.reply_in_thread(world.repo, pr["number"], root, "because", as_user="dev")
    graphql = world.hub.base_url + "/api/graphql"
    query = ("query($o: String!, $n: String!, $pr: Int!) { repository(owner: $o, name: $n) "
             "{ pullRequest(number: $pr) { reviewThreads(first: 10) { nodes { id isResolved "
             "comments(first: 5) { totalCount nodes { databaseId body } } } } } } }")
    answer = call(graphql, "POST", "", _token(world), {"query": query, "variables": {
        "o": "acme", "n": "widgets", "pr": pr["number"]}})
    [thread] = answer.body["data"]["repository"]["pullRequest"]["reviewThreads"]["nodes"]
    assert thread["isResolved"] is False and thread["comments"]["totalCount"] == 2
    assert thread["comments"]["nodes"][0] == {"databaseId": root, "body": "why?"}
    resolve = ("mutation($id: ID!) { resolveReviewThread(input: {threadId: $id}) "
               "{ thread { isResolved } } }")
    answer = call(graphql, "POST", "", _token(world), {"query": resolve,
                                                       "variables": {"id": thread["id"]}})
    assert answer.body["data"]["resolveReviewThread"]["thread"] == {"isResolved": True}
    assert world.hub.thread_resolved(world.repo, pr["number"], root)
    assert _merge(world, pr["number"]).status == 200


def test_graphql_refuses_what_githubs_schema_does_not_have(world):
    answer = call(world.hub.base_url + "/api/graphql", "POST", "", _token(world),
                  {"query": "{ repository(owner: \"acme\", name: \"widgets\") { nonsense } }"})
    assert answer.body["data"] is None
    assert "Cannot query field 'nonsense' on type 'Repository'." in answer.body["errors"][0][
        "message"]


def test_a_check_bound_to_an_app_is_not_met_by_a_persons_status(world):
    _ruleset(world, {"type": "required_status_checks", "parameters": {
        "required_status_checks": [{"context": "ci / test",
                                    "integration_id": world.hub.ci_app_id}],
        "strict_required_status_checks_policy": False}})
    pr = _pr(world)
    head = pr["head"]["sha"]
    world.hub.set_status(world.repo, head, "ci / test", "success", as_user="dev")
    assert 'Required status check "ci / test" is expected.' in refused(
        _merge(world, pr["number"]))
    world.hub.complete_check(world.repo, head, "ci / test", "success")
    assert _merge(world, pr["number"]).status == 200


@pytest.mark.parametrize(("states", "said"), [
    ({"a": "missing"}, 'Required status check "a" is expected.'),
    ({"a": "pending"}, 'Required status check "a" is in progress.'),
    ({"a": "failure"}, 'Required status check "a" is failing.'),
    ({"a": "missing", "b": "missing"}, "2 of 2 required status checks are expected."),
    ({"a": "missing", "b": "success"}, "1 of 2 required status checks are expected."),
    ({"a": "missing", "b": "pending"},
     "2 of 2 required status checks have not succeeded: 1 expected and 1 in progress."),
    ({"a": "failure", "b": "failure", "c": "success"},
     "2 of 3 required status checks are failing."),
])
def test_required_checks_in_githubs_words(states, said):
    from fakehub.rulesets import checks_sentence

    assert checks_sentence(states) == [said]


@pytest.mark.parametrize(("rule", "method", "said"), [
    ({"type": "required_linear_history"}, "merge",
     "This branch must not contain merge commits."),
    ({"type": "required_signatures"}, "rebase", "Commits must have verified signatures."),
    ({"type": "required_signatures"}, "merge", "Commits must have verified signatures."),
    ({"type": "merge_queue", "parameters": {
        "check_response_timeout_minutes": 60, "grouping_strategy": "ALLGREEN",
        "max_entries_to_build": 5, "max_entries_to_merge": 5, "merge_method": "MERGE",
        "min_entries_to_merge": 1, "min_entries_to_merge_wait_minutes": 5}}, "squash",
     "Changes must be made through the merge queue"),
    ({"type": "update", "parameters": {"update_allows_fetch_and_merge": False}}, "squash",
     "Cannot update this protected ref."),
    ({"type": "pull_request", "parameters": {**PR_RULE, "allowed_merge_methods": ["rebase"]}},
     "squash", "Merge method squash is not allowed on this branch."),
    ({"type": "required_deployments",
      "parameters": {"required_deployment_environments": ["production"]}}, "squash",
     'Required deployment "production" is expected.'),
])
def test_each_rule_refuses_a_merge_in_githubs_words(world, rule, method, said):
    _ruleset(world, rule)
    pr = _pr(world)
    assert said in refused(_merge(world, pr["number"], method))


@pytest.mark.parametrize(("rule", "method"), [
    ({"type": "required_linear_history"}, "squash"),
    ({"type": "required_linear_history"}, "rebase"),
    ({"type": "required_signatures"}, "squash"),  # GitHub signs the squash commit it makes
])
def test_the_method_the_rule_leaves_merges(world, rule, method):
    _ruleset(world, rule)
    pr = _pr(world)
    assert _merge(world, pr["number"], method).status == 200


def test_a_successful_deployment_of_the_head_meets_the_rule(world):
    _ruleset(world, {"type": "required_deployments",
                     "parameters": {"required_deployment_environments": ["production"]}})
    pr = _pr(world)
    world.hub.deploy(world.repo, pr["head"]["sha"], "production", state="failure")
    assert _merge(world, pr["number"]).status == 405
    world.hub.deploy(world.repo, pr["head"]["sha"], "production")
    assert _merge(world, pr["number"]).status == 200


def test_a_merge_while_mergeability_is_computed_is_405_not_mergeable(world):
    pr = _pr(world)
    world.hub.delay_mergeability(reads=1, merges=1)
    shown = call(world.hub.api_url, "GET", f"/repos/{world.repo}/pulls/{pr['number']}",
                 _token(world))
    assert shown.body["mergeable"] is None and shown.body["mergeable_state"] == "unknown"
    assert refused(_merge(world, pr["number"])) == "Pull Request is not mergeable"
    assert _merge(world, pr["number"]).status == 200


def test_rules_past_the_first_page_still_hold(world):
    for i in range(30):
        world.hub.set_ruleset(world.repo, {"name": f"filler {i}", "enforcement": "active",
                                           "target": "branch", "rules": [{"type": "deletion"}]})
    _ruleset(world, {"type": "required_status_checks", "parameters": {
        "required_status_checks": [{"context": "ci / test"}],
        "strict_required_status_checks_policy": False}})
    first = call(world.hub.api_url, "GET", f"/repos/{world.repo}/rules/branches/main",
                 _token(world))
    assert len(first.body) == 30 and 'rel="next"' in first.headers["Link"]
    pr = _pr(world)
    assert 'Required status check "ci / test" is expected.' in refused(
        _merge(world, pr["number"]))


def test_a_review_comments_diff_hunk_is_computed_from_the_diff_as_github_does(world):
    world.hub.push_files(world.repo, "main", {"calc.txt": "one\ntwo\nthree\nfour\n"},
                         "calc", as_user="acme", bypass_rules=True)
    pr = _pr(world, {"calc.txt": "one\n2\nthree\nfour\n", "new.txt": "hello\n"})
    resp = call(world.hub.api_url, "POST", f"/repos/{world.repo}/pulls/{pr['number']}/reviews",
                _token(world), {"event": "COMMENT", "comments": [
                    {"path": "calc.txt", "line": 3, "body": "why?", "diff_hunk": "made up"},
                    {"path": "new.txt", "line": 1, "body": "and this?"},
                    {"path": "calc.txt", "line": 2, "side": "LEFT", "body": "was fine"}]})
    assert resp.status == 200, resp.body
    comments = world.hub.review_comments(world.repo, pr["number"])
    assert [c["diff_hunk"] for c in comments] == [
        "@@ -1,4 +1,4 @@\n one\n-two\n+2\n three",
        "@@ -0,0 +1 @@\n+hello",
        "@@ -1,4 +1,4 @@\n one\n-two"]
    world.hub.reply_in_thread(world.repo, pr["number"], comments[0]["id"], "because",
                              as_user="dev")
    reply = world.hub.review_comments(world.repo, pr["number"])[-1]
    assert reply["diff_hunk"] == comments[0]["diff_hunk"]  # a reply shows its thread's


def test_a_review_comment_outside_the_diff_is_refused_and_nothing_is_kept(world):
    lines = "".join(f"line {n}\n" for n in range(1, 21))
    world.hub.push_files(world.repo, "main", {"long.txt": lines}, "long", as_user="acme",
                         bypass_rules=True)
    pr = _pr(world, {"long.txt": lines.replace("line 2\n", "line two\n")})
    path = f"/repos/{world.repo}/pulls/{pr['number']}/reviews"
    for outside in ({"path": "long.txt", "line": 18},  # past the hunk's three lines of context
                    {"path": "README.md", "line": 1},  # a file the pull request leaves alone
                    {"path": "long.txt", "line": 19, "side": "LEFT"}):
        resp = call(world.hub.api_url, "POST", path, _token(world), {
            "event": "COMMENT", "body": "see below",
            "comments": [{"path": "long.txt", "line": 5, "body": "fine"},
                         {**outside, "body": "not in the diff"}]})
        assert resp.status == 422, (outside, resp.body)
        assert resp.body["errors"] == [
            "Pull request review thread line must be part of the diff and Pull request "
            "review thread diff hunk can't be blank"]
    assert world.hub.reviews(world.repo, pr["number"]) == []
    assert world.hub.review_comments(world.repo, pr["number"]) == []
    # Context lines of a hunk are part of the diff: the same review with only those passes.
    resp = call(world.hub.api_url, "POST", path, _token(world), {
        "event": "COMMENT", "comments": [{"path": "long.txt", "line": 5, "body": "fine"}]})
    assert resp.status == 200, resp.body
