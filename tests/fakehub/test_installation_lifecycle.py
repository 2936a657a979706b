"""An installation taken away by its account's owner: uninstalled, suspended (and back),
or narrowed to fewer repositories. Each answer is GitHub's (status and message), and so
are the webhooks: what is sent, and what is no longer sent."""

from __future__ import annotations

import base64
import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from fakehub_helpers import REPO, Response, app_jwt, call, clone, git, shape_problems

from fakehub.auth import AuthError
from fakehub.hub import HubError
from tests.github_reference import check_exchange, openapi

ISO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
NOT_IN_INSTALLATION = ("There is at least one repository that does not exist or is not "
                       "accessible to the parent installation.")


def as_app(world, method: str, path: str, body: Any = None) -> Response:
    jwt_token = app_jwt(world.app.id, world.app.private_key_pem)
    return call(world.hub.api_url, method, path, jwt_token, body, scheme="Bearer")


def mint(world, body: Any = None) -> Response:
    return as_app(world, "POST", f"/app/installations/{world.installation_id}/access_tokens",
                  body)


def token_of(world, body: Any = None) -> str:
    minted = mint(world, body)
    assert minted.status == 201, minted.body
    return minted.body["token"]


def graphql(world, token: str) -> Response:
    return call(world.hub.base_url + "/api/graphql", "POST", "", token,
                {"query": '{ repository(owner: "acme", name: "widgets") { ref(qualifiedName: '
                          '"refs/heads/main") { branchProtectionRule { id } } } }'})


def git_refs(world, repo: str, token: str) -> tuple[int, str, dict[str, str]]:
    """GET info/refs over git smart HTTP with the token as git sends it (basic auth)."""
    request = urllib.request.Request(
        f"{world.hub.base_url}/{repo}.git/info/refs?service=git-upload-pack",
        headers={"Authorization": "Basic " + base64.b64encode(
            f"x-access-token:{token}".encode()).decode()})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read().decode(errors="replace"), dict(answer.headers)
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode(), dict(refused.headers)


def marks(world, receiver) -> tuple[int, int]:
    """Where the App's deliveries and its endpoint's requests stand, once every delivery
    sent so far (the installation's own, say) has reached the endpoint."""
    world.hub.settle()
    return world.hub.delivery_mark(), len(receiver.received)


def app_heard(world, since: int) -> list[tuple[str, str | None]]:
    """(event, action) of each delivery to the App after `since`, once all are out."""
    world.hub.settle()
    return [(d.event, d.action) for d in world.hub.deliveries(world.app.id) if d.id > since]


def received(receiver, since: int) -> list[tuple[str, str | None]]:
    """What the App's webhook endpoint got, from its `since`-th request on."""
    return [(r["headers"]["X-GitHub-Event"], r["payload"].get("action"))
            for r in receiver.received[since:]]


def people_act(world, repo: str = REPO) -> None:
    """Things people do that GitHub announces to the repository's Apps."""
    number = world.hub.create_issue(repo, "Flaky", "it flakes", as_user="acme")
    world.hub.comment(repo, number, "seen it too", as_user="acme")
    world.hub.push_files(repo, "side", {"side.txt": "side\n"}, "side work", as_user="acme")


PEOPLES_EVENTS = [("issues", "opened"), ("issue_comment", "created"), ("push", None)]


def brief(world, repo: str) -> dict[str, Any]:
    full = world.hub.hub.store.repo(repo)
    return {"id": full.id, "node_id": world.hub.hub.shapes.repo(full)["node_id"],
            "name": full.name, "full_name": full.full_name, "private": full.private}


def refused(answer: Response, status: int, message: str) -> bool:
    """GitHub's error answer: the status, its message, and where its documentation is."""
    return (answer.status == status and answer.body["message"] == message
            and answer.body["documentation_url"].startswith("https://docs.github.com/"))


# -- uninstalling ---------------------------------------------------------------------


