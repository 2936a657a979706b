"""fakehub refuses what GitHub refuses, in GitHub's words: workflow files without the
`workflows` permission, merge methods the repository turns off."""

from __future__ import annotations

import subprocess
import time

from fakehub_helpers import call, clone, commit_file, git
from test_fakehub_rules import _merge, _open_pr, _token

WITHOUT_WORKFLOWS = {"metadata": "read", "contents": "write", "pull_requests": "write",
                     "issues": "write", "checks": "write"}
REFUSAL = ("refusing to allow a GitHub App to create or update workflow "
           "`.github/workflows/ci.yml` without `workflows` permission")


def _workflow_on_main(world) -> None:
    world.hub.push_files(world.repo, "main", {".github/workflows/ci.yml": "on: push\n"},
                         "add CI", as_user="acme", bypass_rules=True)


def test_update_branch_that_brings_in_a_workflow_needs_the_permission(world):
    pr = _open_pr(world)
    _workflow_on_main(world)
    world.hub.set_installation_permissions(world.installation_id, WITHOUT_WORKFLOWS)
    path = f"/repos/{world.repo}/pulls/{pr['number']}/update-branch"
    refused = call(world.hub.api_url, "PUT", path, _token(world),
                   {"expected_head_sha": pr["head"]["sha"]})
    assert refused.status == 403 and refused.body["message"] == REFUSAL
    world.hub.set_installation_permissions(world.installation_id,
                                           {**WITHOUT_WORKFLOWS, "workflows": "write"})
    ok = call(world.hub.api_url, "PUT", path, _token(world),
              {"expected_head_sha": pr["head"]["sha"]})
    assert ok.status == 202


def test_merging_a_workflow_change_needs_the_permission(world):
    world.hub.push_files(world.repo, "hangar/2-ci", {".github/workflows/ci.yml": "on: push\n"},
                         "add CI", as_user="dev")
    made = call(world.hub.api_url, "POST", f"/repos/{world.repo}/pulls", _token(world),
                {"title": "CI", "head": "hangar/2-ci", "base": "main"})
    world.hub.set_installation_permissions(world.installation_id, WITHOUT_WORKFLOWS)
    refused = _merge(world, made.body["number"], made.body["head"]["sha"])
    assert refused.status == 403 and refused.body["message"] == REFUSAL


def test_a_push_of_a_workflow_needs_the_permission(world, tmp_path):
    world.hub.set_installation_permissions(world.installation_id, WITHOUT_WORKFLOWS)
    url = world.hub.git_url(world.repo, _token(world))
    work = clone(url, tmp_path / "w")
    commit_file(work, ".github/workflows/ci.yml", "on: push\n", "add CI")
    pushed = subprocess.run(["git", "-C", str(work), "push", "origin", "HEAD:refs/heads/ci"],
                            capture_output=True, text=True)
    assert pushed.returncode != 0 and REFUSAL in pushed.stderr
    commit_file(work, "other.txt", "fine\n", "no workflow")
    git(work, "reset", "--hard", "HEAD~2")
    commit_file(work, "other.txt", "fine\n", "no workflow")
    git(work, "push", "origin", "HEAD:refs/heads/other")


def test_a_merge_method_the_repository_turns_off_is_405(world):
    pr = _open_pr(world)
    world.hub.set_merge_methods(world.repo, "merge", "rebase")
    refused = _merge(world, pr["number"], pr["head"]["sha"], "squash")
    assert refused.status == 405
    assert refused.body["message"] == "Squash merges are not allowed on this repository."
    repo = call(world.hub.api_url, "GET", f"/repos/{world.repo}", _token(world)).body
    assert (repo["allow_squash_merge"], repo["allow_merge_commit"]) == (False, True)
    assert _merge(world, pr["number"], pr["head"]["sha"], "merge").status == 200


def test_a_current_etag_gets_a_304_that_costs_nothing(world):
    token = _token(world)
    first = call(world.hub.api_url, "GET", f"/repos/{world.repo}/issues", token)
    etag, remaining = first.headers["ETag"], first.headers["x-ratelimit-remaining"]
    again = call(world.hub.api_url, "GET", f"/repos/{world.repo}/issues", token,
                 headers={"If-None-Match": etag})
    assert again.status == 304
    assert again.headers["x-ratelimit-remaining"] == remaining
    world.hub.create_issue(world.repo, "new", "", as_user="acme")
    changed = call(world.hub.api_url, "GET", f"/repos/{world.repo}/issues", token,
                   headers={"If-None-Match": etag})
    assert changed.status == 200 and changed.headers["ETag"] != etag
    assert int(changed.headers["x-ratelimit-remaining"]) == int(remaining) - 1


def test_the_primary_limit_is_per_installation_until_the_reset(world):
    token = _token(world)
    first = call(world.hub.api_url, "GET", f"/repos/{world.repo}", token)
    world.hub.hub.rates.limit = int(first.headers["x-ratelimit-used"]) + 1
    assert call(world.hub.api_url, "GET", f"/repos/{world.repo}", token).status == 200
    limited = call(world.hub.api_url, "GET", f"/repos/{world.repo}", token)
    assert limited.status == 403 and "rate limit exceeded" in limited.body["message"]
    assert limited.headers["x-ratelimit-remaining"] == "0"
    assert int(limited.headers["x-ratelimit-reset"]) > time.time()
    # A person's token is another caller with its own allowance.
    person = call(world.hub.api_url, "GET", f"/repos/{world.repo}", world.dev.token)
    assert person.status == 200


def test_content_creating_calls_meet_the_secondary_limit(world):
    token = _token(world)
    number = world.hub.create_issue(world.repo, "t", "", as_user="acme")
    world.hub.hub.rates.writes_per_minute = 3
    path = f"/repos/{world.repo}/issues/{number}/comments"
    for n in range(3):
        assert call(world.hub.api_url, "POST", path, token, {"body": str(n)}).status == 201
    refused = call(world.hub.api_url, "POST", path, token, {"body": "3"})
    assert refused.status == 403 and "secondary rate limit" in refused.body["message"]
    assert 1 <= int(refused.headers["retry-after"]) <= 61
    assert call(world.hub.api_url, "GET", path, token).status == 200  # reads still go
    assert len(world.hub.issue_comments(world.repo, number)) == 3
