"""With replicas, an installation's GitHub budget is one: writes are spaced across every
replica's, and a pause one replica meets holds the others."""

from __future__ import annotations

import time

import aiohttp
import pytest

from app.github.client import AppAuth, GitHubClient, RateLimited, RetryPolicy
from app.store import Store


@pytest.fixture
async def two_replicas(postgres_url, app_key_pem):
    stores = [Store(postgres_url, owner=name) for name in ("a", "b")]
    async with aiohttp.ClientSession() as session:
        policy = RetryPolicy(write_spacing_s=0.5, writes_per_minute=3)
        auths = [AppAuth(1, app_key_pem.decode(), api_url="http://127.0.0.1:9/api/v3",
                         session=session, retry=policy, budget=store) for store in stores]
        yield [GitHubClient(session, base_url=auth.api_url, oauth_token="t", retry=policy,
                            allowance=auth.allowance(7)) for auth in auths]
    for store in stores:
        store.close()


async def test_writes_are_spaced_across_replicas_and_a_pause_holds_them_all(two_replicas,
                                                                           monkeypatch):
    monkeypatch.setattr("app.github.client.SHARED_PAUSE_READ_S", 0.0)  # every call reads the pause
    a, b = two_replicas
    started = time.monotonic()
    await a.manage_rate_limit(method="POST", url="/repos/o/r/issues/1/comments")
    await b.manage_rate_limit(method="POST", url="/repos/o/r/issues/2/comments")
    await a.manage_rate_limit(method="PATCH", url="/repos/o/r/issues/comments/3")
    assert time.monotonic() - started >= 0.9  # three writes, each half a second apart
    await b.manage_rate_limit(method="GET", url="/repos/o/r")  # reads are not spaced
    with pytest.raises(RateLimited, match="3 writes in the last minute"):
        await b.manage_rate_limit(method="POST", url="/repos/o/r/issues/4/comments")
    # a met no limit itself, yet the installation is paused for it too, reads included.
    with pytest.raises(RateLimited):
        await a.manage_rate_limit(method="GET", url="/repos/o/r")
