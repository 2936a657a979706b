"""Rulesets on push and merge, reviews, update-branch, checks, statuses, CI, faults."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from fakehub_helpers import app_jwt, call, clone, commit_file, git

from fakehub import gitrepo
from fakehub.hub import HubError


def _token(world) -> str:
    return world.hub.installation_token(world.installation_id)


def _open_pr(world, branch: str = "hangar/1-abc", content: str = "return 42") -> dict:
    world.hub.push_files(world.repo, branch, {"widgets.py": f"def answer():\n    {content}\n"},
                         f"change on {branch}", as_user="dev")
    resp = call(world.hub.api_url, "POST", f"/repos/{world.repo}/pulls", _token(world),
                {"title": f"PR from {branch}", "head": branch, "base": "main"})
    assert resp.status == 201, resp.body
    return resp.body


def _merge(world, number: int, sha: str | None, method: str = "merge"):
    body = {"merge_method": method}
    if sha:
        body["sha"] = sha
    return call(world.hub.api_url, "PUT", f"/repos/{world.repo}/pulls/{number}/merge",
                _token(world), body)


def _wait_ci(world, sha: str, timeout: float = 20.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = [r for r in world.hub.check_runs(world.repo, sha) if r["name"] == "ci / test"]
        if runs and runs[-1]["status"] == "completed":
            return runs[-1]
        time.sleep(0.05)
    raise AssertionError("CI did not complete")


@pytest.fixture
def protected(world):
    world.hub.protect(world.repo, approvals=1, checks=["ci / test"], dismiss_stale=True)
    world.hub.set_ci(world.repo, "grep -q 'return 42' widgets.py")
    return world


def test_force_push_and_deletion_refused_on_protected_branch(protected, tmp_path: Path):
    world = protected
    work = clone(world.hub.git_url(world.repo, world.owner.token), tmp_path / "w")
    git(work, "commit", "--quiet", "--amend", "-m", "rewritten")
    refused = git(work, "push", "--force", "origin", "HEAD:main", check=False)
    assert refused.returncode != 0
    assert "GH013: Repository rule violations found for refs/heads/main." in refused.stderr
    assert "Cannot force-push to this branch" in refused.stderr
    deleted = git(work, "push", "origin", ":main", check=False)
    assert deleted.returncode != 0 and "Cannot delete this branch" in deleted.stderr
    direct = git(work, "push", "origin", "HEAD:refs/heads/side", check=False)
    assert direct.returncode == 0  # other branches are not protected


def test_direct_push_to_protected_branch_needs_a_pr_unless_bypass(protected, tmp_path: Path):
    world = protected
    with pytest.raises(HubError) as refused:
        world.hub.push_files(world.repo, "main", {"x.txt": "x"}, "direct", as_user="dev")
    assert "Changes must be made through a pull request." in refused.value.message
    world.hub.set_ruleset(world.repo, {"name": "none", "enforcement": "active", "rules": []})
    rules = call(world.hub.api_url, "GET", f"/repos/{world.repo}/rules/branches/main",
                 _token(world)).body
    assert {r["type"] for r in rules} == {"deletion", "non_fast_forward", "pull_request",
                                          "required_status_checks"}
    assert all(r["ruleset_source_type"] == "Repository" for r in rules)
    world.hub.set_ruleset(world.repo, {"name": "bots", "enforcement": "active",
                                       "rules": [{"type": "deletion"}]})
    bypassing = world.hub.protect(world.repo, checks=[], bypass_app_ids=[world.app.id])
    assert bypassing["bypass_actors"][0]["actor_id"] == world.app.id


def test_merge_refusals_and_success(protected):
    world = protected
    pr = _open_pr(world)
    number, head = pr["number"], pr["head"]["sha"]
    run = _wait_ci(world, head)
    assert run["conclusion"] == "success" and run["app"]["id"] == world.hub.ci_app_id

    missing = _merge(world, number, head)
    assert missing.status == 405
    assert missing.body["message"].startswith("Repository rule violations found\n\n")
    assert "approving review" in missing.body["message"]
    assert world.hub.get_pr(world.repo, number)["mergeable_state"] == "blocked"

    # The App opened the PR; its own approval is refused outright.
    self_review = call(world.hub.api_url, "POST", f"/repos/{world.repo}/pulls/{number}/reviews",
                       _token(world), {"event": "APPROVE"})
    assert self_review.status == 422
    # A reader's approval does not count.
    world.hub.review(world.repo, number, "outsider", "APPROVE")
    assert _merge(world, number, head).status == 405

    world.hub.review(world.repo, number, "reviewer", "APPROVE")
    assert _merge(world, number, "0" * 40).status == 409
    merged = _merge(world, number, head)
    assert merged.status == 200, merged.body
    assert merged.body["merged"] is True
    after = world.hub.get_pr(world.repo, number)
    assert after["merged"] is True and after["merge_commit_sha"] == merged.body["sha"]
    assert after["merged_by"]["login"] == "hangar[bot]"
    info = gitrepo.commit_info(world.hub.repo_path(world.repo), merged.body["sha"])
    assert info.parents[1] == head and info.author_name == "hangar[bot]"
    closed = world.hub.wait_for_delivery("pull_request", "closed")
    assert closed.payload["pull_request"]["merged"] is True


def test_stale_approval_and_failing_check_block_the_merge(protected):
    world = protected
    pr = _open_pr(world)
    number = pr["number"]
    world.hub.review(world.repo, number, "reviewer", "APPROVE")
    new_head = world.hub.push_files(world.repo, "hangar/1-abc", {"widgets.py": "return 41\n"},
                                    "break it", as_user="dev")
    sync = world.hub.wait_for_delivery("pull_request", "synchronize")
    assert sync.payload["after"] == new_head
    dismissed = world.hub.wait_for_delivery("pull_request_review", "dismissed")
    assert dismissed.payload["review"]["state"] == "dismissed"
    assert [r["state"] for r in world.hub.reviews(world.repo, number)] == ["DISMISSED"]
    assert _wait_ci(world, new_head)["conclusion"] == "failure"
    refused = _merge(world, number, new_head)
    assert refused.status == 405
    assert "approving review" in refused.body["message"]
    assert 'Required status check "ci / test" is failing.' in refused.body["message"]
    world.hub.review(world.repo, number, "reviewer", "APPROVE")
    still = _merge(world, number, new_head)
    assert still.status == 405 and "approving review" not in still.body["message"]
    run = _wait_ci(world, new_head)
    assert "exited with code 1" in run["output"]["summary"]


def test_update_branch_makes_a_real_merge(protected):
    world = protected
    pr = _open_pr(world)
    number, head = pr["number"], pr["head"]["sha"]
    world.hub.push_files(world.repo, "main", {"CHANGELOG.md": "moved\n"}, "main moves",
                         as_user="acme", bypass_rules=True)
    assert world.hub.get_pr(world.repo, number)["mergeable_state"] in ("behind", "blocked")
    path = f"/repos/{world.repo}/pulls/{number}/update-branch"
    wrong = call(world.hub.api_url, "PUT", path, _token(world), {"expected_head_sha": "1" * 40})
    assert wrong.status == 422
    ok = call(world.hub.api_url, "PUT", path, _token(world), {"expected_head_sha": head})
    assert ok.status == 202
    # As on GitHub, the head moves a little after the 202.
    assert world.hub.get_pr(world.repo, number)["head"]["sha"] == head
    deadline = time.monotonic() + 10
    while world.hub.get_pr(world.repo, number)["head"]["sha"] == head:
        assert time.monotonic() < deadline, "the head never moved"
        time.sleep(0.05)
    new_head = world.hub.get_pr(world.repo, number)["head"]["sha"]
    info = gitrepo.commit_info(world.hub.repo_path(world.repo), new_head)
    assert info.parents[0] == head and len(info.parents) == 2
    assert world.hub.read_file(world.repo, "CHANGELOG.md", "hangar/1-abc") == b"moved\n"


def test_squash_and_rebase_merges(world):
    first = _open_pr(world, "feature/a", "return 1")
    squashed = _merge(world, first["number"], first["head"]["sha"], "squash")
    assert squashed.status == 200, squashed.body
    info = gitrepo.commit_info(world.hub.repo_path(world.repo), squashed.body["sha"])
    assert len(info.parents) == 1 and info.message.startswith("PR from feature/a (#")
    second = _open_pr(world, "feature/b", "return 2")
    rebased = _merge(world, second["number"], second["head"]["sha"], "rebase")
    assert rebased.status == 200, rebased.body
    assert world.hub.read_file(world.repo, "widgets.py") == b"def answer():\n    return 2\n"


def test_conflicting_pr_is_dirty_and_not_mergeable(world):
    pr = _open_pr(world, "feature/x", "return 7")
    world.hub.push_files(world.repo, "main", {"widgets.py": "def answer():\n    return 9\n"},
                         "conflict", as_user="acme")
    assert world.hub.get_pr(world.repo, pr["number"])["mergeable_state"] == "dirty"
    assert _merge(world, pr["number"], pr["head"]["sha"]).status == 405


def test_check_runs_belong_to_their_app_and_roll_up(world):
    api, token = world.hub.api_url, _token(world)
    sha = world.hub.ref_sha(world.repo, "main")
    created = call(api, "POST", f"/repos/{world.repo}/check-runs", token, {
        "name": "hangar / verify", "head_sha": sha, "status": "in_progress",
        "external_id": "run-1", "output": {"title": "t", "summary": "s"},
        "actions": [{"label": "Retry", "description": "Run again", "identifier": "retry"}]})
    assert created.status == 201, created.body
    run_id = created.body["id"]
    ci_run = world.hub.complete_check(world.repo, sha, "ci / test", "failure")
    steal = call(api, "PATCH", f"/repos/{world.repo}/check-runs/{ci_run}", token,
                 {"conclusion": "success"})
    assert steal.status == 403
    done = call(api, "PATCH", f"/repos/{world.repo}/check-runs/{run_id}", token, {
        "conclusion": "success", "output": {"title": "ok", "summary": "fine", "text": "all"}})
    assert done.body["status"] == "completed" and done.body["output"]["text"] == "all"
    listed = call(api, "GET", f"/repos/{world.repo}/commits/main/check-runs", token).body
    assert {r["name"] for r in listed["check_runs"]} == {"hangar / verify", "ci / test"}
    suites = call(api, "GET", f"/repos/{world.repo}/commits/{sha}/check-suites", token).body
    assert {s["app"]["id"]: s["conclusion"] for s in suites["check_suites"]} == {
        world.app.id: "success", world.hub.ci_app_id: "failure"}
    completed = world.hub.wait_for_delivery(
        "check_suite", "completed",
        where=lambda p: p["check_suite"]["app"]["id"] == world.app.id)
    assert completed.payload["check_suite"]["conclusion"] == "success"


def test_statuses_and_combined_status(world):
    api, token = world.hub.api_url, _token(world)
    sha = world.hub.ref_sha(world.repo, "main")
    resp = call(api, "POST", f"/repos/{world.repo}/statuses/{sha}", token,
                {"state": "pending", "context": "lint"})
    assert resp.status == 201
    world.hub.set_status(world.repo, sha, "lint", "success")
    world.hub.set_status(world.repo, sha, "docs", "failure")
    combined = call(api, "GET", f"/repos/{world.repo}/commits/{sha}/status", token).body
    assert combined["state"] == "failure" and combined["total_count"] == 2
    listed = call(api, "GET", f"/repos/{world.repo}/commits/{sha}/statuses", token).body
    assert [s["state"] for s in listed] == ["failure", "success", "pending"]
    assert world.hub.wait_for_delivery("status").payload["sha"] == sha


def test_ci_timeout_is_reported(world):
    world.hub.set_ci(world.repo, "sleep 30", timeout=0.5)
    pr = _open_pr(world)
    run = _wait_ci(world, pr["head"]["sha"])
    assert run["conclusion"] == "timed_out"


def test_faults_fail_then_recover(world):
    api, token = world.hub.api_url, _token(world)
    world.hub.inject_fault("GET", r"^/repos/acme/widgets$", status=502, times=1)
    assert call(api, "GET", f"/repos/{world.repo}", token).status == 502
    assert call(api, "GET", f"/repos/{world.repo}", token).status == 200
    world.hub.inject_fault("GET", r"^/repos/acme/widgets$", secondary_rate_limit=True,
                           retry_after=7)
    limited = call(api, "GET", f"/repos/{world.repo}", token)
    assert limited.status == 403 and limited.headers["Retry-After"] == "7"
    assert "secondary rate limit" in limited.body["message"]
    world.hub.inject_fault("GET", r"^/repos/acme/widgets$", status=429, rate_limit=True)
    primary = call(api, "GET", f"/repos/{world.repo}", token)
    assert primary.status == 429 and primary.headers["x-ratelimit-remaining"] == "0"
    world.hub.inject_fault("GET", r"^/app$", hang_seconds=0.5, status=504)
    started = time.monotonic()
    jwt_token = app_jwt(world.app.id, world.app.private_key_pem)
    assert call(api, "GET", "/app", jwt_token, scheme="Bearer").status == 504
    assert time.monotonic() - started >= 0.5
    calls = world.hub.api_calls(world.app.id)
    assert ("GET", f"/repos/{world.repo}", 502) in calls


def test_redelivery_keeps_the_delivery_id(world, receiver):
    world.hub.create_issue(world.repo, "t", "b", as_user="dev")
    first = world.hub.wait_for_delivery("issues", "opened")
    again = world.hub.redeliver(first.guid)
    assert again.guid == first.guid and again.redelivery
    world.hub.settle()
    guids = [r["headers"]["X-GitHub-Delivery"] for r in receiver.received
             if r["headers"]["X-GitHub-Event"] == "issues"]
    assert guids == [first.guid, first.guid]


def test_disordered_webhooks_come_twice_and_out_of_order_and_none_is_lost(world, receiver):
    world.hub.disorder_webhooks(duplicate_rate=0.5, reorder_window=2, seed=3)
    numbers = [world.hub.create_issue(world.repo, "t0", "b", as_user="dev")]
    # Deliveries waiting in the window are not listed yet: listed, they would look failed,
    # and an App catching up on missed deliveries would ask for them again. (Looked at
    # right after the first, well inside the window however slow the machine.)
    jwt_token = app_jwt(world.app.id, world.app.private_key_pem)
    listed = call(world.hub.api_url, "GET", "/app/hook/deliveries", jwt_token, scheme="Bearer")
    assert [d for d in listed.body if d["event"] == "issues"] == []
    numbers += [world.hub.create_issue(world.repo, f"t{i}", "b", as_user="dev")
                for i in range(1, 8)]
    world.hub.settle()
    got = [(r["headers"]["X-GitHub-Delivery"], r["payload"]["issue"]["number"])
           for r in receiver.received if r["headers"]["X-GitHub-Event"] == "issues"]
    assert sorted({n for _, n in got}) == numbers  # every one arrived
    assert len(got) > len(set(got))  # some twice, with the same X-GitHub-Delivery
    assert len({g for g, _ in got}) == len(numbers)  # one GUID per event
    firsts = list(dict.fromkeys(n for _, n in got))
    assert firsts != numbers  # not in the order they happened
    recorded = world.hub.deliveries(event="issues")
    assert len(recorded) == len(got) and not any(d.redelivery for d in recorded)

    world.hub.disorder_webhooks(0, 0)
    later = [world.hub.create_issue(world.repo, f"u{i}", "b", as_user="dev") for i in range(4)]
    world.hub.settle()
    tail = [r["payload"]["issue"]["number"] for r in receiver.received
            if r["headers"]["X-GitHub-Event"] == "issues"][len(got):]
    assert tail == later  # once each, in order, again


def test_rulesets_say_who_may_bypass_and_show_bypass_actors_only_to_admins(world):
    api = world.hub.api_url
    ruleset = world.hub.set_ruleset(world.repo, {
        "name": "main", "target": "branch", "enforcement": "active", "rules": [],
        "bypass_actors": [{"actor_id": world.app.id, "actor_type": "Integration",
                           "bypass_mode": "pull_request"},
                          {"actor_id": 5, "actor_type": "RepositoryRole",
                           "bypass_mode": "always"}]})
    path = f"/repos/{world.repo}/rulesets/{ruleset['id']}"
    as_app = call(api, "GET", path, _token(world)).body
    assert as_app["current_user_can_bypass"] == "pull_requests_only"
    assert "bypass_actors" not in as_app  # administration: write only
    as_writer = call(api, "GET", path, world.dev.token).body
    assert as_writer["current_user_can_bypass"] == "never" and "bypass_actors" not in as_writer
    as_admin = call(api, "GET", path, world.owner.token).body
    assert as_admin["current_user_can_bypass"] == "always"
    assert len(as_admin["bypass_actors"]) == 2
    listed = call(api, "GET", f"/repos/{world.repo}/rulesets", _token(world)).body
    assert [r["current_user_can_bypass"] for r in listed] == ["pull_requests_only"]


def test_user_push_over_git_emits_synchronize(protected, tmp_path: Path):
    world = protected
    pr = _open_pr(world)
    work = clone(world.hub.git_url(world.repo, world.dev.token), tmp_path / "w")
    git(work, "checkout", "--quiet", "hangar/1-abc")
    sha = commit_file(work, "extra.txt", "more\n", "more")
    git(work, "push", "--quiet", "origin", "hangar/1-abc")
    sync = world.hub.wait_for_delivery("pull_request", "synchronize")
    assert sync.payload["after"] == sha and sync.payload["sender"]["login"] == "dev"
    assert world.hub.get_pr(world.repo, pr["number"])["head"]["sha"] == sha


def test_mergeability_can_be_unknown_for_a_while(world):
    pr = _open_pr(world)
    world.hub.delay_mergeability(reads=1)
    path = f"/repos/{world.repo}/pulls/{pr['number']}"
    first = call(world.hub.api_url, "GET", path, _token(world)).body
    assert first["mergeable"] is None and first["mergeable_state"] == "unknown"
    second = call(world.hub.api_url, "GET", path, _token(world)).body
    assert second["mergeable"] is True


def test_check_buttons_reach_only_the_owning_app(world):
    other = world.hub.create_app("watcher", webhook_url=None)
    world.hub.install(other.id, "acme", ["widgets"])
    sha = world.hub.ref_sha(world.repo, "main")
    created = call(world.hub.api_url, "POST", f"/repos/{world.repo}/check-runs", _token(world), {
        "name": "hangar / agent", "head_sha": sha, "conclusion": "failure",
        "output": {"title": "failed", "summary": "s"},
        "actions": [{"label": "Retry", "description": "Try again", "identifier": "retry"}]})
    world.hub.press_check_button(world.repo, created.body["id"], "retry", as_user="dev")
    world.hub.press_check_button(world.repo, created.body["id"], None, as_user="dev")
    pressed = world.hub.wait_for_delivery("check_run", "requested_action")
    assert pressed.payload["requested_action"] == {"identifier": "retry"}
    assert world.hub.wait_for_delivery("check_run", "rerequested").app_id == world.app.id
    heard = {(d.action, d.app_id) for d in world.hub.deliveries(event="check_run")}
    assert ("requested_action", other.id) not in heard
    assert ("completed", other.id) in heard  # everyone with checks access sees completions


def test_rerun_on_a_ci_check_runs_the_head_again(protected):
    world = protected
    pr = _open_pr(world)
    head = pr["head"]["sha"]
    first = _wait_ci(world, head)
    world.hub.press_check_button(world.repo, first["id"], None, as_user="dev")
    world.hub.settle()
    runs = [r for r in world.hub.check_runs(world.repo, head) if r["name"] == "ci / test"]
    assert len(runs) == 2 and runs[-1]["conclusion"] == "success"


def test_installation_tokens_read_public_repos_outside_the_installation(world):
    world.hub.create_user("elsewhere")
    world.hub.create_repo("elsewhere", "lib", {"a.txt": "a"})
    token = _token(world)
    assert call(world.hub.api_url, "GET", "/repos/elsewhere/lib", token).status == 200
    write = call(world.hub.api_url, "POST", "/repos/elsewhere/lib/issues/1/comments", token,
                 {"body": "x"})
    assert write.status == 403


def test_a_person_cannot_approve_their_own_pr(protected):
    world = protected
    world.hub.push_files(world.repo, "mine", {"widgets.py": "def answer():\n    return 42\n\n"},
                         "mine", as_user="dev")
    number = world.hub.open_pr(world.repo, "mine", "Mine", as_user="dev")
    with pytest.raises(HubError) as refused:
        world.hub.review(world.repo, number, "dev", "APPROVE")
    assert refused.value.status == 422
    head = world.hub.get_pr(world.repo, number)["head"]["sha"]
    _wait_ci(world, head)
    merge = call(world.hub.api_url, "PUT", f"/repos/{world.repo}/pulls/{number}/merge",
                 world.dev.token, {"sha": head})
    assert merge.status == 405 and "approving review" in merge.body["message"]