def test_uninstalled_the_installation_is_gone_and_its_tokens_with_it(world, tmp_path: Path):
    world.hub.set_private(REPO)  # git sends a token only when the repository asks for one
    token = token_of(world)
    assert call(world.hub.api_url, "GET", "/installation/repositories", token).status == 200
    assert git_refs(world, REPO, token)[0] == 200

    world.hub.uninstall(world.installation_id)

    path = f"/app/installations/{world.installation_id}"
    assert refused(as_app(world, "GET", path), 404, "Not Found")
    assert refused(mint(world), 404, "Not Found")
    assert as_app(world, "GET", "/app/installations").body == []
    assert as_app(world, "GET", "/app").body["installations_count"] == 0
    assert refused(as_app(world, "GET", f"/repos/{REPO}/installation"), 404, "Not Found")
    # The token minted before is refused as any revoked token is, for every call.
    api = world.hub.api_url
    assert refused(call(api, "GET", "/installation/repositories", token), 401, "Bad credentials")
    assert refused(call(api, "GET", f"/repos/{REPO}", token), 401, "Bad credentials")
    assert refused(call(api, "POST", f"/repos/{REPO}/issues", token, {"title": "x"}), 401,
                   "Bad credentials")
    answer = graphql(world, token)
    assert (answer.status, answer.body["message"]) == (401, "Bad credentials")
    status, text, headers = git_refs(world, REPO, token)
    assert (status, text) == (401, "Bad credentials\n")
    assert headers["WWW-Authenticate"] == 'Basic realm="GitHub"'
    ls = git(tmp_path, "ls-remote", world.hub.git_url(REPO, token), check=False)
    assert ls.returncode != 0 and "Authentication failed" in ls.stderr


def test_uninstalled_the_app_hears_it_deleted_and_then_nothing_of_the_account(world, receiver):
    mark = world.hub.delivery_mark()
    people_act(world)
    assert app_heard(world, mark) == PEOPLES_EVENTS  # the App hears them while installed

    mark, got = marks(world, receiver)
    world.hub.uninstall(world.installation_id)
    deleted = world.hub.wait_for_delivery("installation", "deleted", since=mark)
    assert deleted.installation_id == world.installation_id
    assert deleted.payload["installation"]["id"] == world.installation_id
    assert deleted.payload["repositories"] == [brief(world, REPO)]
    assert deleted.payload["sender"]["login"] == "acme"

    people_act(world)
    world.hub.create_repo("acme", "gears", {"a.txt": "a\n"})
    people_act(world, "acme/gears")
    assert app_heard(world, mark) == [("installation", "deleted")]
    assert received(receiver, got) == [("installation", "deleted")]


def test_installed_again_it_is_a_new_installation_and_old_tokens_stay_dead(world, receiver):
    old_token = token_of(world)
    world.hub.uninstall(world.installation_id)
    again = world.hub.install(world.app.id, "acme", ["widgets"])
    assert again != world.installation_id
    assert refused(call(world.hub.api_url, "GET", "/installation/repositories", old_token),
                   401, "Bad credentials")
    world.installation_id = again
    new_token = token_of(world)
    assert call(world.hub.api_url, "GET", "/installation/repositories", new_token).status == 200
    mark = world.hub.delivery_mark()
    people_act(world)
    assert app_heard(world, mark) == PEOPLES_EVENTS


# -- suspending -----------------------------------------------------------------------


def test_suspended_no_token_is_minted_and_none_minted_before_is_honoured(world, tmp_path: Path):
    world.hub.set_private(REPO)  # git sends a token only when the repository asks for one
    token = token_of(world)
    world.hub.suspend(world.installation_id)

    assert refused(mint(world), 403, "This installation has been suspended")
    with pytest.raises(AuthError, match="This installation has been suspended"):
        world.hub.installation_token(world.installation_id)
    # The App still sees the installation, with who suspended it and when.
    shown = as_app(world, "GET", f"/app/installations/{world.installation_id}").body
    assert ISO_TIME.fullmatch(shown["suspended_at"])
    assert shown["suspended_by"]["login"] == "acme"
    assert as_app(world, "GET", "/app/installations").body == [shown]
    assert as_app(world, "GET", f"/repos/{REPO}/installation").body == shown
    # Every use of a token minted before is refused, naming the owner and the time.
    suspended = (f"Sorry. This installation owned by acme suspended your access at "
                 f"{shown['suspended_at']}.")
    api = world.hub.api_url
    assert refused(call(api, "GET", "/installation/repositories", token), 403, suspended)
    assert refused(call(api, "GET", f"/repos/{REPO}/issues", token), 403, suspended)
    assert refused(call(api, "POST", f"/repos/{REPO}/issues", token, {"title": "x"}), 403,
                   suspended)
    answer = graphql(world, token)
    assert (answer.status, answer.body["message"]) == (403, suspended)
    assert git_refs(world, REPO, token)[:2] == (403, suspended + "\n")
    ls = git(tmp_path, "ls-remote", world.hub.git_url(REPO, token), check=False)
    assert ls.returncode != 0 and f"remote: {suspended}" in ls.stderr and "403" in ls.stderr

    world.hub.unsuspend(world.installation_id)
    shown = as_app(world, "GET", f"/app/installations/{world.installation_id}").body
    assert (shown["suspended_at"], shown["suspended_by"]) == (None, None)
    assert call(api, "GET", "/installation/repositories", token).status == 200
    fresh = token_of(world)
    assert call(api, "POST", f"/repos/{REPO}/issues", fresh, {"title": "back"}).status == 201
    assert git_refs(world, REPO, fresh)[0] == 200


