"""A repository renamed by its owner, and an account (a person or an organization) that
changes its login. The repository answers under its new full name everywhere; the old
one keeps working as GitHub's redirects make it work (REST: 301 for GET and HEAD, 307
for the rest, to /repositories/{id}/…; git: a redirect git follows); everything of the
repository stays attached; and the App hears what GitHub sends: `repository` renamed,
or one `installation_target` renamed for the account."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from fakehub_helpers import (
    REPO,
    Response,
    app_jwt,
    call,
    clone,
    commit_file,
    git,
    shape_problems,
)
from test_fakehub_queue import CHECKS, QUEUE, _enqueue, _pr

from fakehub.hub import HubError

NEW = "acme/gadgets"
MOVED_DOCS = ("https://docs.github.com/rest/guides/best-practices-for-using-the-rest-api"
              "#follow-redirects")


class _Unfollowed(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def unfollowed(url: str, method: str = "GET", token: str | None = None,
               body: Any = None) -> Response:
    """One request whose redirect is answered, not followed."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    if token:
        request.add_header("Authorization", f"token {token}")
    try:
        with urllib.request.build_opener(_Unfollowed).open(request, timeout=30) as answer:
            return Response(answer.status, dict(answer.headers), _parsed(answer.read()))
    except urllib.error.HTTPError as refused:
        return Response(refused.code, dict(refused.headers), _parsed(refused.read()))


