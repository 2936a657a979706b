"""The App's JWT, installation tokens and retries, against fakehub over real HTTP."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import jwt
import pytest
from gidgethub import BadRequest

from app.github import client as client_module
from app.github.client import (
    SUSPENDED,
    UNAVAILABLE_RECHECK_S,
    UNINSTALLED,
    AppAuth,
    GitHubClient,
    InstallationUnavailable,
    RateLimited,
    RetryPolicy,
    rate_limit_delay,
)
from tests.conftest import hangar_permissions

FAST = RetryPolicy(attempts=4, base_delay_s=0.01, max_delay_s=2, request_timeout_s=1.0,
                   write_spacing_s=0)


@pytest.fixture
def installed(fakehub):
    app = fakehub.create_app(name="hangar", permissions=hangar_permissions())
    fakehub.create_user("acme")
    fakehub.create_repo("acme", "widgets", {"README.md": "# widgets\n"})
    installation = fakehub.install(app.id, "acme", ["acme/widgets"])
    return fakehub, app, installation


def test_jwt_is_backdated_and_short_lived(installed):
    _, app, _ = installed
    auth = AppAuth(app.id, app.private_key_pem, api_url="http://unused", session=None)
    now = 1_700_000_000
    claims = jwt.decode(auth.jwt(now), options={"verify_signature": False})
    assert claims == {"iat": now - 60, "exp": now + 540, "iss": str(app.id)}
    assert claims["exp"] - claims["iat"] <= 600


def test_the_key_is_parsed_once_not_at_every_jwt(installed, monkeypatch):
    """Parsing and checking the RSA key costs ~100x a signature, on the event loop."""
    import jwt.algorithms
    from cryptography.hazmat.primitives import serialization

    parsed = []
    real = serialization.load_pem_private_key

    def counted(*args, **kwargs):
        parsed.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(serialization, "load_pem_private_key", counted)
    monkeypatch.setattr(jwt.algorithms, "load_pem_private_key", counted)
    _, app, _ = installed
    client_module._private_key.cache_clear()
    public = real(app.private_key_pem.encode(), password=None).public_key()
    # A second hangar in the same process (a restart in place) parses it no more.
    for _ in range(2):
        auth = AppAuth(app.id, app.private_key_pem, api_url="http://unused", session=None)
        for now in (1_700_000_000, 1_700_000_100, 1_700_000_200):
            claims = jwt.decode(auth.jwt(now), public, algorithms=["RS256"],
                                options={"verify_exp": False, "verify_iat": False})
            assert claims["iat"] == now - 60
    assert len(parsed) == 1


async def test_installation_token_is_minted_once_and_reused(installed):
    hub, app, installation = installed
    async with aiohttp.ClientSession() as session:
        auth = AppAuth(app.id, app.private_key_pem, api_url=hub.api_url, session=session,
                       retry=FAST)
        first = await auth.installation_token(installation)
        second = await auth.installation_token(installation)
        assert first.token == second.token and first.token.startswith("ghs_")
        assert auth.tokens_minted == 1
        assert first.expires_at > time.time() + 3000
        gh = await auth.client(installation)
        repo = await gh.getitem("/repos/acme/widgets")
        assert repo["full_name"] == "acme/widgets"
    mints = [c for c in hub.api_calls() if c[1].endswith("/access_tokens")]
    assert len(mints) == 1


async def test_a_token_near_expiry_is_replaced(installed):
    hub, app, installation = installed
    async with aiohttp.ClientSession() as session:
        auth = AppAuth(app.id, app.private_key_pem, api_url=hub.api_url, session=session,
                       retry=FAST)
        token = await auth.installation_token(installation)
        # Pretend the cached token expires in four minutes: inside the refresh margin.
        auth._tokens[installation] = token.__class__(
            token=token.token, expires_at=time.time() + 240, permissions={})
        fresh = await auth.installation_token(installation)
        assert fresh.token != token.token and auth.tokens_minted == 2


async def test_a_wrong_key_gets_githubs_401(installed, tmp_path):
    from tests.app.conftest import private_key_pem

    hub, app, installation = installed
    async with aiohttp.ClientSession() as session:
        auth = AppAuth(app.id, private_key_pem().decode(), api_url=hub.api_url,
                       session=session, retry=FAST)
        with pytest.raises(BadRequest) as caught:
            await auth.installation_token(installation)
        assert int(caught.value.status_code) == 401


@pytest.mark.parametrize(
    "fault",
    [
        {"status": 502, "times": 2},
        {"status": 403, "times": 1, "secondary_rate_limit": True, "retry_after": 1},
        {"times": 1, "hang_seconds": 5},
    ],
    ids=["502", "short-secondary-rate-limit", "hang"],
)
async def test_a_read_is_retried_as_github_asks(installed, fault):
    hub, app, installation = installed
    async with aiohttp.ClientSession() as session:
        auth = AppAuth(app.id, app.private_key_pem, api_url=hub.api_url, session=session,
                       retry=FAST)
        gh = await auth.client(installation)
        hub.inject_fault("GET", r"^/repos/acme/widgets$", **fault)
        started = time.monotonic()
        repo = await gh.getitem("/repos/acme/widgets")
        assert repo["full_name"] == "acme/widgets"
        elapsed = time.monotonic() - started
        if fault.get("retry_after"):
            assert elapsed >= 0.9
    if fault.get("hang_seconds"):
        # The hung call was cut at the client's timeout and tried again at once.
        assert FAST.request_timeout_s <= elapsed < fault["hang_seconds"]
        return
    calls = [c for c in hub.api_calls() if c[1] == "/repos/acme/widgets"]
    assert len(calls) == fault["times"] + 1


@pytest.mark.parametrize("fault", [{"rate_limit": True, "status": 403, "retry_after": 60},
                                   {"secondary_rate_limit": True, "retry_after": 30}],
                         ids=["primary", "secondary"])
async def test_a_limited_installation_sends_nothing_until_the_reset(installed, fault):
    hub, app, installation = installed
    async with aiohttp.ClientSession() as session:
        auth = AppAuth(app.id, app.private_key_pem, api_url=hub.api_url, session=session,
                       retry=FAST)
        gh = await auth.client(installation)
        hub.inject_fault("GET", r"^/repos/acme/widgets$", **fault)
        with pytest.raises(RateLimited) as caught:
            await gh.getitem("/repos/acme/widgets")
        assert caught.value.until >= time.time() + 25
        # Another client of the same installation waits too, without asking GitHub.
        other = await auth.client(installation)
        with pytest.raises(RateLimited):
            await other.getitem("/repos/acme/widgets/issues")
        # The App's own calls are another allowance.
        app_gh = await auth.client_for_app()
        assert (await app_gh.getitem("/app", jwt=auth.jwt()))["id"] == app.id
    calls = [c for c in hub.api_calls() if c[1].startswith("/repos/acme/widgets")]
    assert len(calls) == 1


@pytest.mark.parametrize("fault", [{"status": 502, "after": True},
                                   {"hang_seconds": 2, "status": 504, "after": True}],
                         ids=["502", "timeout"])
async def test_a_write_is_never_sent_twice_blindly(installed, fault):
    hub, app, installation = installed
    number = hub.create_issue("acme/widgets", "t", "b", as_user="acme")
    async with aiohttp.ClientSession() as session:
        auth = AppAuth(app.id, app.private_key_pem, api_url=hub.api_url, session=session,
                       retry=FAST)
        gh = await auth.client(installation)
        hub.inject_fault("POST", rf"/issues/{number}/comments$", **fault)
        with pytest.raises(Exception):  # noqa: B017 - a 502 or a timeout: the caller reads back
            await gh.post(f"/repos/acme/widgets/issues/{number}/comments", data={"body": "hi"})

    def posts() -> list[tuple[str, str, int]]:
        return [c for c in hub.api_calls() if c[0] == "POST" and c[1].endswith("/comments")]

    # The failed answer is logged once it is sent, a hung one after its hang: any POST sent
    # again blindly (at the client's timeout, while the first hung) is logged before it.
    deadline = time.monotonic() + 60
    while not any(status == fault["status"] for _, _, status in posts()):
        assert time.monotonic() < deadline, posts()
        await asyncio.sleep(0.05)
    assert len(posts()) == 1
    assert [c["body"] for c in hub.issue_comments("acme/widgets", number)] == ["hi"]


async def test_content_creating_calls_are_spaced(installed):
    hub, app, installation = installed
    number = hub.create_issue("acme/widgets", "t", "b", as_user="acme")
    async with aiohttp.ClientSession() as session:
        spaced = RetryPolicy(write_spacing_s=0.3)
        auth = AppAuth(app.id, app.private_key_pem, api_url=hub.api_url, session=session,
                       retry=spaced)
        gh = await auth.client(installation)
        started = time.monotonic()
        for n in range(4):
            await gh.post(f"/repos/acme/widgets/issues/{number}/comments", data={"body": f"{n}"})
        assert time.monotonic() - started >= 0.9
        reads = time.monotonic()
        for _ in range(4):
            await gh.getitem("/repos/acme/widgets")
        assert time.monotonic() - reads < 0.9  # reads are not spaced


async def test_minting_tokens_creates_no_content_and_is_not_spaced(installed):
    """A job's first clone waited a second for its push token, minted a second after the
    installation's own token on the App's allowance: a mint is a POST, not content."""
    hub, app, installation = installed
    async with aiohttp.ClientSession() as session:
        auth = AppAuth(app.id, app.private_key_pem, api_url=hub.api_url, session=session,
                       retry=RetryPolicy(write_spacing_s=1))
        started = time.monotonic()
        await auth.installation_token(installation)
        await auth.installation_token(installation, repository="acme/widgets",
                                      permissions={"contents": "write"})
        await auth.installation_token(installation, repository="acme/widgets",
                                      permissions={"issues": "write"})
        assert auth.tokens_minted == 3
        assert time.monotonic() - started < 1  # spaced, the three would take 2 s
        gh = await auth.client(installation)
        number = hub.create_issue("acme/widgets", "t", "b", as_user="acme")
        posted = time.monotonic()
        for n in range(2):  # the installation's content is still spaced
            await gh.post(f"/repos/acme/widgets/issues/{number}/comments", data={"body": f"{n}"})
        assert time.monotonic() - posted >= 1


async def test_graphql_mutations_are_spaced_as_writes_and_queries_are_reads(installed):
    from gidgethub import GraphQLException

    from app.github.client import is_mutation
    from app.github.ops import MARK_READY, graphql_url

    hub, app, installation = installed
    query = ("query($owner: String!, $name: String!) { repository(owner: $owner, "
             "name: $name) { id } }")
    assert not is_mutation(query) and is_mutation(MARK_READY)
    async with aiohttp.ClientSession() as session:
        auth = AppAuth(app.id, app.private_key_pem, api_url=hub.api_url, session=session,
                       retry=RetryPolicy(write_spacing_s=0.3))
        gh = await auth.client(installation)
        endpoint = graphql_url(gh)
        started = time.monotonic()
        for _ in range(4):  # a mutation creates content: one after another, spaced
            with pytest.raises(GraphQLException):  # no such pull request; still sent
                await gh.graphql(MARK_READY, endpoint=endpoint, id="PR_none")
        assert time.monotonic() - started >= 0.9
        reads = time.monotonic()
        for _ in range(4):  # right after those writes, queries wait for none of them
            data = await gh.graphql(query, endpoint=endpoint, owner="acme", name="widgets")
            assert data["repository"]["id"]
        assert time.monotonic() - reads < 0.9


async def test_writes_past_the_minutes_allowance_wait_instead_of_being_refused(installed):
    hub, app, installation = installed
    number = hub.create_issue("acme/widgets", "t", "b", as_user="acme")
    async with aiohttp.ClientSession() as session:
        tight = RetryPolicy(write_spacing_s=0, writes_per_minute=3, max_inline_wait_s=0.5)
        auth = AppAuth(app.id, app.private_key_pem, api_url=hub.api_url, session=session,
                       retry=tight)
        gh = await auth.client(installation)
        for n in range(3):  # a burst within the allowance goes at once
            await gh.post(f"/repos/acme/widgets/issues/{number}/comments", data={"body": f"{n}"})
        with pytest.raises(RateLimited, match="3 writes in the last minute"):
            await gh.post(f"/repos/acme/widgets/issues/{number}/comments", data={"body": "x"})
        assert auth.allowance(installation).limited_until > time.time() + 50
        with pytest.raises(RateLimited):  # everything for it waits, reads included
            await gh.getitem("/repos/acme/widgets")
    assert len(hub.issue_comments("acme/widgets", number)) == 3  # nothing was sent


async def test_gives_up_after_its_attempts(installed):
    hub, app, installation = installed
    async with aiohttp.ClientSession() as session:
        auth = AppAuth(app.id, app.private_key_pem, api_url=hub.api_url, session=session,
                       retry=FAST)
        gh = await auth.client(installation)
        hub.inject_fault("GET", r"^/repos/acme/widgets$", status=502, times=None)
        with pytest.raises(Exception) as caught:
            await gh.getitem("/repos/acme/widgets")
        assert "502" in str(caught.value) or "Bad Gateway" in str(caught.value)
        hub.clear_faults()
    calls = [c for c in hub.api_calls() if c[1] == "/repos/acme/widgets"]
    assert len(calls) == FAST.attempts


async def test_not_found_is_not_retried(installed):
    hub, app, installation = installed
    async with aiohttp.ClientSession() as session:
        auth = AppAuth(app.id, app.private_key_pem, api_url=hub.api_url, session=session,
                       retry=FAST)
        gh: GitHubClient = await auth.client(installation)
        with pytest.raises(BadRequest):
            await gh.getitem("/repos/acme/nope")
    assert len([c for c in hub.api_calls() if c[1] == "/repos/acme/nope"]) == 1


@pytest.mark.parametrize(
    ("status", "headers", "message", "expected"),
    [
        (502, {}, "", None),  # not a rate limit: the caller's backoff applies
        (403, {"Retry-After": "7"}, "", 7.0),
        (403, {"x-ratelimit-remaining": "0", "x-ratelimit-reset": "0"}, "", 1.0),
        (403, {}, "You have exceeded a secondary rate limit", 60.0),
        (403, {}, "Resource not accessible by integration", None),
        (404, {}, "", None),
        (422, {}, "Validation Failed", None),
    ],
)
def test_rate_limit_delay(status, headers, message, expected):
    assert rate_limit_delay(status, headers, message) == expected


async def test_one_etag_cache_per_installation_makes_a_repeated_read_free(installed):
    hub, app, installation = installed
    async with aiohttp.ClientSession() as session:
        auth = AppAuth(app.id, app.private_key_pem, api_url=hub.api_url, session=session,
                       retry=FAST)
        first = await (await auth.client(installation)).getitem("/repos/acme/widgets")
        first["name"] = "changed by the caller"  # must not change what the cache returns
        again = await (await auth.client(installation)).getitem("/repos/acme/widgets")
        assert again["name"] == "widgets"
        assert auth.allowance(installation).charged == 1
    statuses = [c[2] for c in hub.api_calls() if c[1] == "/repos/acme/widgets"]
    assert statuses == [200, 304]


async def test_a_push_token_is_narrowed_to_one_repository_and_contents(installed):
    from app.web.upstream import PUSH_PERMISSIONS

    hub, app, installation = installed
    hub.create_repo("acme", "gadgets", {"README.md": "# gadgets\n"}, private=True)
    hub.install(app.id, "acme", ["acme/gadgets"])
    async with aiohttp.ClientSession() as session:
        auth = AppAuth(app.id, app.private_key_pem, api_url=hub.api_url, session=session,
                       retry=FAST)
        full = await auth.installation_token(installation)
        push = await auth.installation_token(installation, repository="acme/widgets",
                                             permissions=PUSH_PERMISSIONS)
        assert push.token != full.token and auth.tokens_minted == 2
        assert dict(push.permissions) == {"contents": "write", "workflows": "write",
                                          "metadata": "read"}
        again = await auth.installation_token(installation, repository="acme/widgets",
                                              permissions=PUSH_PERMISSIONS)
        assert again.token == push.token  # cached like the full one
        gh = GitHubClient(session, base_url=hub.api_url, oauth_token=push.token, retry=FAST)
        with pytest.raises(BadRequest) as caught:  # issues: not in the narrowed token
            await gh.post("/repos/acme/widgets/issues", data={"title": "x"})
        assert int(caught.value.status_code) == 403
        with pytest.raises(BadRequest):  # another repository of the installation
            await gh.getitem("/repos/acme/gadgets/contents/README.md")


async def test_an_installation_without_workflows_still_gets_a_contents_push_token(fakehub):
    from types import SimpleNamespace

    from app.web.keys import AUTH, SETTINGS
    from app.web.upstream import InstallationUpstream
    from proxy import Grant

    older = {k: v for k, v in hangar_permissions().items() if k != "workflows"}
    app = fakehub.create_app(name="hangar-old", permissions=older)
    fakehub.create_user("acme")
    fakehub.create_repo("acme", "widgets", {"README.md": "# widgets\n"})
    installation = fakehub.install(app.id, "acme", ["acme/widgets"])
    async with aiohttp.ClientSession() as session:
        auth = AppAuth(app.id, app.private_key_pem, api_url=fakehub.api_url, session=session,
                       retry=FAST)
        fake_app = {AUTH: auth, SETTINGS: SimpleNamespace(git_base_url="http://git")}
        upstream = InstallationUpstream(fake_app)
        grant = Grant("sb-1", "acme/widgets", "hangar/1-ab", installation)
        _, token = await upstream.credentials(grant)
        gh = GitHubClient(session, base_url=fakehub.api_url, oauth_token=token, retry=FAST)
        assert (await gh.getitem("/repos/acme/widgets"))["name"] == "widgets"
        # Every git request of a sandbox asks again: the refusal is remembered, not re-asked.
        for _ in range(3):
            assert (await upstream.credentials(grant))[1] == token
    minted = [c for c in fakehub.api_calls() if c[1].endswith("/access_tokens")]
    assert [c[2] for c in minted] == [422, 201]  # asked with workflows, then contents only


async def test_etags_are_the_tokens_that_got_them(installed):
    """GitHub's ETags are token-specific: a new token's first read is a plain, charged one
    (no conditional request it cannot win), and its repeat is free again."""
    hub, app, installation = installed
    async with aiohttp.ClientSession() as session:
        auth = AppAuth(app.id, app.private_key_pem, api_url=hub.api_url, session=session,
                       retry=FAST)
        first = await auth.client(installation)
        await first.getitem("/repos/acme/widgets")
        await first.getitem("/repos/acme/widgets")
        auth.forget_token(installation, first.oauth_token)  # the next hour's token
        second = await auth.client(installation)
        assert second.oauth_token != first.oauth_token
        await second.getitem("/repos/acme/widgets")
        await second.getitem("/repos/acme/widgets")
    statuses = [c[2] for c in hub.api_calls() if c[1] == "/repos/acme/widgets"]
    assert statuses == [200, 304, 200, 304]


async def test_fakehubs_etag_is_no_match_for_another_token(installed):
    hub, _, installation = installed
    one, two = hub.installation_token(installation), hub.installation_token(installation)
    async with aiohttp.ClientSession() as session:
        url = f"{hub.api_url}/repos/acme/widgets"
        async with session.get(url, headers={"Authorization": f"token {one}"}) as response:
            etag = response.headers["ETag"]
        for token, status in ((one, 304), (two, 200)):
            async with session.get(url, headers={"Authorization": f"token {token}",
                                                 "If-None-Match": etag}) as response:
                assert response.status == status


async def test_a_revoked_token_is_dropped_and_another_minted_once(installed):
    hub, app, installation = installed
    async with aiohttp.ClientSession() as session:
        auth = AppAuth(app.id, app.private_key_pem, api_url=hub.api_url, session=session,
                       retry=FAST)
        gh = await auth.client(installation)
        hub.revoke_token(gh.oauth_token)
        assert (await gh.getitem("/repos/acme/widgets"))["name"] == "widgets"
        assert auth.tokens_minted == 2
        # The new token is the cached one now; a client made later uses it.
        assert (await auth.client(installation)).oauth_token == gh.oauth_token
        # A second refusal in the same call is GitHub's answer: not minted again.
        hub.inject_fault("GET", r"^/repos/acme/widgets$", status=401, times=2,
                         message="Bad credentials")
        with pytest.raises(BadRequest):
            await gh.getitem("/repos/acme/widgets")
        assert auth.tokens_minted == 3


async def test_a_429_without_words_pauses_the_installation(installed):
    hub, app, installation = installed
    async with aiohttp.ClientSession() as session:
        auth = AppAuth(app.id, app.private_key_pem, api_url=hub.api_url, session=session,
                       retry=FAST)
        gh = await auth.client(installation)
        hub.inject_fault("GET", r"^/repos/acme/widgets$", status=429, message="Too many")
        with pytest.raises(RateLimited) as caught:
            await gh.getitem("/repos/acme/widgets")
        assert caught.value.until >= time.time() + 55


async def test_repeated_secondary_limits_pause_exponentially_longer(installed):
    hub, app, installation = installed
    async with aiohttp.ClientSession() as session:
        auth = AppAuth(app.id, app.private_key_pem, api_url=hub.api_url, session=session,
                       retry=FAST)
        gh = await auth.client(installation)
        pauses = []
        for _ in range(3):
            hub.inject_fault("GET", r"^/repos/acme/widgets$", secondary_rate_limit=True)
            with pytest.raises(RateLimited) as caught:
                await gh.getitem("/repos/acme/widgets")
            pauses.append(caught.value.until - time.time())
            auth.allowance(installation).limited_until = 0  # the pause is over
        assert 55 <= pauses[0] <= 61 and 115 <= pauses[1] <= 121 and 235 <= pauses[2] <= 241


async def test_writes_past_the_hours_allowance_pause_without_asking(installed):
    hub, app, installation = installed
    async with aiohttp.ClientSession() as session:
        auth = AppAuth(app.id, app.private_key_pem, api_url=hub.api_url, session=session,
                       retry=RetryPolicy(write_spacing_s=0, writes_per_hour=2))
        gh = await auth.client(installation)
        for _ in range(2):
            await gh.post("/repos/acme/widgets/issues", data={"title": "t"})
        with pytest.raises(RateLimited) as caught:
            await gh.post("/repos/acme/widgets/issues", data={"title": "t"})
        assert "in the last hour" in str(caught.value)
    posts = [c for c in hub.api_calls() if c[0] == "POST" and c[1].endswith("/issues")]
    assert len(posts) == 2


async def test_an_installation_github_mints_no_token_for_is_asked_no_more(installed):
    """Suspended: GitHub's 403 "This installation has been suspended"; uninstalled: 404.
    Either way the next step asks nothing of GitHub until the installation is usable."""
    hub, app, installation = installed
    async with aiohttp.ClientSession() as session:
        auth = AppAuth(app.id, app.private_key_pem, api_url=hub.api_url, session=session,
                       retry=FAST)
        await auth.installation_token(installation)
        hub.suspend(installation)
        auth.forget_installation(installation)  # its old token would be refused too
        mark = len(hub.api_calls())
        for _ in range(3):
            with pytest.raises(InstallationUnavailable) as refused:
                await auth.installation_token(installation)
            assert (refused.value.installation_id, refused.value.how) == (
                installation, SUSPENDED)
        assert [c[2] for c in hub.api_calls()[mark:]] == [403]  # asked once
        hub.unsuspend(installation)
        auth.installation_usable(installation)
        assert (await auth.installation_token(installation)).token.startswith("ghs_")
        # A `suspend` heard late (webhooks come out of order): asked again after a while.
        auth.installation_ended(installation, SUSPENDED)
        with pytest.raises(InstallationUnavailable):
            await auth.installation_token(installation)
        auth.unavailable[installation] = (SUSPENDED, time.time() - UNAVAILABLE_RECHECK_S)
        assert (await auth.installation_token(installation)).token.startswith("ghs_")
        assert auth.unavailable == {}
        hub.uninstall(installation)
        auth.forget_installation(installation)
        with pytest.raises(InstallationUnavailable, match="was uninstalled"):
            await auth.installation_token(installation)
        assert auth.unavailable[installation][0] == UNINSTALLED


async def test_a_token_of_an_installation_suspended_since_raises_and_marks_it(installed):
    """GitHub refuses a token minted before the suspension with its own 403 ("This
    installation owned by … suspended your access"); a 403 of permissions is not that."""
    hub, app, installation = installed
    async with aiohttp.ClientSession() as session:
        auth = AppAuth(app.id, app.private_key_pem, api_url=hub.api_url, session=session,
                       retry=FAST)
        gh = await auth.client(installation)
        with pytest.raises(BadRequest, match="Resource not accessible"):  # a permission
            await gh.getitem("/user")
        assert auth.unavailable == {}
        hub.suspend(installation)
        with pytest.raises(InstallationUnavailable, match="was suspended"):
            await gh.getitem("/repos/acme/widgets")
        assert auth.unavailable[installation][0] == SUSPENDED