def test_suspended_the_app_hears_only_its_suspension_until_it_is_lifted(world, receiver):
    world.hub.create_repo("acme", "gears", {"a.txt": "a\n"})
    mark, got = marks(world, receiver)
    world.hub.suspend(world.installation_id)
    suspend = world.hub.wait_for_delivery("installation", "suspend", since=mark)
    assert ISO_TIME.fullmatch(suspend.payload["installation"]["suspended_at"])
    assert suspend.payload["installation"]["suspended_by"]["login"] == "acme"
    assert suspend.payload["sender"]["login"] == "acme"

    people_act(world)
    world.hub.install(world.app.id, "acme", ["gears"])  # owners may change it meanwhile
    people_act(world, "acme/gears")
    world.hub.suspend(world.installation_id)  # already suspended: nothing new
    assert app_heard(world, mark) == [("installation", "suspend")]

    world.hub.unsuspend(world.installation_id)
    unsuspend = world.hub.wait_for_delivery("installation", "unsuspend", since=mark)
    assert unsuspend.payload["installation"]["suspended_at"] is None
    assert unsuspend.payload["installation"]["suspended_by"] is None
    people_act(world)
    assert app_heard(world, mark) == [("installation", "suspend"),
                                      ("installation", "unsuspend"), *PEOPLES_EVENTS]
    assert received(receiver, got) == app_heard(world, mark)


def test_suspended_answers_match_the_openapi_description(world):
    world.hub.record_exchanges(True)
    world.hub.suspend(world.installation_id)
    as_app(world, "GET", f"/app/installations/{world.installation_id}")
    as_app(world, "GET", "/app/installations")
    mint(world)
    exchanges = world.hub.exchanges()
    assert [e["status"] for e in exchanges] == [200, 200, 403]
    problems = [p for e in exchanges for p in check_exchange(
        openapi(), e["route"].removeprefix("/api/v3"), e)]
    assert problems == []


# -- taking repositories out ------------------------------------------------------------


@pytest.fixture
def two_private(world) -> dict[str, str]:
    """widgets and gears, both private and in the installation; a token from before for
    all of it, and one narrowed to gears."""
    world.hub.set_private(REPO)
    world.hub.create_repo("acme", "gears", {"a.txt": "a\n"}, private=True)
    world.hub.install(world.app.id, "acme", ["gears"])
    return {"all": token_of(world), "gears": token_of(world, {"repositories": ["gears"]})}


def listed(world, token: str) -> list[str]:
    answer = call(world.hub.api_url, "GET", "/installation/repositories", token)
    assert answer.status == 200, answer.body
    return [r["full_name"] for r in answer.body["repositories"]]


def test_a_repository_taken_out_is_out_of_reach_of_every_token(world, two_private,
                                                                 tmp_path: Path):
    api = world.hub.api_url
    assert call(api, "GET", "/repos/acme/gears", two_private["gears"]).status == 200

    world.hub.remove_repositories(world.installation_id, ["acme/gears"])

    fresh = token_of(world)
    for token in (two_private["all"], two_private["gears"], fresh):
        assert refused(call(api, "GET", "/repos/acme/gears", token), 404, "Not Found")
        assert refused(call(api, "POST", "/repos/acme/gears/issues", token, {"title": "x"}),
                       404, "Not Found")
        assert git_refs(world, "acme/gears", token)[:2] == (404, "Repository not found.\n")
    assert call(api, "GET", f"/repos/{REPO}", two_private["all"]).status == 200
    assert listed(world, two_private["all"]) == listed(world, fresh) == [REPO]
    assert listed(world, two_private["gears"]) == []
    assert refused(mint(world, {"repositories": ["gears"]}), 422, NOT_IN_INSTALLATION)
    gears_id = world.hub.hub.store.repo("acme/gears").id
    assert refused(mint(world, {"repository_ids": [gears_id]}), 422, NOT_IN_INSTALLATION)
    assert refused(as_app(world, "GET", "/repos/acme/gears/installation"), 404, "Not Found")
    assert as_app(world, "GET", f"/repos/{REPO}/installation").status == 200
    shown = as_app(world, "GET", f"/app/installations/{world.installation_id}").body
    assert shown["repository_selection"] == "selected"
    cloned = git(tmp_path, "clone", world.hub.git_url("acme/gears", fresh), "g", check=False)
    assert cloned.returncode != 0 and "Repository not found" in cloned.stderr
    assert (clone(world.hub.git_url(REPO, fresh), tmp_path / "w") / "widgets.py").exists()


