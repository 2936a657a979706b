"""fakehub's merge queue: GraphQL `enqueuePullRequest`, merge groups on
`gh-readonly-queue/…` branches announced with `merge_group`, merged in order once their
required checks pass, dropped (and those after rebuilt) when one fails."""

from __future__ import annotations

from fakehub_helpers import call

QUEUE = {"type": "merge_queue", "parameters": {
    "check_response_timeout_minutes": 60, "grouping_strategy": "ALLGREEN",
    "max_entries_to_build": 5, "max_entries_to_merge": 5, "merge_method": "MERGE",
    "min_entries_to_merge": 1, "min_entries_to_merge_wait_minutes": 0}}
CHECKS = {"type": "required_status_checks", "parameters": {
    "required_status_checks": [{"context": "ci / test"}],
    "strict_required_status_checks_policy": False}}
ENQUEUE = ("mutation($id: ID!, $head: GitObjectID) { enqueuePullRequest(input: "
           "{pullRequestId: $id, expectedHeadOid: $head}) { mergeQueueEntry { position state } } }")


def _token(world) -> str:
    return world.hub.installation_token(world.installation_id)


def _pr(world, branch: str, path: str) -> dict:
    world.hub.push_files(world.repo, branch, {path: f"{branch}\n"}, f"on {branch}", as_user="dev")
    resp = call(world.hub.api_url, "POST", f"/repos/{world.repo}/pulls", _token(world),
                {"title": branch, "head": branch, "base": "main"})
    assert resp.status == 201, resp.body
    world.hub.complete_check(world.repo, resp.body["head"]["sha"], "ci / test", "success")
    return resp.body


def _enqueue(world, pr: dict):
    return call(world.hub.base_url + "/api/graphql", "POST", "", _token(world),
                {"query": ENQUEUE, "variables": {"id": pr["node_id"],
                                                 "head": pr["head"]["sha"]}}).body


def _groups(world) -> list[dict]:
    return [d.payload for d in world.hub.deliveries(event="merge_group")]


def test_two_prs_merge_in_order_through_their_groups(world):
    world.hub.set_ruleset(world.repo, {"name": "queue", "enforcement": "active",
                                       "target": "branch", "rules": [QUEUE, CHECKS]})
    first, second = _pr(world, "one", "one.txt"), _pr(world, "two", "two.txt")
    # A REST merge is refused: the queue is the only way in.
    merge = call(world.hub.api_url, "PUT", f"/repos/{world.repo}/pulls/{first['number']}/merge",
                 _token(world), {"merge_method": "merge"})
    assert merge.status == 405
    assert "Changes must be made through the merge queue" in merge.body["message"]
    assert _enqueue(world, first)["data"]["enqueuePullRequest"]["mergeQueueEntry"] == {
        "position": 1, "state": "AWAITING_CHECKS"}
    assert _enqueue(world, second)["data"]["enqueuePullRequest"]["mergeQueueEntry"][
        "position"] == 2
    again = _enqueue(world, first)
    assert again["data"]["enqueuePullRequest"] is None
    assert "already in the merge queue" in again["errors"][0]["message"]

    world.hub.settle()
    requested = [g for g in _groups(world) if g["action"] == "checks_requested"]
    assert [g["merge_group"]["head_ref"].rsplit("/", 1)[1].split("-")[1] for g in requested] \
        == [str(first["number"]), str(second["number"])]
    one, two = (g["merge_group"] for g in requested)
    assert one["base_ref"] == "refs/heads/main" and two["base_sha"] == one["head_sha"]

    # The second group passes first: nothing merges before the first.
    world.hub.complete_check(world.repo, two["head_sha"], "ci / test", "success")
    assert not world.hub.get_pr(world.repo, second["number"])["merged"]
    world.hub.complete_check(world.repo, one["head_sha"], "ci / test", "success")
    assert world.hub.get_pr(world.repo, first["number"])["merged"]
    assert world.hub.get_pr(world.repo, second["number"])["merged"]
    assert world.hub.ref_sha(world.repo, "main") == two["head_sha"]
    world.hub.settle()
    destroyed = [g["reason"] for g in _groups(world) if g["action"] == "destroyed"]
    assert destroyed == ["merged", "merged"]


def test_a_failed_group_check_dequeues_and_rebuilds_those_after(world):
    world.hub.set_ruleset(world.repo, {"name": "queue", "enforcement": "active",
                                       "target": "branch", "rules": [QUEUE, CHECKS]})
    first, second = _pr(world, "one", "one.txt"), _pr(world, "two", "two.txt")
    _enqueue(world, first)
    _enqueue(world, second)
    world.hub.settle()
    one = next(g for g in _groups(world) if g["action"] == "checks_requested")["merge_group"]
    world.hub.complete_check(world.repo, one["head_sha"], "ci / test", "failure")
    world.hub.settle()
    dequeued = world.hub.wait_for_delivery("pull_request", "dequeued")
    assert dequeued.payload["number"] == first["number"]
    rebuilt = [g for g in _groups(world) if g["action"] == "checks_requested"][-1]
    assert rebuilt["merge_group"]["head_ref"].endswith(
        f"pr-{second['number']}-{world.hub.ref_sha(world.repo, 'main')}")
    assert not world.hub.get_pr(world.repo, first["number"])["merged"]


