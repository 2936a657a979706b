"""GitHub App authentication and a REST client that retries what GitHub asks it to.

- The App JWT is built here with PyJWT: `iat` 60 s in the past (clock drift), `exp` nine
  minutes ahead (GitHub's limit is ten), `iss` the App id.
- Installation tokens are cached until five minutes before their `expires_at`.
- The client retries 5xx answers, secondary rate limits and exhausted primary limits,
  honouring `Retry-After` and `x-ratelimit-reset`, with capped exponential backoff.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import aiohttp
import jwt
from cachetools import TLRUCache
from gidgethub import HTTPException
from gidgethub.aiohttp import GitHubAPI

from app.metrics import Metrics

log = logging.getLogger(__name__)

USER_AGENT = "hangar"
API_VERSION = "2022-11-28"
TOKEN_REFRESH_MARGIN_S = 300


@dataclass(frozen=True)
class InstallationToken:
    token: str
    expires_at: float
    permissions: Mapping[str, str]


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 5
    base_delay_s: float = 0.5
    max_delay_s: float = 60.0
    request_timeout_s: float = 30.0


class GitHubClient(GitHubAPI):
    """gidgethub's aiohttp client plus retries and a request counter."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        *,
        base_url: str,
        oauth_token: str | None = None,
        retry: RetryPolicy = RetryPolicy(),
        metrics: Metrics | None = None,
    ):
        super().__init__(session, USER_AGENT, oauth_token=oauth_token, base_url=base_url)
        self.retry = retry
        self.metrics = metrics
        self.calls = 0

    async def _request(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes = b""
    ) -> tuple[int, Mapping[str, str], bytes]:
        headers = {**headers, "x-github-api-version": API_VERSION}
        timeout = aiohttp.ClientTimeout(total=self.retry.request_timeout_s)
        for attempt in range(1, self.retry.attempts + 1):
            self.calls += 1
            try:
                async with self._session.request(
                    method, url, headers=headers, data=body, timeout=timeout
                ) as response:
                    payload = await response.read()
                    self._count(f"{response.status // 100}xx")
                    return response.status, response.headers, payload
            except (TimeoutError, aiohttp.ClientError) as exc:
                self._count("error")
                if attempt == self.retry.attempts:
                    raise
                delay = self._backoff(attempt)
                log.warning(
                    "GitHub request failed, retrying",
                    extra={"step": f"{method} {url}", "error": repr(exc)},
                )
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    async def handle_rate_limit_error(
        self, *, method: str, url: str, exception: HTTPException, attempt: int
    ) -> bool:
        if attempt >= self.retry.attempts:
            return False
        delay = retry_delay(exception.status_code, exception.headers, str(exception))
        if delay is None:
            return False
        delay = min(max(delay, self._backoff(attempt)), self.retry.max_delay_s)
        log.warning(
            "GitHub answered %s, retrying in %.1fs", int(exception.status_code), delay,
            extra={"step": f"{method} {url}"},
        )
        await asyncio.sleep(delay)
        return True

    def _backoff(self, attempt: int) -> float:
        delay = self.retry.base_delay_s * 2 ** (attempt - 1)
        return min(delay, self.retry.max_delay_s) * (0.75 + random.random() / 2)

    def _count(self, outcome: str) -> None:
        if self.metrics:
            self.metrics.github_requests.inc(outcome=outcome)


def retry_delay(status: int, headers: Mapping[str, str], message: str = "") -> float | None:
    """Seconds to wait before retrying an answer, or None when it must not be retried."""
    status = int(status)
    lowered = {k.lower(): v for k, v in headers.items()}
    if "retry-after" in lowered:
        try:
            return max(0.0, float(lowered["retry-after"]))
        except ValueError:
            return 1.0
    if status in (403, 429) and lowered.get("x-ratelimit-remaining") == "0":
        try:
            return max(0.0, float(lowered["x-ratelimit-reset"]) - time.time()) + 1
        except (KeyError, ValueError):
            return 60.0
    if status in (403, 429) and "secondary rate limit" in message.lower():
        return 60.0
    if status >= 500:
        return 0.0  # the caller's backoff applies
    return None


class AppAuth:
    """The App's identity: JWTs, and installation tokens cached until shortly before expiry."""

    def __init__(
        self,
        app_id: int,
        private_key_pem: str,
        *,
        api_url: str,
        session: aiohttp.ClientSession,
        metrics: Metrics | None = None,
        retry: RetryPolicy = RetryPolicy(),
    ):
        self.app_id = app_id
        self._key = private_key_pem
        self.api_url = api_url
        self.session = session
        self.metrics = metrics
        self.retry = retry
        self._tokens: TLRUCache[int, InstallationToken] = TLRUCache(
            maxsize=1024,
            ttu=lambda _key, value, _now: value.expires_at - TOKEN_REFRESH_MARGIN_S,
            timer=time.time,
        )
        self._locks: dict[int, asyncio.Lock] = {}
        self.tokens_minted = 0

    def jwt(self, now: float | None = None) -> str:
        now = int(now if now is not None else time.time())
        claims = {"iat": now - 60, "exp": now + 540, "iss": str(self.app_id)}
        return jwt.encode(claims, self._key, algorithm="RS256")

    async def client_for_app(self) -> GitHubClient:
        """A client for /app routes; pass `jwt=self.jwt()` with each call."""
        return GitHubClient(self.session, base_url=self.api_url, metrics=self.metrics,
                            retry=self.retry)

    async def installation_token(self, installation_id: int) -> InstallationToken:
        cached = self._tokens.get(installation_id)
        if cached:
            return cached
        lock = self._locks.setdefault(installation_id, asyncio.Lock())
        async with lock:
            cached = self._tokens.get(installation_id)
            if cached:
                return cached
            gh = await self.client_for_app()
            data = await gh.post(
                "/app/installations/{installation_id}/access_tokens",
                url_vars={"installation_id": str(installation_id)},
                data={},
                jwt=self.jwt(),
            )
            token = InstallationToken(
                token=data["token"],
                expires_at=_parse_time(data["expires_at"]),
                permissions=data.get("permissions") or {},
            )
            self.tokens_minted += 1
            self._tokens[installation_id] = token
            return token

    async def client(self, installation_id: int) -> GitHubClient:
        token = await self.installation_token(installation_id)
        return GitHubClient(
            self.session,
            base_url=self.api_url,
            oauth_token=token.token,
            metrics=self.metrics,
            retry=self.retry,
        )


def _parse_time(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


async def get_or_none(gh: GitHubAPI, url: str, **kwargs: Any) -> Any:
    """GET that answers None for a 404 instead of raising."""
    try:
        return await gh.getitem(url, **kwargs)
    except HTTPException as exc:
        if int(exc.status_code) == 404:
            return None
        raise
