"""Classic branch protection: GitHub's PUT/GET/DELETE shapes, and its answers on merge."""

from __future__ import annotations

import pytest
from fakehub_helpers import call

from fakehub import protection

PATH = "/repos/acme/widgets/branches/main/protection"
BODY = {
    "required_status_checks": {"strict": False, "contexts": ["ci / test"]},
    "enforce_admins": False,
    "required_pull_request_reviews": {"required_approving_review_count": 1,
                                      "dismiss_stale_reviews": True},
    "restrictions": None,
}


def _token(world) -> str:
    return world.hub.installation_token(world.installation_id)


def _open_pr(world, branch: str = "feature", as_user: str = "dev") -> dict:
    world.hub.push_files(world.repo, branch, {"widgets.py": "def answer():\n    return 43\n"},
                         f"change on {branch}", as_user=as_user)
    number = world.hub.open_pr(world.repo, branch, "a change", as_user=as_user)
    return world.hub.get_pr(world.repo, number)


def _merge(world, number: int, token: str | None = None):
    return call(world.hub.api_url, "PUT", f"/repos/{world.repo}/pulls/{number}/merge",
                token or _token(world), {"merge_method": "squash"})


def test_put_get_delete_in_githubs_shapes(world):
    api, admin = world.hub.api_url, world.owner.token
    no_admin_read = call(api, "GET", PATH, _token(world))
    assert no_admin_read.status == 403  # reading protection needs administration: read
    world.hub.set_installation_permissions(
        world.installation_id, {"metadata": "read", "administration": "read"})
    missing = call(api, "GET", PATH, _token(world))
    assert missing.status == 404 and missing.body["message"] == "Branch not protected"
    bad = call(api, "PUT", PATH, admin, {"enforce_admins": True})
    assert bad.status == 422 and "required_status_checks" in bad.body["message"]
    assert call(api, "PUT", PATH, world.dev.token, BODY).status == 403  # writers cannot
    put = call(api, "PUT", PATH, admin, {**BODY, "required_status_checks": {
        "strict": True, "contexts": [], "checks": [{"context": "ci / test", "app_id": -1},
                                                   {"context": "lint", "app_id": 7}]}})
    assert put.status == 200, put.body
    got = call(api, "GET", PATH, _token(world)).body  # administration: read is enough
    checks = got["required_status_checks"]
    assert checks["strict"] is True and checks["contexts"] == ["ci / test", "lint"]
    assert checks["checks"] == [{"context": "ci / test", "app_id": None},
                                {"context": "lint", "app_id": 7}]
    reviews = got["required_pull_request_reviews"]
    assert reviews["required_approving_review_count"] == 1 and reviews["dismiss_stale_reviews"]
    assert reviews["require_last_push_approval"] is False
    assert got["enforce_admins"] == {"url": f"{world.hub.api_url}{PATH}/enforce_admins",
                                     "enabled": False}
    assert got["allow_force_pushes"] == {"enabled": False}
    branch = call(api, "GET", "/repos/acme/widgets/branches/main", _token(world)).body
    assert branch["protected"] and branch["protection"]["required_status_checks"]["contexts"] \
        == ["ci / test", "lint"]
    assert call(api, "DELETE", PATH, admin).status == 204
    assert call(api, "GET", PATH, _token(world)).status == 404
    assert call(api, "DELETE", PATH, admin).status == 404


def test_a_merge_meets_required_reviews_with_githubs_words(world):
    world.hub.protect_branch(world.repo, "main", approvals=2, checks=())
    pr = _open_pr(world)
    refused = _merge(world, pr["number"])
    assert refused.status == 405
    assert refused.body["message"] == \
        "At least 2 approving reviews are required by reviewers with write access."
    assert world.hub.get_pr(world.repo, pr["number"])["mergeable_state"] == "blocked"
    world.hub.review(world.repo, pr["number"], as_user="reviewer")
    world.hub.grant(world.repo, "outsider", "read")
    world.hub.review(world.repo, pr["number"], as_user="outsider")  # a reader does not count
    assert _merge(world, pr["number"]).status == 405
    # an admin merges past it unless enforce_admins
    assert _merge(world, pr["number"], world.owner.token).status == 200


def test_a_merge_meets_required_checks(world):
    world.hub.protect_branch(world.repo, "main", approvals=None, checks=("ci / test",))
    pr = _open_pr(world)
    sha = pr["head"]["sha"]
    expected = _merge(world, pr["number"])
    assert (expected.status, expected.body["message"]) == \
        (405, 'Required status check "ci / test" is expected.')
    world.hub.complete_check(world.repo, sha, "ci / test", "failure")
    assert _merge(world, pr["number"]).body["message"] == \
        'Required status check "ci / test" is failing.'
    world.hub.complete_check(world.repo, sha, "ci / test", "success")
    assert _merge(world, pr["number"]).status == 200