def test_the_new_deliveries_match_githubs_schemas(world):
    """merge_group, pull_request enqueued/dequeued, pull_request_review_thread and
    check_suite rerequested, each as @octokit/webhooks-schemas describes it."""
    import json

    import jsonschema

    from tests.github_reference import WEBHOOK_SCHEMAS

    world.hub.set_ruleset(world.repo, {"name": "queue", "enforcement": "active",
                                       "target": "branch", "rules": [QUEUE, CHECKS]})
    first = _pr(world, "one", "one.txt")
    review = world.hub.review(world.repo, first["number"], "reviewer", "COMMENT",
                              comments=[{"path": "one.txt", "line": 1, "body": "hm"}])
    world.hub.resolve_thread(world.repo, first["number"], review)
    world.hub.rerun_all_checks(world.repo, first["head"]["sha"], world.hub.ci_app_id,
                               as_user="dev")
    _enqueue(world, first)
    world.hub.settle()
    group = next(g for g in _groups(world) if g["action"] == "checks_requested")
    world.hub.complete_check(world.repo, group["merge_group"]["head_sha"], "ci / test",
                             "failure")
    world.hub.settle()
    definitions = json.loads(WEBHOOK_SCHEMAS.read_text())["definitions"]
    wanted = {("merge_group", "checks_requested"), ("merge_group", "destroyed"),
              ("pull_request", "enqueued"), ("pull_request", "dequeued"),
              ("pull_request_review_thread", "resolved")}
    seen, problems = set(), []
    for delivery in world.hub.deliveries():
        if (delivery.event, delivery.action) not in wanted:
            continue
        seen.add((delivery.event, delivery.action))
        validator = jsonschema.Draft7Validator({
            "$ref": f"#/definitions/{delivery.event}${delivery.action}",
            "definitions": definitions})
        problems += [f"{delivery.event}${delivery.action}: "
                     f"{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}"
                     for e in validator.iter_errors(delivery.payload)]
    assert seen == wanted
    assert problems == [], "\n".join(sorted(set(problems))[:40])


READY = ("mutation($id: ID!) { markPullRequestReadyForReview(input: {pullRequestId: $id}) "
         "{ clientMutationId pullRequest { number isDraft } } }")


def test_a_draft_is_marked_ready_for_review_as_githubs_mutation_does(world):
    world.hub.push_files(world.repo, "drafted", {"d.txt": "d\n"}, "draft", as_user="dev")
    opened = call(world.hub.api_url, "POST", f"/repos/{world.repo}/pulls", _token(world),
                  {"title": "drafted", "head": "drafted", "base": "main", "draft": True})
    assert opened.status == 201 and opened.body["draft"] is True
    number = opened.body["number"]
    merge = call(world.hub.api_url, "PUT", f"/repos/{world.repo}/pulls/{number}/merge",
                 _token(world), {"merge_method": "squash"})
    assert merge.status == 405  # GitHub does not merge a draft
    answer = call(world.hub.base_url + "/api/graphql", "POST", "", _token(world),
                  {"query": READY, "variables": {"id": opened.body["node_id"]}}).body
    assert answer == {"data": {"markPullRequestReadyForReview": {
        "clientMutationId": None, "pullRequest": {"number": number, "isDraft": False}}}}
    assert world.hub.get_pr(world.repo, number)["draft"] is False
    world.hub.settle()
    said = [d.payload["action"] for d in world.hub.deliveries(event="pull_request")
            if d.payload["number"] == number]
    assert said == ["opened", "ready_for_review"]


def test_marking_ready_needs_the_input_github_asks_for_and_pull_requests_write(world):
    missing = call(world.hub.base_url + "/api/graphql", "POST", "", _token(world),
                   {"query": "mutation { markPullRequestReadyForReview(input: {}) "
                             "{ pullRequest { isDraft } } }"}).body
    assert "pullRequestId" in missing["errors"][0]["message"]  # refused by GitHub's schema
    world.hub.push_files(world.repo, "drafted2", {"e.txt": "e\n"}, "draft", as_user="dev")
    opened = call(world.hub.api_url, "POST", f"/repos/{world.repo}/pulls", _token(world),
                  {"title": "drafted2", "head": "drafted2", "base": "main", "draft": True})
    world.hub.set_installation_permissions(world.installation_id,
                                           {"contents": "write", "pull_requests": "read"})
    refused = call(world.hub.base_url + "/api/graphql", "POST", "",
                   world.hub.installation_token(world.installation_id),
                   {"query": READY, "variables": {"id": opened.body["node_id"]}}).body
    assert refused["errors"][0]["type"] == "FORBIDDEN"
    assert world.hub.get_pr(world.repo, opened.body["number"])["draft"] is True