def _parsed(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return raw.decode(errors="replace")


def token_of(world) -> str:
    return world.hub.installation_token(world.installation_id)


def graphql(world, token: str, query: str) -> dict[str, Any]:
    return call(world.hub.base_url + "/api/graphql", "POST", "", token, {"query": query}).body


def repo_id(world, full_name: str) -> int:
    return world.hub.hub.store.repo(full_name).id


# -- a repository renamed ------------------------------------------------------------------


def test_a_renamed_repository_answers_under_its_new_name(world, tmp_path: Path):
    hub, token = world.hub, token_of(world)
    hub.push_files(REPO, "feature", {"f.txt": "f\n"}, "feature", as_user="dev")
    number = hub.open_pr(REPO, "feature", "A feature", as_user="dev")
    before = call(hub.api_url, "GET", f"/repos/{REPO}", token).body

    assert hub.rename_repository(REPO, "gadgets") == NEW

    shown = call(hub.api_url, "GET", f"/repos/{NEW}", token)
    assert shown.status == 200 and shown.body["id"] == before["id"]
    assert (shown.body["name"], shown.body["full_name"]) == ("gadgets", NEW)
    assert shown.body["clone_url"] == f"{hub.base_url}/{NEW}.git"
    assert shown.body["html_url"] == f"{hub.base_url}/{NEW}"
    assert shown.body["url"] == f"{hub.api_url}/repos/{NEW}"
    assert "widgets" not in json.dumps(shown.body)
    pull = call(hub.api_url, "GET", f"/repos/{NEW}/pulls/{number}", token).body
    assert pull["base"]["repo"]["full_name"] == pull["head"]["repo"]["full_name"] == NEW
    assert "acme/widgets" not in json.dumps(pull)

    found = graphql(world, token, '{ repository(owner: "acme", name: "gadgets") { '
                                  f'nameWithOwner pullRequest(number: {number}) {{ number }} }} }}')
    assert found["data"]["repository"] == {"nameWithOwner": NEW,
                                           "pullRequest": {"number": number}}
    # GraphQL follows renames unless asked not to (`followRenames: false`).
    old = graphql(world, token, '{ repository(owner: "acme", name: "widgets") { nameWithOwner } }')
    assert old["data"]["repository"] == {"nameWithOwner": NEW}
    strict = graphql(world, token, '{ repository(owner: "acme", name: "widgets", '
                                   'followRenames: false) { nameWithOwner } }')
    assert strict["errors"][0]["message"] == ("Could not resolve to a Repository with the name "
                                              "'acme/widgets'.")

    work = clone(hub.git_url(NEW, token), tmp_path / "new")
    assert (work / "widgets.py").exists()
    assert git(work, "ls-remote", "origin", "feature").stdout.split()[0] == \
        pull["head"]["sha"]


def test_the_old_name_redirects_as_githubs_api_does(world):
    hub, token = world.hub, token_of(world)
    number = hub.create_issue(REPO, "Flaky", "it flakes", as_user="dev")
    hub.rename_repository(REPO, "gadgets")
    where = f"{hub.api_url}/repositories/{repo_id(world, NEW)}"

    for method in ("GET", "HEAD"):
        moved = unfollowed(f"{hub.api_url}/repos/{REPO}", method, token)
        assert (moved.status, moved.headers["Location"]) == (301, where)
    moved = unfollowed(f"{hub.api_url}/repos/{REPO}/issues/{number}/comments?per_page=5",
                       "GET", token)
    assert moved.status == 301
    assert moved.headers["Location"] == f"{where}/issues/{number}/comments?per_page=5"
    assert moved.body == {"message": "Moved Permanently", "url": moved.headers["Location"],
                          "documentation_url": MOVED_DOCS}
    # Any other method: 307, to be repeated verbatim at the new address; nothing is done.
    for method, path, body in [("POST", "/issues", {"title": "x"}),
                               ("PATCH", f"/issues/{number}", {"state": "closed"}),
                               ("POST", f"/issues/{number}/comments", {"body": "x"})]:
        moved = unfollowed(f"{hub.api_url}/repos/{REPO}{path}", method, token, body)
        assert (moved.status, moved.headers["Location"]) == (307, where + path), method
        assert moved.body["message"] == "Moved Permanently"
    assert hub.issue_comments(NEW, number) == []
    assert hub.get_issue(NEW, number)["state"] == "open"

    # /repositories/{id}/… serves what /repos/{owner}/{repo}/… does.
    assert call("", "GET", where, token).body == call(hub.api_url, "GET", f"/repos/{NEW}",
                                                      token).body
    created = call("", "POST", f"{where}/issues/{number}/comments", token, {"body": "again"})
    assert created.status == 201 and created.body["body"] == "again"
    assert created.body["html_url"].startswith(f"{hub.base_url}/{NEW}/issues/{number}")
    patched = call("", "PATCH", f"{where}/issues/{number}", token, {"state": "closed"})
    assert patched.status == 200 and hub.get_issue(NEW, number)["state"] == "closed"
    listed = call("", "GET", f"{where}/issues?state=all&per_page=1", token).body
    assert [i["number"] for i in listed] == [number]
    readme = call("", "GET", f"{where}/contents/README.md", token).body
    assert readme["path"] == "README.md"
    jwt = app_jwt(world.app.id, world.app.private_key_pem)
    shown = call("", "GET", f"{where}/installation", jwt, scheme="Bearer").body
    assert shown["id"] == world.installation_id
    assert call("", "GET", f"{hub.api_url}/repositories/999999", token).status == 404
    assert call("", "GET", f"{where}/nothing-here", token).status == 404
    # The REST answers and web pages at the old name carry on to the new one.
    assert call(hub.api_url, "GET", f"/repos/{REPO}/issues/{number}", token).body["number"] \
        == number
    page = unfollowed(f"{hub.base_url}/{REPO}/issues/{number}")
    assert (page.status, page.headers["Location"]) == (
        301, f"{hub.base_url}/{NEW}/issues/{number}")


def test_a_private_old_name_is_redirected_only_for_those_who_may_see_it(world):
    hub = world.hub
    hub.set_private(REPO)
    token = token_of(world)
    hub.rename_repository(REPO, "gadgets")
    assert unfollowed(f"{hub.api_url}/repos/{REPO}", "GET", token).status == 301
    for who in (None, world.outsider.token):
        assert unfollowed(f"{hub.api_url}/repos/{REPO}", "GET", who).status == 404
        assert unfollowed(f"{hub.api_url}/repositories/{repo_id(world, NEW)}", "GET",
                          who).status == 404


def test_git_at_the_old_path_is_redirected_and_keeps_working(world, tmp_path: Path):
    hub = world.hub
    token = token_of(world)
    hub.rename_repository(REPO, "gadgets")

    refs = unfollowed(f"{hub.base_url}/{REPO}.git/info/refs?service=git-upload-pack")
    assert (refs.status, refs.headers["Location"]) == (
        301, f"{hub.base_url}/{NEW}.git/info/refs?service=git-upload-pack")
    bare = unfollowed(f"{hub.base_url}/{REPO}/info/refs?service=git-upload-pack")
    assert bare.headers["Location"] == f"{hub.base_url}/{NEW}/info/refs?service=git-upload-pack"

    cloned = git(tmp_path, "clone", hub.git_url(REPO, token), "old")
    assert f"warning: redirecting to {hub.base_url}/{NEW}.git/" in cloned.stderr
    work = tmp_path / "old"
    sha = commit_file(work, "more.txt", "more\n", "more")
    pushed = git(work, "push", "origin", "HEAD:refs/heads/more")
    assert "redirecting to" in pushed.stderr
    assert hub.ref_sha(NEW, "more") == sha
    # Past the first request git talks to the new address; one that posts to the old path
    # is served there all the same.
    request = urllib.request.Request(
        f"{hub.base_url}/{REPO}.git/git-upload-pack", data=b"0000", method="POST",
        headers={"Content-Type": "application/x-git-upload-pack-request"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.status == 200
        assert answer.headers["Content-Type"] == "application/x-git-upload-pack-result"


def test_the_app_hears_repository_renamed(world, github_webhooks):
    keys, definitions = github_webhooks
    hub = world.hub
    mark = hub.delivery_mark()
    hub.rename_repository(REPO, "gadgets")
    hub.settle()
    sent = [d for d in hub.deliveries(world.app.id) if d.id > mark]
    assert [(d.event, d.action) for d in sent] == [("repository", "renamed")]
    renamed = sent[0]
    payload = renamed.payload
    assert payload["changes"] == {"repository": {"name": {"from": "widgets"}}}
    assert (payload["repository"]["name"], payload["repository"]["full_name"]) == (
        "gadgets", NEW)
    assert payload["repository"]["clone_url"] == f"{hub.base_url}/{NEW}.git"
    assert payload["installation"] == {"id": world.installation_id,
                                       "node_id": payload["installation"]["node_id"]}
    assert payload["sender"]["login"] == "acme"
    assert renamed.headers["X-GitHub-Event"] == "repository"
    assert any(set(payload) <= example for example in keys[("repository", "renamed")])
    assert shape_problems(renamed, definitions) == []


def test_everything_of_the_repository_stays_attached(world):
    hub, token = world.hub, token_of(world)
    hub.protect(REPO, approvals=1, checks=["ci / test"])
    hub.protect_branch(REPO, "main", approvals=1, checks=["ci / test"])
    hub.push_files(REPO, "feature", {"f.txt": "f\n"}, "feature", as_user="dev")
    number = hub.open_pr(REPO, "feature", "A feature", as_user="dev")
    head = hub.get_pr(REPO, number)["head"]["sha"]
    comment = hub.comment(REPO, number, "looks fine", as_user="reviewer")
    hub.complete_check(REPO, head, "ci / test", "success")
    issue = hub.create_issue(REPO, "Flaky", "it flakes", as_user="dev")
    hub.create_repo("acme", "gears")
    hub.install(world.app.id, "acme", ["gears"])

    hub.rename_repository(REPO, "gadgets")

    api = hub.api_url
    assert [c["id"] for c in call(api, "GET", f"/repos/{NEW}/issues/{number}/comments",
                                  token).body] == [comment]
    assert call(api, "GET", f"/repos/{NEW}/issues/{issue}", token).body["title"] == "Flaky"
    runs = call(api, "GET", f"/repos/{NEW}/commits/{head}/check-runs", token).body
    assert [(r["name"], r["conclusion"]) for r in runs["check_runs"]] == [
        ("ci / test", "success")]
    rulesets = call(api, "GET", f"/repos/{NEW}/rulesets", token).body
    assert [r["source"] for r in rulesets] == [NEW]
    rules = call(api, "GET", f"/repos/{NEW}/rules/branches/main", token).body
    assert {r["ruleset_source"] for r in rules} == {NEW}
    assert call(api, "GET", f"/repos/{NEW}/branches/main", token).body["protected"] is True
    assert [r["full_name"] for r in call(api, "GET", "/installation/repositories",
                                         token).body["repositories"]] == [NEW, "acme/gears"]
    # The rules still hold: no approval yet, so no merge; one approval, and it merges.
    refused = call(api, "PUT", f"/repos/{NEW}/pulls/{number}/merge", token,
                   {"merge_method": "merge"})
    assert refused.status == 405
    hub.review(NEW, number, "reviewer")
    merged = call(api, "PUT", f"/repos/{NEW}/pulls/{number}/merge", token,
                  {"merge_method": "merge"})
    assert merged.status == 200, merged.body


def test_a_queued_pull_request_stays_in_the_queue(world):
    hub = world.hub
    hub.set_ruleset(REPO, {"name": "queue", "enforcement": "active", "target": "branch",
                           "rules": [QUEUE, CHECKS]})
    pr = _pr(world, "one", "one.txt")
    assert _enqueue(world, pr)["data"]["enqueuePullRequest"]["mergeQueueEntry"][
        "position"] == 1

    hub.rename_repository(REPO, "gadgets")
    world.repo = NEW

    query = ('{ repository(owner: "acme", name: "gadgets") { pullRequest(number: '
             f'{pr["number"]}) {{ mergeQueueEntry {{ position }} }} }} }}')
    entry = graphql(world, token_of(world), query)["data"]["repository"]["pullRequest"]
    assert entry == {"mergeQueueEntry": {"position": 1}}
    hub.settle()
    group = next(d.payload for d in hub.deliveries(event="merge_group")
                 if d.action == "checks_requested")
    hub.complete_check(NEW, group["merge_group"]["head_sha"], "ci / test", "success")
    assert hub.get_pr(NEW, pr["number"])["merged"]
    hub.settle()
    destroyed = [d.payload for d in hub.deliveries(event="merge_group")
                 if d.action == "destroyed"]
    assert [d["repository"]["full_name"] for d in destroyed] == [NEW]


def test_a_new_repository_under_the_old_name_takes_the_name(world, tmp_path: Path):
    hub, token = world.hub, token_of(world)
    hub.rename_repository(REPO, "gadgets")
    hub.create_repo("acme", "widgets", {"fresh.txt": "fresh\n"})

    shown = call(hub.api_url, "GET", f"/repos/{REPO}", token)
    assert shown.status == 200 and shown.body["id"] != repo_id(world, NEW)
    assert unfollowed(f"{hub.api_url}/repos/{REPO}", "GET", token).status == 200
    fresh = clone(hub.git_url(REPO), tmp_path / "fresh")
    assert (fresh / "fresh.txt").exists() and not (fresh / "widgets.py").exists()
    assert (clone(hub.git_url(NEW), tmp_path / "renamed") / "widgets.py").exists()


def test_a_name_taken_or_not_allowed_is_refused(world):
    world.hub.create_repo("acme", "gears")
    with pytest.raises(HubError, match="Validation Failed"):
        world.hub.rename_repository(REPO, "gears")
    with pytest.raises(HubError, match="not a repository name"):
        world.hub.rename_repository(REPO, "two words")
    with pytest.raises(HubError, match="login dev is taken"):
        world.hub.rename_account("acme", "dev")
    assert world.hub.rename_repository(REPO, "Widgets") == "acme/Widgets"


# -- an account renamed --------------------------------------------------------------------


def test_a_renamed_account_moves_every_repository_and_keeps_its_tokens(world,
                                                                        tmp_path: Path):
    hub = world.hub
    hub.create_repo("acme", "gears", {"g.txt": "g\n"})
    hub.install(world.app.id, "acme", ["gears"])
    token = token_of(world)
    gears = repo_id(world, "acme/gears")

    hub.rename_account("acme", "acme-corp")

    api = hub.api_url
    for name in ("widgets", "gears"):
        shown = call(api, "GET", f"/repos/acme-corp/{name}", token)
        assert shown.body["full_name"] == f"acme-corp/{name}"
        assert shown.body["owner"]["login"] == "acme-corp"
    moved = unfollowed(f"{api}/repos/acme/gears/issues", "POST", token, {"title": "x"})
    assert (moved.status, moved.headers["Location"]) == (
        307, f"{api}/repositories/{gears}/issues")
    assert unfollowed(f"{api}/repos/acme/gears", "GET", token).headers["Location"] == \
        f"{api}/repositories/{gears}"
    # The installation is the account's still, under its new login; tokens keep working.
    jwt = app_jwt(world.app.id, world.app.private_key_pem)
    shown = call(api, "GET", f"/app/installations/{world.installation_id}", jwt,
                 scheme="Bearer").body
    assert shown["account"]["login"] == "acme-corp"
    assert [r["full_name"] for r in call(api, "GET", "/installation/repositories",
                                         token).body["repositories"]] == [
        "acme-corp/widgets", "acme-corp/gears"]
    opened = call(api, "POST", "/repos/acme-corp/widgets/issues", world.owner.token,
                  {"title": "by the owner"})
    assert opened.status == 201 and opened.body["user"]["login"] == "acme-corp"
    # A collaborator who changes their login keeps their role, and their token.
    hub.rename_account("dev", "dev-renamed")
    assert call(api, "GET", "/repos/acme-corp/widgets/collaborators/dev-renamed/permission",
                token).body["permission"] == "write"
    pushed = call(api, "POST", "/repos/acme-corp/widgets/git/refs", world.dev.token,
                  {"ref": "refs/heads/by-dev", "sha": hub.ref_sha("acme-corp/widgets", "main")})
    assert pushed.status == 201, pushed.body
    cloned = git(tmp_path, "clone", hub.git_url("acme/gears", token), "g")
    assert "warning: redirecting to" in cloned.stderr
    assert (tmp_path / "g" / "g.txt").exists()


def test_a_renamed_account_is_announced_once_per_installation(world, github_webhooks):
    keys, definitions = github_webhooks
    hub = world.hub
    other = hub.create_app("other", webhook_url=None)
    hub.create_repo("acme", "gears")
    other_installation = hub.install(other.id, "acme")
    mark = hub.delivery_mark()

    hub.rename_account("acme", "acme-corp")

    hub.settle()
    sent = [d for d in hub.deliveries() if d.id > mark]
    assert sorted((d.app_id, d.event, d.action) for d in sent) == sorted([
        (world.app.id, "installation_target", "renamed"),
        (other.id, "installation_target", "renamed")])
    ours = next(d for d in sent if d.app_id == world.app.id)
    assert ours.installation_id == world.installation_id
    payload = ours.payload
    assert payload["changes"] == {"login": {"from": "acme"}}
    assert payload["target_type"] == "User"
    assert (payload["account"]["login"], payload["account"]["id"]) == (
        "acme-corp", world.owner.id)
    assert payload["account"]["html_url"] == f"{hub.base_url}/acme-corp"
    assert payload["installation"]["id"] == world.installation_id
    assert payload["sender"]["login"] == "acme-corp"
    assert next(d for d in sent if d.app_id == other.id).installation_id == other_installation
    assert not keys.get(("installation_target", "renamed"))  # GitHub gives no example
    assert shape_problems(ours, definitions) == []


def test_a_renamed_organization_is_announced_as_one(fakehub, receiver, github_webhooks):
    _, definitions = github_webhooks
    app = fakehub.create_app("hangar", webhook_url=receiver.url)
    receiver.secret = app.webhook_secret
    fakehub.create_org("initech")
    fakehub.create_repo("initech", "tps")
    installation_id = fakehub.install(app.id, "initech")
    mark = fakehub.delivery_mark()

    fakehub.rename_account("initech", "initrode")

    fakehub.settle()
    renamed = next(d for d in fakehub.deliveries(app.id) if d.id > mark)
    assert (renamed.event, renamed.action) == ("installation_target", "renamed")
    assert renamed.payload["target_type"] == "Organization"
    assert renamed.payload["account"]["type"] == "Organization"
    assert renamed.payload["installation"]["id"] == installation_id
    assert shape_problems(renamed, definitions) == []
    assert [r["headers"]["X-GitHub-Event"] for r in receiver.received][-1:] == [
        "installation_target"]
    token = fakehub.installation_token(installation_id)
    assert call(fakehub.api_url, "GET", "/repos/initrode/tps", token).body["full_name"] == \
        "initrode/tps"
