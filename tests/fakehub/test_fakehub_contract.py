"""Contract tests: fakehub's REST and webhooks against GitHub's own descriptions.

One representative flow calls every REST route fakehub serves and causes every webhook
event it sends. Then each recorded exchange is checked against the official OpenAPI
description (path and method exist, the status is documented, request and response
bodies validate), and each delivery against @octokit/webhooks-schemas.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from fakehub_helpers import app_jwt, build_world, call, oauth_sign_in, serving_receiver

from fakehub.server import API_PREFIX
from fakehub.testing import running_fakehub
from tests.github_reference import OPENAPI, WEBHOOK_SCHEMAS, check_exchange, find_operation
from tests.github_reference import openapi as load_openapi

pytestmark = pytest.mark.skipif(
    not OPENAPI.exists() or not WEBHOOK_SCHEMAS.exists(),
    reason="the @octokit reference packages are not installed (tests/reference)",
)


@pytest.fixture(scope="session")
def openapi() -> dict[str, Any]:
    return load_openapi()


@pytest.fixture(scope="session")
def webhook_schema() -> dict[str, Any]:
    return json.loads(WEBHOOK_SCHEMAS.read_text())


def served_routes(fakehub) -> list[tuple[str, str]]:
    app = fakehub._server.app
    api = next(iter(app._subapps))
    found = []
    for route in api.router.routes():
        canonical = route.resource.canonical.removeprefix(API_PREFIX)
        if route.method in ("HEAD", "*"):
            continue
        found.append((route.method, canonical))
    return found


# -- the representative flow ----------------------------------------------------------


def exercise_every_route(world, tmp_path: Path) -> None:
    """Call each REST route once or more and cause each webhook event."""
    hub, repo = world.hub, world.repo
    api = hub.api_url
    jwt_token = app_jwt(world.app.id, world.app.private_key_pem)

    def app_call(method: str, path: str, body: Any = None):
        return call(api, method, path, jwt_token, body, scheme="Bearer")

    assert app_call("GET", "/app").status == 200
    assert app_call("GET", "/app/installations").status == 200
    assert app_call("GET", f"/app/installations/{world.installation_id}").status == 200
    assert app_call("GET", f"/repos/{repo}/installation").status == 200
    minted = app_call("POST", f"/app/installations/{world.installation_id}/access_tokens",
                      {"repositories": ["widgets"]})
    assert minted.status == 201
    token = minted.body["token"]

    def ok(method: str, path: str, body: Any = None, status: int | tuple = (200, 201)):
        resp = call(api, method, path, token, body)
        expected = status if isinstance(status, tuple) else (status,)
        assert resp.status in expected, (method, path, resp.status, resp.body)
        return resp.body

    # A second repository for the installation: installation_repositories.added.
    hub.create_repo("acme", "gears", {"a.txt": "a\n"})
    hub.install(world.app.id, "acme", ["gears"])

    ok("GET", "/installation/repositories")
    ok("GET", f"/repos/{repo}")
    ok("GET", f"/repos/{repo}/branches")
    ok("GET", f"/repos/{repo}/branches/main")
    ok("GET", f"/repos/{repo}/contents/README.md")
    ok("GET", f"/repos/{repo}/contents/")
    call(api, "GET", f"/repos/{repo}/contents/missing.yml", token)
    ok("GET", f"/repos/{repo}/git/ref/heads/main")
    ok("GET", f"/repos/{repo}/git/matching-refs/heads/")
    main_sha = hub.ref_sha(repo, "main")
    ok("POST", f"/repos/{repo}/git/refs", {"ref": "refs/heads/scratch", "sha": main_sha})
    ok("DELETE", f"/repos/{repo}/git/refs/heads/scratch", status=204)
    ok("GET", f"/repos/{repo}/commits/main")
    ok("GET", f"/repos/{repo}/collaborators/dev/permission")

    # Issues, comments, reactions.
    issue = ok("POST", f"/repos/{repo}/issues", {"title": "Flaky", "body": "it flakes"})
    ok("GET", f"/repos/{repo}/issues")
    ok("GET", f"/repos/{repo}/issues/{issue['number']}")
    ok("POST", f"/repos/{repo}/issues/{issue['number']}/reactions", {"content": "eyes"})
    human = hub.comment(repo, issue["number"], "/hangar fix the flaky test", as_user="dev")
    hub.edit_comment(repo, human, "/hangar fix the flaky test please", as_user="dev")
    ok("POST", f"/repos/{repo}/issues/comments/{human}/reactions", {"content": "eyes"})
    ok("GET", f"/repos/{repo}/issues/comments/{human}/reactions")
    status_comment = ok("POST", f"/repos/{repo}/issues/{issue['number']}/comments",
                        {"body": "<!-- hangar:status --> working"})
    ok("GET", f"/repos/{repo}/issues/comments/{status_comment['id']}")
    ok("PATCH", f"/repos/{repo}/issues/comments/{status_comment['id']}", {"body": "done"})
    ok("GET", f"/repos/{repo}/issues/{issue['number']}/comments")
    # Labels: added as a person does (issues.labeled), read, removed by the App.
    hub.label(repo, issue["number"], "hangar", as_user="dev")
    ok("POST", f"/repos/{repo}/issues/{issue['number']}/labels", {"labels": ["bug"]})
    ok("GET", f"/repos/{repo}/issues/{issue['number']}/labels")
    ok("DELETE", f"/repos/{repo}/issues/{issue['number']}/labels/hangar")
    ok("DELETE", f"/repos/{repo}/issues/{issue['number']}/labels/hangar", status=404)
    ok("PATCH", f"/repos/{repo}/issues/{issue['number']}", {"state": "closed"})

    # Rules: a ruleset through the API, read back.
    # Rulesets are an admin's business: the owner's token, not the App's.
    ruleset = call(api, "POST", f"/repos/{repo}/rulesets", world.owner.token, {
        "name": "main", "target": "branch", "enforcement": "active",
        "conditions": {"ref_name": {"include": ["~DEFAULT_BRANCH"], "exclude": []}},
        "rules": [{"type": "non_fast_forward"}, {"type": "deletion"},
                  {"type": "pull_request", "parameters": {
                      "required_approving_review_count": 1,
                      "dismiss_stale_reviews_on_push": True,
                      "require_code_owner_review": False,
                      "require_last_push_approval": False,
                      "required_review_thread_resolution": False}},
                  {"type": "required_status_checks", "parameters": {
                      "strict_required_status_checks_policy": False,
                      "required_status_checks": [{"context": "ci / test"}]}}]}).body
    ok("GET", f"/repos/{repo}/rulesets")
    ok("GET", f"/repos/{repo}/rulesets/{ruleset['id']}")
    ok("GET", f"/repos/{repo}/rules/branches/main")
    # Classic branch protection, set, read and lifted by the owner.
    protection = f"/repos/{repo}/branches/main/protection"
    assert call(api, "GET", protection, world.owner.token).status == 404
    assert call(api, "PUT", protection, world.owner.token, {
        "required_status_checks": {"strict": True, "contexts": ["ci / test"]},
        "enforce_admins": False, "restrictions": None,
        "required_pull_request_reviews": {"required_approving_review_count": 1,
                                          "require_last_push_approval": True}}).status == 200
    assert call(api, "GET", protection, world.owner.token).status == 200
    assert call(api, "DELETE", protection, world.owner.token).status == 204

    # A pull request through its life.
    hub.set_ci(repo, "test -f widgets.py")
    hub.push_files(repo, "hangar/1-abc", {"widgets.py": "def answer():\n    return 42\n\n",
                                          "docs/notes.md": "notes\n"}, "work", as_user="dev")
    pr = ok("POST", f"/repos/{repo}/pulls", {"title": "Fix", "head": "hangar/1-abc",
                                             "base": "main", "body": "body"})
    number = pr["number"]
    ok("GET", f"/repos/{repo}/pulls?head=acme:hangar/1-abc&state=open")
    ok("PATCH", f"/repos/{repo}/pulls/{number}", {"title": "Fix the flaky test"})
    ok("GET", f"/repos/{repo}/pulls/{number}/commits")
    ok("GET", f"/repos/{repo}/pulls/{number}/files")
    ok("GET", f"/repos/{repo}/compare/main...hangar/1-abc")
    head = hub.get_pr(repo, number)["head"]["sha"]

    # Checks and statuses on the head.
    run = ok("POST", f"/repos/{repo}/check-runs", {
        "name": "hangar / verify", "head_sha": head, "status": "in_progress",
        "external_id": "run-1", "details_url": "http://127.0.0.1/runs/1",
        "output": {"title": "Verifying", "summary": "started",
                   "annotations": [{"path": "widgets.py", "start_line": 1, "end_line": 1,
                                    "annotation_level": "notice", "message": "ok"}]}})
    ok("GET", f"/repos/{repo}/check-runs/{run['id']}")
    ok("GET", f"/repos/{repo}/check-runs/{run['id']}/annotations")
    ok("PATCH", f"/repos/{repo}/check-runs/{run['id']}", {
        "status": "completed", "conclusion": "success",
        "output": {"title": "Verified", "summary": "all good", "text": "details"},
        "actions": [{"label": "Re-run", "description": "Verify again", "identifier": "rerun"}]})
    hub.press_check_button(repo, run["id"], "rerun", as_user="dev")
    hub.press_check_button(repo, run["id"], None, as_user="dev")
    ok("POST", f"/repos/{repo}/statuses/{head}", {"state": "success", "context": "lint",
                                                   "description": "clean"})
    ok("GET", f"/repos/{repo}/commits/{head}/statuses")
    ok("GET", f"/repos/{repo}/commits/{head}/status")
    hub.deploy(repo, head, "production")
    deployments = ok("GET", f"/repos/{repo}/deployments?sha={head}&environment=production")
    ok("GET", f"/repos/{repo}/deployments/{deployments[0]['id']}/statuses")
    hub.settle()
    ok("GET", f"/repos/{repo}/commits/{head}/check-runs")
    suites = ok("GET", f"/repos/{repo}/commits/{head}/check-suites")
    ok("GET", f"/repos/{repo}/check-suites/{suites['check_suites'][0]['id']}")

    # Review requests: asked, read, refused for a stranger, taken back, asked again.
    ok("POST", f"/repos/{repo}/pulls/{number}/requested_reviewers", {"reviewers": ["reviewer"]},
       status=201)
    assert [u["login"] for u in ok("GET", f"/repos/{repo}/pulls/{number}/requested_reviewers")
            ["users"]] == ["reviewer"]
    ok("POST", f"/repos/{repo}/pulls/{number}/requested_reviewers",
       {"reviewers": ["outsider"]}, status=422)
    ok("DELETE", f"/repos/{repo}/pulls/{number}/requested_reviewers", {"reviewers": ["reviewer"]})
    ok("POST", f"/repos/{repo}/pulls/{number}/requested_reviewers", {"reviewers": ["reviewer"]},
       status=201)

    # Review, refusals, update-branch, merge.
    assert call(api, "PUT", f"/repos/{repo}/pulls/{number}/merge", token,
                {"sha": head}).status == 405
    hub.review(repo, number, "reviewer", "REQUEST_CHANGES", body="please rename")
    hub.review(repo, number, "reviewer", "APPROVE")
    ok("GET", f"/repos/{repo}/pulls/{number}/reviews")
    commented = ok("POST", f"/repos/{repo}/pulls/{number}/reviews", {
        "event": "COMMENT", "body": "noted",
        "comments": [{"path": "widgets.py", "line": 2, "body": "why 42?"}]})
    ok("GET", f"/repos/{repo}/pulls/{number}/reviews/{commented['id']}/comments")
    root = ok("GET", f"/repos/{repo}/pulls/{number}/comments")[0]["id"]
    answer = ok("POST", f"/repos/{repo}/pulls/{number}/comments/{root}/replies",
                {"body": "done"}, status=201)
    assert answer["in_reply_to_id"] == root
    ok("PATCH", f"/repos/{repo}/pulls/comments/{answer['id']}", {"body": "done again"})
    assert ok("GET", f"/repos/{repo}/pulls/comments/{answer['id']}")["body"] == "done again"
    assert call(api, "PUT", f"/repos/{repo}/pulls/{number}/merge", token,
                {"sha": "f" * 40}).status == 409
    hub.push_files(repo, "main", {"CHANGES.md": "main moved\n"}, "main moves", as_user="acme",
                   bypass_rules=True)
    ok("PUT", f"/repos/{repo}/pulls/{number}/update-branch", {"expected_head_sha": head},
       status=202)
    hub.settle()
    head = hub.get_pr(repo, number)["head"]["sha"]
    hub.review(repo, number, "reviewer", "APPROVE")
    ok("GET", f"/repos/{repo}/pulls/{number}")
    merged = ok("PUT", f"/repos/{repo}/pulls/{number}/merge",
                {"sha": head, "merge_method": "merge", "commit_title": "Land #1"})
    assert merged["merged"] is True
    ok("GET", f"/repos/{repo}/pulls/{number}/merge", status=204)

    # A PR closed and reopened.
    hub.push_files(repo, "side", {"side.txt": "side\n"}, "side", as_user="dev")
    side = hub.open_pr(repo, "side", "Side", as_user="dev")
    ok("PATCH", f"/repos/{repo}/pulls/{side}", {"state": "closed"})
    ok("PATCH", f"/repos/{repo}/pulls/{side}", {"state": "open"})
    ok("GET", f"/repos/{repo}/pulls")

    # An App registered from a manifest: the web form's redirect carries the code.
    code = register_from_manifest(hub.base_url, {
        "name": "from-manifest", "url": "http://127.0.0.1:9/",
        "hook_attributes": {"url": "http://127.0.0.1:9/webhook"},
        "redirect_url": "http://127.0.0.1:9/setup", "default_events": ["issue_comment"],
        "callback_urls": ["http://127.0.0.1:9/login/github/callback"],
        "default_permissions": {"issues": "write"}})
    converted = call(api, "POST", f"/app-manifests/{code}/conversions")
    assert converted.status == 201 and converted.body["pem"].startswith("-----BEGIN")
    assert call(api, "POST", f"/app-manifests/{code}/conversions").status == 404  # one use
    # A person signs in to that App (the web application flow); the token reads /user.
    user_token = oauth_sign_in(hub.base_url, converted.body["client_id"],
                               converted.body["client_secret"], "dev",
                               "http://127.0.0.1:9/login/github/callback")
    signed_in = call(api, "GET", "/user", user_token)
    assert signed_in.status == 200 and signed_in.body["login"] == "dev"

    hub.settle()
    deliveries = app_call("GET", "/app/hook/deliveries")
    assert deliveries.status == 200 and deliveries.body
    assert app_call("POST", f"/app/hook/deliveries/{deliveries.body[0]['id']}/attempts"
                    ).status == 202
    hub.settle()


def register_from_manifest(web: str, manifest: dict[str, Any]) -> str:
    """Post the manifest and press "Create GitHub App"; the code GitHub redirects with."""
    import urllib.error
    import urllib.parse
    import urllib.request

    class Keep(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    form = urllib.parse.urlencode({"manifest": json.dumps(manifest), "state": "s1"}).encode()
    with urllib.request.urlopen(f"{web}/settings/apps/new?state=s1", data=form) as page:
        assert b"Create GitHub App" in page.read()
    try:
        urllib.request.build_opener(Keep).open(f"{web}/settings/apps/new/create", data=form)
    except urllib.error.HTTPError as redirect:
        assert redirect.code == 302
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(redirect.headers["Location"]).query)
        assert query["state"] == ["s1"]
        return query["code"][0]
    raise AssertionError("creating the App did not redirect")


@pytest.fixture(scope="module")
def flow(tmp_path_factory: pytest.TempPathFactory):
    """The flow runs once; each check below reads what it recorded."""
    with serving_receiver() as receiver, \
            running_fakehub(tmp_path_factory.mktemp("contract")) as hub:
        world = build_world(hub, receiver)
        hub.record_exchanges(True)
        exercise_every_route(world, tmp_path_factory.mktemp("flow"))
        yield world


# -- the checks ------------------------------------------------------------------------


def test_every_served_route_is_in_the_openapi_description(fakehub, openapi):
    missing = [(m, p) for m, p in served_routes(fakehub) if find_operation(openapi, p, m) is None]
    assert missing == []


def test_rest_exchanges_match_the_openapi_description(flow, openapi):
    exchanges = flow.hub.exchanges()
    exercised = {(e["method"], e["route"].removeprefix(API_PREFIX)) for e in exchanges
                 if e["route"]}
    not_exercised = set(served_routes(flow.hub)) - exercised
    assert not_exercised == set(), "the flow must call every route fakehub serves"

    # The checks below must have something to check: bodies both ways were recorded.
    assert sum(1 for e in exchanges if e["request"] is not None) >= 20
    assert sum(1 for e in exchanges if e["response"] is not None) >= 50
    problems: list[str] = []
    for exchange in exchanges:
        problems.extend(check_exchange(
            openapi, (exchange["route"] or "").removeprefix(API_PREFIX), exchange))
    assert problems == [], "\n".join(problems[:40])


def test_every_webhook_payload_matches_its_schema(flow, webhook_schema):
    deliveries = flow.hub.deliveries()
    events = {(d.event, d.action) for d in deliveries}
    for expected in [("installation", "created"), ("installation_repositories", "added"),
                     ("issues", "opened"), ("issues", "closed"),
                     ("issues", "labeled"), ("issues", "unlabeled"),
                     ("issue_comment", "created"), ("issue_comment", "edited"),
                     ("pull_request", "opened"), ("pull_request", "synchronize"),
                     ("pull_request", "edited"), ("pull_request", "closed"),
                     ("pull_request", "reopened"), ("pull_request_review", "submitted"),
                     ("pull_request", "review_requested"),
                     ("pull_request", "review_request_removed"),
                     ("pull_request_review", "dismissed"),
                     ("check_run", "created"), ("check_run", "completed"),
                     ("check_run", "requested_action"), ("check_run", "rerequested"),
                     ("check_suite", "completed"), ("status", None), ("push", None)]:
        assert expected in events, f"the flow sent no {expected} delivery"
    definitions = webhook_schema["definitions"]
    problems = []
    for delivery in deliveries:
        name = f"{delivery.event}${delivery.action}"
        if name not in definitions:
            name = f"{delivery.event}$event"
        validator = jsonschema.Draft7Validator({"$ref": f"#/definitions/{name}",
                                                "definitions": definitions})
        for error in validator.iter_errors(delivery.payload):
            problems.append(f"{name}: {'/'.join(map(str, error.absolute_path))}: "
                            f"{error.message[:300]}")
    assert problems == [], "\n".join(sorted(set(problems))[:60])


def test_githubs_description_shows_delivery_ids_as_time_based_uuids(openapi):
    """What fakehub's delivery ids copy: every example id of a delivery in the REST
    description is a version-1 UUID."""
    examples = set(re.findall(r'"guid": \{[^{}]*"example": "([^"]+)"', json.dumps(openapi)))
    assert examples and {uuid.UUID(guid).version for guid in examples} == {1}


def test_every_delivery_is_signed_and_described(flow):
    for delivery in flow.hub.deliveries():
        headers = delivery.headers
        assert headers["X-GitHub-Event"] == delivery.event
        # A time-based UUID, as every delivery id GitHub's own description shows.
        assert uuid.UUID(headers["X-GitHub-Delivery"]).version == 1
        assert re.fullmatch(r"[0-9a-f-]{36}", headers["X-GitHub-Delivery"])
        assert headers["X-GitHub-Hook-Installation-Target-Type"] == "integration"
        assert headers["User-Agent"].startswith("GitHub-Hookshot/")
        from fakehub.webhooks import signature

        assert headers["X-Hub-Signature-256"] == signature(flow.app.webhook_secret,
                                                           delivery.body)
        assert delivery.payload["installation"]["id"]
