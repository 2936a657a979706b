"""The App's JWT, installation tokens and retries, against fakehub over real HTTP."""

from __future__ import annotations

import time

import aiohttp
import jwt
import pytest
from gidgethub import BadRequest

from app.github import AppAuth, GitHubClient, RetryPolicy, retry_delay

FAST = RetryPolicy(attempts=4, base_delay_s=0.01, max_delay_s=2, request_timeout_s=1.0)


@pytest.fixture
def installed(fakehub):
    app = fakehub.create_app(name="hangar")
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
        {"status": 403, "times": 1, "rate_limit": True},
        {"times": 1, "hang_seconds": 5},
    ],
    ids=["502", "secondary-rate-limit", "primary-rate-limit", "hang"],
)
async def test_retries_what_github_asks_it_to(installed, fault):
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
        (502, {}, "", 0.0),
        (403, {"Retry-After": "7"}, "", 7.0),
        (403, {"x-ratelimit-remaining": "0", "x-ratelimit-reset": "0"}, "", 1.0),
        (403, {}, "You have exceeded a secondary rate limit", 60.0),
        (403, {}, "Resource not accessible by integration", None),
        (404, {}, "", None),
        (422, {}, "Validation Failed", None),
    ],
)
def test_retry_delay(status, headers, message, expected):
    assert retry_delay(status, headers, message) == expected
