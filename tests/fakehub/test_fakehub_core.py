"""fakehub end to end: App auth, git over HTTP, issues, pulls, compare, webhooks."""

from __future__ import annotations

import base64
import time
from pathlib import Path

from fakehub_helpers import app_jwt, call, clone, commit_file, git


def _token(world) -> str:
    jwt_token = app_jwt(world.app.id, world.app.private_key_pem)
    resp = call(world.hub.api_url, "POST",
                f"/app/installations/{world.installation_id}/access_tokens", jwt_token,
                scheme="Bearer")
    assert resp.status == 201, resp.body
    assert resp.body["token"].startswith("ghs_")
    assert resp.body["repository_selection"] == "selected"
    return resp.body["token"]


def test_app_jwt_is_checked_like_github(world):
    api = world.hub.api_url
    good = app_jwt(world.app.id, world.app.private_key_pem)
    assert call(api, "GET", "/app", good, scheme="Bearer").body["id"] == world.app.id
    future = app_jwt(world.app.id, world.app.private_key_pem, iat_offset=300)
    assert call(api, "GET", "/app", future, scheme="Bearer").status == 401
    too_long = app_jwt(world.app.id, world.app.private_key_pem, lifetime=900)
    assert call(api, "GET", "/app", too_long, scheme="Bearer").status == 401
    expired = app_jwt(world.app.id, world.app.private_key_pem, iat_offset=-700)
    assert call(api, "GET", "/app", expired, scheme="Bearer").status == 401
    other = world.hub.create_app("other")
    forged = app_jwt(world.app.id, other.private_key_pem)
    assert call(api, "GET", "/app", forged, scheme="Bearer").status == 401
    listed = call(api, "GET", "/app/installations", good, scheme="Bearer").body
    assert [i["id"] for i in listed] == [world.installation_id]


def test_installation_token_can_be_narrowed(world):
    world.hub.create_repo("acme", "secret", {"a.txt": "x"}, private=True)
    world.hub.install(world.app.id, "acme", ["secret"])
    jwt_token = app_jwt(world.app.id, world.app.private_key_pem)
    resp = call(world.hub.api_url, "POST",
                f"/app/installations/{world.installation_id}/access_tokens", jwt_token,
                {"repositories": ["widgets"], "permissions": {"contents": "read"}},
                scheme="Bearer")
    assert resp.status == 201
    token = resp.body["token"]
    assert resp.body["permissions"] == {"contents": "read", "metadata": "read"}
    assert call(world.hub.api_url, "GET", "/repos/acme/secret", token).status == 404
    listed = call(world.hub.api_url, "GET", "/installation/repositories", token).body
    assert [r["full_name"] for r in listed["repositories"]] == ["acme/widgets"]


def test_clone_push_and_refusals_over_http(world, tmp_path: Path):
    token = _token(world)
    work = clone(world.hub.git_url(world.repo, token), tmp_path / "w")
    assert (work / "widgets.py").exists()
    sha = commit_file(work, "new.txt", "hello\n", "add new")
    git(work, "push", "--quiet", "origin", "HEAD:refs/heads/feature")
    assert world.hub.ref_sha(world.repo, "feature") == sha
    push = world.hub.wait_for_delivery("push", where=lambda p: p["ref"] == "refs/heads/feature")
    assert push.payload["after"] == sha and push.payload["created"] is True

    anonymous = git(tmp_path, "ls-remote", world.hub.git_url(world.repo), check=False)
    assert anonymous.returncode == 0  # a public repository reads without a token
    world.hub.set_anonymous_git(False)
    refused = git(tmp_path, "ls-remote", world.hub.git_url(world.repo), check=False)
    assert refused.returncode != 0
    world.hub.set_anonymous_git(True)
    refused = git(work, "push", world.hub.git_url(world.repo, world.outsider.token),
                  "HEAD:refs/heads/outsider", check=False)
    assert refused.returncode != 0 and "denied" in refused.stderr


def test_private_repo_needs_a_token(world, tmp_path: Path):
    world.hub.create_repo("acme", "hidden", {"a.txt": "x"}, private=True)
    proc = git(tmp_path, "ls-remote", world.hub.git_url("acme/hidden"), check=False)
    assert proc.returncode != 0
    proc = git(tmp_path, "ls-remote", world.hub.git_url("acme/hidden", world.owner.token))
    assert "refs/heads/main" in proc.stdout