def test_a_repository_taken_out_is_announced_and_then_silent(world, two_private, receiver):
    mark, got = marks(world, receiver)
    world.hub.remove_repositories(world.installation_id, ["acme/gears"])
    removed = world.hub.wait_for_delivery("installation_repositories", "removed", since=mark)
    assert removed.payload["repositories_removed"] == [brief(world, "acme/gears")]
    assert removed.payload["repositories_removed"][0]["private"] is True
    assert removed.payload["repositories_added"] == []
    assert removed.payload["repository_selection"] == "selected"
    assert removed.payload["requester"] is None
    assert removed.payload["sender"]["login"] == "acme"

    people_act(world, "acme/gears")
    world.hub.remove_repositories(world.installation_id, ["acme/gears"])  # out already
    assert app_heard(world, mark) == [("installation_repositories", "removed")]
    people_act(world)  # the repository still in it is heard as before
    assert app_heard(world, mark) == [("installation_repositories", "removed"),
                                      *PEOPLES_EVENTS]
    assert received(receiver, got) == app_heard(world, mark)


def test_taking_one_out_of_all_repositories_leaves_all_the_others(fakehub, receiver):
    app = fakehub.create_app("narrowed", webhook_url=receiver.url)
    receiver.secret = app.webhook_secret
    fakehub.create_user("acme")
    for name in ("widgets", "gears", "bolts"):
        fakehub.create_repo("acme", name, private=True)
    installation_id = fakehub.install(app.id, "acme")
    jwt_token = app_jwt(app.id, app.private_key_pem)
    mark = fakehub.delivery_mark()

    fakehub.remove_repositories(installation_id, ["acme/gears"])

    shown = call(fakehub.api_url, "GET", f"/app/installations/{installation_id}", jwt_token,
                 scheme="Bearer").body
    assert shown["repository_selection"] == "selected"
    token = fakehub.installation_token(installation_id)
    answer = call(fakehub.api_url, "GET", "/installation/repositories", token).body
    assert answer["repository_selection"] == "selected"
    assert [r["full_name"] for r in answer["repositories"]] == ["acme/widgets", "acme/bolts"]
    removed = fakehub.wait_for_delivery("installation_repositories", "removed", since=mark)
    assert [r["full_name"] for r in removed.payload["repositories_removed"]] == ["acme/gears"]
    # A repository the account creates later is not the installation's either.
    fakehub.create_repo("acme", "nuts")
    fakehub.settle()
    assert [d.action for d in fakehub.deliveries(app.id) if d.id > mark] == ["removed"]


def test_only_the_accounts_own_repositories_can_be_taken_out(world):
    world.hub.create_user("other")
    world.hub.create_repo("other", "widgets")
    with pytest.raises(HubError, match="no repository other/widgets"):
        world.hub.remove_repositories(world.installation_id, ["other/widgets"])
    assert listed(world, token_of(world)) == [REPO]


# -- the payloads, against GitHub's examples and schemas -----------------------------------


def test_each_announcement_is_shaped_as_githubs(world, two_private, github_webhooks):
    keys, definitions = github_webhooks
    mark = world.hub.delivery_mark()
    world.hub.remove_repositories(world.installation_id, ["acme/gears"])
    world.hub.suspend(world.installation_id)
    world.hub.unsuspend(world.installation_id)
    world.hub.uninstall(world.installation_id)
    world.hub.settle()
    sent = [d for d in world.hub.deliveries(world.app.id) if d.id > mark]
    assert [(d.event, d.action) for d in sent] == [
        ("installation_repositories", "removed"), ("installation", "suspend"),
        ("installation", "unsuspend"), ("installation", "deleted")]
    for delivery in sent:
        assert set(delivery.payload) in keys[(delivery.event, delivery.action)], delivery.action
        assert shape_problems(delivery, definitions) == []
    suspend = sent[1].payload["installation"]
    assert set(suspend["suspended_by"]) >= {"login", "id", "node_id", "type", "url"}