def test_last_push_approval_does_not_count_whoever_pushed_last(world):
    world.hub.protect_branch(world.repo, "main", approvals=1, checks=(), last_push=True)
    pr = _open_pr(world)
    # the reviewer pushes onto the branch, then approves: that approval does not count
    world.hub.push_files(world.repo, "feature", {"extra.txt": "x\n"}, "more",
                         as_user="reviewer")
    head = world.hub.get_pr(world.repo, pr["number"])["head"]["sha"]
    world.hub.review(world.repo, pr["number"], as_user="reviewer", commit_id=head)
    assert _merge(world, pr["number"]).status == 405
    world.hub.protect_branch(world.repo, "main", approvals=1, checks=(), last_push=False)
    assert _merge(world, pr["number"]).status == 200


@pytest.mark.parametrize("dismiss_stale", [True, False])
def test_a_push_dismisses_older_approvals_when_classic_protection_says_so(world, dismiss_stale):
    world.hub.protect_branch(world.repo, "main", approvals=1, checks=(),
                             dismiss_stale=dismiss_stale)
    pr = _open_pr(world)
    world.hub.review(world.repo, pr["number"], as_user="reviewer")
    mark = world.hub.delivery_mark()
    world.hub.push_files(world.repo, "feature", {"extra.txt": "x\n"}, "more", as_user="dev")
    states = [r["state"] for r in world.hub.reviews(world.repo, pr["number"])]
    assert states == (["DISMISSED"] if dismiss_stale else ["APPROVED"])
    merged = _merge(world, pr["number"])
    assert merged.status == (405 if dismiss_stale else 200)
    if dismiss_stale:
        world.hub.wait_for_delivery("pull_request_review", "dismissed", since=mark)


def test_enforce_admins_holds_admins_too(world):
    world.hub.protect_branch(world.repo, "main", approvals=1, checks=(), enforce_admins=True)
    pr = _open_pr(world)
    assert _merge(world, pr["number"], world.owner.token).status == 405


@pytest.mark.parametrize("states,behind,strict,said", [
    ({"a": "success"}, False, False, None),
    ({"a": "missing"}, False, False, 'Required status check "a" is expected.'),
    ({"a": "pending"}, False, False, 'Required status check "a" is expected.'),
    ({"a": "failure"}, False, False, 'Required status check "a" is failing.'),
    ({"a": "failure", "b": "missing"}, False, False,
     "1 of 2 required status checks are failing."),
    ({"a": "pending", "b": "missing"}, False, False,
     "2 of 2 required status checks are expected."),
    ({"a": "success"}, True, False, None),
    ({"a": "success"}, True, True,
     "Head branch is out of date. Review and try the merge again."),
])
def test_required_checks_table(states, behind, strict, said):
    stored = protection.normalize({"required_status_checks": {"strict": strict,
                                                              "contexts": list(states)},
                                   "enforce_admins": None, "required_pull_request_reviews": None,
                                   "restrictions": None})
    assert protection.merge_refusal(stored, is_admin=False, approvals=0,
                                    changes_requested=False, check_states=states,
                                    behind=behind) == said


# -- size limits (GitHub's 422s) --------------------------------------------------------


def test_bodies_past_65536_characters_and_check_output_past_65535_bytes_are_422(world):
    api, token, repo = world.hub.api_url, _token(world), world.repo
    issue = world.hub.create_issue(repo, "t", "b", as_user="dev")
    at_limit, past = "x" * 65_536, "x" * 65_537
    path = f"/repos/{repo}/issues/{issue}/comments"
    assert call(api, "POST", path, token, {"body": at_limit}).status == 201
    refused = call(api, "POST", path, token, {"body": past})
    assert refused.status == 422
    assert refused.body["errors"][0]["message"] == \
        "body is too long (maximum is 65536 characters)"
    assert call(api, "PATCH", f"/repos/{repo}/issues/{issue}", token,
                {"body": past}).status == 422
    world.hub.push_files(repo, "feature", {"a.txt": "a\n"}, "a", as_user="dev")
    pulls = f"/repos/{repo}/pulls"
    assert call(api, "POST", pulls, token, {"title": "t", "head": "feature", "base": "main",
                                            "body": past}).status == 422
    pr = call(api, "POST", pulls, token, {"title": "t", "head": "feature", "base": "main",
                                          "body": at_limit})
    assert pr.status == 201
    assert call(api, "PATCH", f"{pulls}/{pr.body['number']}", token,
                {"body": past}).status == 422
    sha = pr.body["head"]["sha"]
    checks = f"/repos/{repo}/check-runs"

    def run(summary: str):
        return call(api, "POST", checks, token, {"name": "n", "head_sha": sha, "output": {
            "title": "t", "summary": summary}})

    assert run("é" * 32_767).status == 201  # 65,534 bytes
    too_many_bytes = run("é" * 32_768 + "x")  # 32,769 characters, 65,537 bytes
    assert too_many_bytes.status == 422