def test_issue_comment_reaction_and_webhook(world, receiver):
    number = world.hub.create_issue(world.repo, "Flaky test", "it flakes", as_user="dev")
    comment_id = world.hub.comment(world.repo, number, "/hangar fix it", as_user="dev")
    delivery = world.hub.wait_for_delivery("issue_comment", "created")
    assert delivery.payload["comment"]["id"] == comment_id
    assert delivery.payload["installation"]["id"] == world.installation_id
    assert delivery.payload["sender"]["login"] == "dev"
    assert delivery.headers["X-Hub-Signature-256"].startswith("sha256=")
    token = _token(world)
    api = world.hub.api_url
    path = f"/repos/{world.repo}/issues/comments/{comment_id}/reactions"
    assert call(api, "POST", path, token, {"content": "eyes"}).status == 201
    assert call(api, "POST", path, token, {"content": "eyes"}).status == 200
    assert [r["content"] for r in world.hub.reactions(world.repo, comment_id)] == ["eyes"]
    status = call(api, "POST", f"/repos/{world.repo}/issues/{number}/comments", token,
                  {"body": "working on it"})
    assert status.status == 201 and status.body["user"]["login"] == "hangar[bot]"
    edited = call(api, "PATCH", f"/repos/{world.repo}/issues/comments/{status.body['id']}",
                  token, {"body": "done"})
    assert edited.body["body"] == "done"
    world.hub.settle()
    deadline = time.monotonic() + 5
    while len(receiver.received) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert receiver.received and receiver.bad_signatures == 0


def test_pull_request_flow_over_rest(world, tmp_path: Path):
    token = _token(world)
    api = world.hub.api_url
    sha = world.hub.push_files(world.repo, "hangar/1-abc", {"widgets.py": "def answer():\n"
                                                            "    return 41 + 1\n",
                                                            "notes.md": "n\n"},
                               "rework answer", as_user="dev")
    created = call(api, "POST", f"/repos/{world.repo}/pulls", token,
                   {"title": "Rework", "head": "hangar/1-abc", "base": "main", "body": "b"})
    assert created.status == 201, created.body
    pr = created.body
    assert pr["user"]["login"] == "hangar[bot]" and pr["head"]["sha"] == sha
    again = call(api, "GET", f"/repos/{world.repo}/pulls/{pr['number']}", token).body
    assert again["mergeable"] is True and again["mergeable_state"] in ("clean", "unstable")
    listed = call(api, "GET", f"/repos/{world.repo}/pulls?head=acme:hangar/1-abc&state=open",
                  token).body
    assert [p["number"] for p in listed] == [pr["number"]]
    none = call(api, "GET", f"/repos/{world.repo}/pulls?head=acme:other", token).body
    assert none == []
    compare = call(api, "GET", f"/repos/{world.repo}/compare/main...hangar/1-abc", token).body
    assert compare["status"] == "ahead" and compare["ahead_by"] == 1
    assert {f["filename"]: f["status"] for f in compare["files"]} == {
        "widgets.py": "modified", "notes.md": "added"}
    assert compare["commits"][0]["commit"]["message"] == "rework answer"
    contents = call(api, "GET", f"/repos/{world.repo}/contents/widgets.py?ref=hangar/1-abc",
                    token).body
    assert b"41 + 1" in base64.b64decode(contents["content"])
    assert call(api, "GET", f"/repos/{world.repo}/contents/nope.yml", token).status == 404
    issue = call(api, "GET", f"/repos/{world.repo}/issues/{pr['number']}", token).body
    assert issue["pull_request"]["url"].endswith(f"/pulls/{pr['number']}")
    opened = world.hub.wait_for_delivery("pull_request", "opened")
    assert opened.payload["pull_request"]["head"]["sha"] == sha


def test_collaborator_permission(world):
    token = _token(world)
    api = world.hub.api_url
    body = call(api, "GET", f"/repos/{world.repo}/collaborators/dev/permission", token).body
    assert (body["permission"], body["role_name"]) == ("write", "write")
    body = call(api, "GET", f"/repos/{world.repo}/collaborators/acme/permission", token).body
    assert body["permission"] == "admin"
    body = call(api, "GET", f"/repos/{world.repo}/collaborators/outsider/permission", token).body
    assert body["permission"] == "read"


def test_unknown_route_and_bad_input_look_like_github(world):
    token = _token(world)
    api = world.hub.api_url
    missing = call(api, "GET", "/repos/acme/widgets/teleport", token)
    assert missing.status == 404 and missing.body["message"] == "Not Found"
    assert "documentation_url" in missing.body
    bad = call(api, "POST", f"/repos/{world.repo}/pulls", token, {"title": "x"})
    assert bad.status == 422 and bad.body["message"] == "Validation Failed"
    assert bad.body["errors"]
    assert "x-ratelimit-remaining" in {k.lower() for k in missing.headers}
