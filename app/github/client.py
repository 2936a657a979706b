"""GitHub App authentication, and a REST client that keeps within GitHub's limits.

- The App JWT is built here with PyJWT: `iat` 60 s in the past (clock drift), `exp` nine
  minutes ahead (GitHub's limit is ten), `iss` the App id.
- Installation tokens are cached until five minutes before their `expires_at`.
- One ETag cache per installation: a GET answered 304 costs nothing against the limit.
- A read is retried after a 5xx or a timeout, with capped exponential backoff. A write
  (POST, PATCH, PUT, DELETE) never is: GitHub may have done it before failing to answer,
  so the caller reads back (its marker, its name) before writing again. A GraphQL query
  is a read; a GraphQL mutation is a write (GitHub counts it as one: 5 points, content).
- When an installation is rate limited (any 429; a 403 with a rate-limit answer), every
  call for it fails at once with `RateLimited` until the reset GitHub named; the engine
  holds the row until then. Secondary limits that repeat wait exponentially longer.
  Content-creating calls are spaced (GitHub asks for a second between them) and kept
  within 80 a minute and 500 an hour.
- ETags are specific to the token that got them (GitHub's are): a conditional request is
  sent only with that token, so a new token's first read of a URL is a plain one.
- A 401 drops the cached installation token and mints a new one, once.
- An installation suspended or uninstalled (a mint refused 403 or 404, a token refused as
  suspended) raises InstallationUnavailable, and no token is asked for it for a while.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import hashlib
import json
import logging
import random
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import aiohttp
import jwt
from cachetools import LRUCache, TLRUCache
from cryptography.hazmat.primitives import serialization
from gidgethub import HTTPException
from gidgethub.aiohttp import GitHubAPI
from graphql import GraphQLError, OperationDefinitionNode, OperationType, parse

from app.metrics import Metrics
from app.pauses import pause
from app.redact import public, redact_json_body

log = logging.getLogger(__name__)

USER_AGENT = "hangar"
API_VERSION = "2022-11-28"
TOKEN_REFRESH_MARGIN_S = 300
READS = ("GET", "HEAD")
_TOKEN_MINT = re.compile(r"/app/installations/\d+/access_tokens$")
# Set while a GraphQL query (no mutation) is sent: a POST that is a read.
_GRAPHQL_READ: contextvars.ContextVar[bool] = contextvars.ContextVar("graphql_read",
                                                                     default=False)
ETAG_CACHE_SIZE = 2048  # URLs remembered per installation


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
    write_spacing_s: float = 1.0  # between content-creating calls of one installation
    # GitHub's secondary limits: at most 80 content-creating requests a minute, 500 an hour.
    writes_per_minute: int = 80
    writes_per_hour: int = 500
    secondary_wait_s: float = 60.0  # a secondary limit that names no time: at least this
    secondary_wait_max_s: float = 1800.0  # ... doubling while they repeat, up to this
    max_inline_wait_s: float = 5.0  # a shorter rate-limit wait is slept; a longer one raises


class RateLimited(Exception):
    """GitHub limited this installation; nothing is sent for it before `until`."""

    def __init__(self, until: float, why: str):
        super().__init__(f"{why}; waiting until {time.strftime('%H:%M:%S', time.gmtime(until))}"
                         " UTC")
        self.until = until


class InstallationUnavailable(Exception):
    """The App's installation is suspended or was uninstalled: GitHub mints no token for
    it, so hangar sends nothing for it until it is usable again."""

    def __init__(self, installation_id: int, how: str):
        super().__init__(f"hangar's GitHub App installation {installation_id} was {how}")
        self.installation_id = installation_id
        self.how = how


# An installation GitHub said was suspended or uninstalled is asked for a token again
# after this long, once a step needs one: webhooks come out of order and redelivered, and
# a `suspend` heard after its `unsuspend` must not shut it out for good.
UNAVAILABLE_RECHECK_S = 300.0

# How an installation stopped being usable (InstallationUnavailable.how).
SUSPENDED = "suspended"
UNINSTALLED = "uninstalled"


def limited_until(exc: BaseException) -> float | None:
    """When a failed step may be tried again, if it failed on a rate limit."""
    if isinstance(exc, RateLimited):
        return exc.until
    if isinstance(exc, HTTPException):
        delay = rate_limit_delay(int(exc.status_code), exc.headers, str(exc))
        if delay is not None:
            return time.time() + delay
    return None


class TokenCache(MutableMapping):
    """One token's view of its installation's ETag cache: GitHub's ETags are specific to
    the token that got them, so an entry made with another token is not sent."""

    def __init__(self, shared: JsonCache, token: str):
        self._shared = shared
        self._prefix = hashlib.sha256(token.encode()).hexdigest()[:16] + " "

    def __getitem__(self, url: str) -> tuple[Any, Any, Any, Any]:
        return self._shared[self._prefix + url]

    def __setitem__(self, url: str, value: tuple[Any, Any, Any, Any]) -> None:
        self._shared[self._prefix + url] = value

    def __delitem__(self, url: str) -> None:
        del self._shared[self._prefix + url]

    def __iter__(self) -> Iterator[str]:
        return (k.removeprefix(self._prefix) for k in self._shared
                if k.startswith(self._prefix))

    def __len__(self) -> int:
        return sum(1 for _ in self)


class JsonCache(MutableMapping):
    """gidgethub's ETag cache, holding answers as JSON: a caller that changes what it got
    back cannot change what the next 304 returns."""

    def __init__(self, size: int = ETAG_CACHE_SIZE):
        self._entries: LRUCache[str, tuple[Any, Any, str, Any]] = LRUCache(size)

    def __getitem__(self, url: str) -> tuple[Any, Any, Any, Any]:
        etag, modified, data, more = self._entries[url]
        return etag, modified, json.loads(data), more

    def __setitem__(self, url: str, value: tuple[Any, Any, Any, Any]) -> None:
        etag, modified, data, more = value
        self._entries[url] = (etag, modified, json.dumps(data), more)

    def __delitem__(self, url: str) -> None:
        del self._entries[url]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


class SharedBudget(Protocol):
    """The installation's budget kept for every replica (app/store.py): its pause, and a
    slot for each content-creating call among all of theirs."""

    def github_limited(self, installation_id: int) -> tuple[float, str]: ...
    def limit_github(self, installation_id: int, until: float, why: str) -> None: ...
    def reserve_github_write(self, installation_id: int, *, spacing: float, per_minute: int,
                             per_hour: int, max_wait: float) -> Any: ...


# How often a replica reads the installation's shared pause before a read of GitHub.
SHARED_PAUSE_READ_S = 1.0


@dataclass
class Allowance:
    """What one installation (or the App itself) may send now: shared by its clients, and
    with replicas (`budget`) by every replica's."""

    limited_until: float = 0.0
    why: str = ""
    next_write_at: float = 0.0
    recent_writes: deque[float] = field(default_factory=deque)  # monotonic times, last minute
    hour_writes: deque[float] = field(default_factory=deque)  # monotonic times, last hour
    secondary_strikes: int = 0  # secondary limits in a row (each waits twice as long)
    last_strike: float = 0.0
    write_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    cache: JsonCache = field(default_factory=JsonCache)
    charged: int = 0  # answers that counted against the limit (not 304)
    budget: SharedBudget | None = None
    installation_id: int = 0
    pause_read_at: float = 0.0

    def limit(self, until: float, why: str) -> None:
        if until > self.limited_until:
            self.limited_until, self.why = until, why
        if self.budget is not None:
            self.budget.limit_github(self.installation_id, until, why)

    def read_shared_pause(self) -> None:
        """Another replica's pause of the installation holds this one too."""
        now = time.monotonic()
        if self.budget is None or now - self.pause_read_at < SHARED_PAUSE_READ_S:
            return
        self.pause_read_at = now
        until, why = self.budget.github_limited(self.installation_id)
        if until > self.limited_until:
            self.limited_until, self.why = until, why

    def strike(self, policy: RetryPolicy, asked: float | None) -> float:
        """A secondary limit: how long to pause, exponentially longer while they repeat
        (a strike is forgotten after the longest pause has passed without another)."""
        now = time.time()
        if now - self.last_strike > policy.secondary_wait_max_s:
            self.secondary_strikes = 0
        self.secondary_strikes += 1
        self.last_strike = now
        base = asked if asked is not None else policy.secondary_wait_s
        return min(policy.secondary_wait_max_s, base * 2 ** (self.secondary_strikes - 1))


class GitHubClient(GitHubAPI):
    """gidgethub's aiohttp client plus an ETag cache, limits and retries of reads."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        *,
        base_url: str,
        oauth_token: str | None = None,
        retry: RetryPolicy = RetryPolicy(),
        metrics: Metrics | None = None,
        allowance: Allowance | None = None,
        renew: Callable[[str], Awaitable[str]] | None = None,
        suspended: Callable[[], InstallationUnavailable] | None = None,
    ):
        self.allowance = allowance or Allowance()
        super().__init__(session, USER_AGENT, oauth_token=oauth_token, base_url=base_url,
                         cache=TokenCache(self.allowance.cache, oauth_token)
                         if oauth_token else None)
        self.retry = retry
        self.metrics = metrics
        self.calls = 0
        self._renew = renew  # drops a refused token and mints another (AppAuth.client)
        # The installation was suspended since its token was minted: what to raise.
        self._suspended = suspended

    async def graphql(self, query: str, *, endpoint: str = "https://api.github.com/graphql",
                      **variables: Any) -> Any:
        """gidgethub sends GraphQL straight to `_request`, past `manage_rate_limit`: here a
        mutation waits its turn among the content-creating calls, and a query is a read
        (never spaced, retried like one)."""
        mutation = is_mutation(query)
        await self.manage_rate_limit(method="POST" if mutation else "GET", url=endpoint)
        reading = _GRAPHQL_READ.set(not mutation)
        try:
            return await super().graphql(query, endpoint=endpoint, **variables)
        finally:
            _GRAPHQL_READ.reset(reading)

    async def manage_rate_limit(self, *, method: str, url: str) -> None:
        allowance = self.allowance
        allowance.read_shared_pause()
        if allowance.limited_until > time.time():
            raise RateLimited(allowance.limited_until, allowance.why)
        if method in READS or _TOKEN_MINT.search(url):
            # Minting an installation token creates no content: the App's few mints (one
            # an hour per installation and scope, one at a time per installation) are not
            # held a second apart, which put a second before a job's first clone.
            return
        if allowance.budget is not None:
            await self._shared_write_slot(allowance)
            return
        async with allowance.write_lock:
            recent, now = allowance.recent_writes, time.monotonic()
            while recent and now - recent[0] >= 60:
                recent.popleft()
            hour = allowance.hour_writes
            while hour and now - hour[0] >= 3600:
                hour.popleft()
            if len(hour) >= self.retry.writes_per_hour:
                # GitHub's content-creation budget for the hour: pause, never be refused.
                allowance.limit(time.time() + hour[0] + 3600 - now,
                                f"{len(hour)} content-creating calls in the last hour, "
                                "GitHub's limit")
                raise RateLimited(allowance.limited_until, allowance.why)
            if len(recent) >= self.retry.writes_per_minute:
                # Wait for the minute to free a write rather than be refused by GitHub.
                wait = recent[0] + 60 - now
                if wait > self.retry.max_inline_wait_s:
                    allowance.limit(time.time() + wait,
                                    f"{len(recent)} writes in the last minute, GitHub's limit")
                    raise RateLimited(allowance.limited_until, allowance.why)
                await pause(wait)
            wait = allowance.next_write_at - time.monotonic()
            if wait > 0:
                await pause(wait)
            allowance.next_write_at = time.monotonic() + self.retry.write_spacing_s
            recent.append(time.monotonic())
            hour.append(time.monotonic())

    async def _shared_write_slot(self, allowance: Allowance) -> None:
        """A place among every replica's writes (spacing, the minute's and the hour's
        budget), or the installation's pause for all of them."""
        policy = self.retry
        async with allowance.write_lock:  # this process's writes ask one at a time
            slot = allowance.budget.reserve_github_write(  # type: ignore[union-attr]
                allowance.installation_id, spacing=policy.write_spacing_s,
                per_minute=policy.writes_per_minute, per_hour=policy.writes_per_hour,
                max_wait=policy.max_inline_wait_s)
        if slot.limited_until:
            if slot.limited_until > allowance.limited_until:
                allowance.limited_until, allowance.why = slot.limited_until, slot.why
            raise RateLimited(slot.limited_until, slot.why)
        if slot.wait > 0:
            await pause(slot.wait)

    async def _request(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes = b""
    ) -> tuple[int, Mapping[str, str], bytes]:
        headers = {**headers, "x-github-api-version": API_VERSION}
        # Whatever hangar writes to GitHub (comments, check runs, PR bodies) is masked of
        # every secret it knows, and names the operator's places by what they are, whoever
        # built it (app.redact).
        clean = redact_json_body(body, public)
        if clean is not body:
            headers = {k: v for k, v in headers.items() if k.lower() != "content-length"}
            body = clean
        timeout = aiohttp.ClientTimeout(total=self.retry.request_timeout_s)
        renewed = False
        for attempt in range(1, self.retry.attempts + 1):
            self.calls += 1
            try:
                async with self._session.request(
                    method, url, headers=headers, data=body, timeout=timeout
                ) as response:
                    payload = await response.read()
                    self._count(f"{response.status // 100}xx")
                    if response.status != 304:
                        self.allowance.charged += 1
                    self._note_remaining(response.status, response.headers)
                    if response.status == 401 and self._renew is not None and not renewed:
                        # A revoked or expired token: drop it, mint another, ask once more
                        # (GitHub did nothing with a request it did not authenticate).
                        renewed = True
                        token = await self._renew(self.oauth_token or "")
                        self.oauth_token = token
                        self._cache = TokenCache(self.allowance.cache, token)
                        headers = {**{k: v for k, v in headers.items()
                                      if k.lower() not in ("authorization", "if-none-match",
                                                           "if-modified-since")},
                                   "authorization": f"token {token}"}
                        continue
                    if response.status == 403 and self._suspended is not None \
                            and _says_suspended(payload):
                        raise self._suspended()
                    return response.status, response.headers, payload
            except (TimeoutError, aiohttp.ClientError) as exc:
                self._count("error")
                # A write that may have reached GitHub is not sent again blindly.
                unsent = isinstance(exc, aiohttp.ClientConnectorError)
                read = method in READS or _GRAPHQL_READ.get()
                if attempt == self.retry.attempts or (not read and not unsent):
                    raise
                delay = self._backoff(attempt)
                log.warning(
                    "GitHub request failed, retrying",
                    extra={"step": f"{method} {url}", "error": repr(exc)},
                )
                await pause(delay)
        raise AssertionError("unreachable")

    def _note_remaining(self, status: int, headers: Mapping[str, str]) -> None:
        """The primary limit used up: nothing more until its reset."""
        lowered = {k.lower(): v for k, v in headers.items()}
        if lowered.get("x-ratelimit-remaining") == "0" and status < 400:
            try:
                reset = float(lowered["x-ratelimit-reset"])
            except (KeyError, ValueError):
                return
            self.allowance.limit(reset + 1, "GitHub's hourly API allowance is used up")

    async def handle_rate_limit_error(
        self, *, method: str, url: str, exception: HTTPException, attempt: int
    ) -> bool:
        status = int(exception.status_code)
        limit = rate_limit_delay(status, exception.headers, str(exception))
        if limit is not None:
            # GitHub did not do what was asked: trying it again is safe, after the wait. The
            # whole installation pauses (its other steps too); a secondary limit that
            # repeats pauses it exponentially longer.
            if is_secondary(status, exception.headers):
                limit = self.allowance.strike(self.retry, retry_after(exception.headers))
            until = time.time() + limit
            why = f"GitHub answered {status}: rate limited"
            self.allowance.limit(until, why)
            if limit > self.retry.max_inline_wait_s or attempt >= self.retry.attempts:
                raise RateLimited(until, why) from exception
            delay = limit
        elif status >= 500 and method in READS and attempt < self.retry.attempts:
            delay = self._backoff(attempt)
        else:
            return False
        log.warning(
            "GitHub answered %s, retrying in %.1fs", status, delay,
            extra={"step": f"{method} {url}"},
        )
        await pause(delay)
        return True

    def _backoff(self, attempt: int) -> float:
        delay = self.retry.base_delay_s * 2 ** (attempt - 1)
        return min(delay, self.retry.max_delay_s) * (0.75 + random.random() / 2)

    def _count(self, outcome: str) -> None:
        if self.metrics:
            self.metrics.github_requests.inc(outcome=outcome)


def retry_after(headers: Mapping[str, str]) -> float | None:
    lowered = {k.lower(): v for k, v in headers.items()}
    try:
        return max(0.0, float(lowered["retry-after"]))
    except (KeyError, ValueError):
        return None


def is_secondary(status: int, headers: Mapping[str, str]) -> bool:
    """A secondary limit (any limit but the primary one, whose remaining is 0)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    return lowered.get("x-ratelimit-remaining") != "0"


@functools.lru_cache(maxsize=256)
def is_mutation(document: str) -> bool:
    """Whether a GraphQL document holds a mutation (one it cannot parse counts as one: it
    is never sent twice blindly)."""
    try:
        parsed = parse(document)
    except GraphQLError:
        return True
    return any(isinstance(d, OperationDefinitionNode) and d.operation == OperationType.MUTATION
               for d in parsed.definitions)


def rate_limit_delay(status: int, headers: Mapping[str, str], message: str = "") -> float | None:
    """Seconds GitHub asks to wait before asking again, or None when this answer is not a
    rate limit (then it must not be retried as one). Any 429 is a limit."""
    if status not in (403, 429):
        return None
    lowered = {k.lower(): v for k, v in headers.items()}
    if "retry-after" in lowered:
        try:
            return max(0.0, float(lowered["retry-after"]))
        except ValueError:
            return 60.0
    if lowered.get("x-ratelimit-remaining") == "0":
        try:
            return max(0.0, float(lowered["x-ratelimit-reset"]) - time.time()) + 1
        except (KeyError, ValueError):
            return 60.0
    if "secondary rate limit" in message.lower() or "rate limit" in message.lower():
        return 60.0  # GitHub's advice when it names no time: at least a minute
    if status == 429:
        return 60.0  # too many requests, whatever the words
    return None


@functools.lru_cache(maxsize=4)
def _private_key(pem: bytes) -> Any:
    """The App's key, parsed and checked once per process: that takes 35-200 ms of CPU and
    signing 2 ms, and given the PEM PyJWT would parse it at every JWT, holding the event
    loop each time. A process that builds hangar again (a restart in place, the tests)
    parses the same key once."""
    return serialization.load_pem_private_key(pem, password=None)


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
        budget: SharedBudget | None = None,
    ):
        self.app_id = app_id
        self.budget = budget  # with replicas: the installations' budgets, in the store
        self._key_pem = private_key_pem
        self._key: Any = None  # the PEM parsed at the first JWT, then kept
        self.api_url = api_url
        self.session = session
        self.metrics = metrics
        self.retry = retry
        self._tokens: TLRUCache[Any, InstallationToken] = TLRUCache(
            maxsize=1024,
            ttu=lambda _key, value, _now: value.expires_at - TOKEN_REFRESH_MARGIN_S,
            timer=time.time,
        )
        self._locks: dict[int, asyncio.Lock] = {}
        # One allowance (limit, spacing, ETag cache) per installation; 0 is the App's own.
        self.allowances: dict[int, Allowance] = {}
        self.tokens_minted = 0
        # Installations suspended or uninstalled (the webhook said so, or a mint's answer
        # did): how, and since when; no token is asked for them for a while.
        self.unavailable: dict[int, tuple[str, float]] = {}

    def allowance(self, installation_id: int) -> Allowance:
        found = self.allowances.get(installation_id)
        if found is None:
            found = self.allowances[installation_id] = Allowance(
                budget=self.budget, installation_id=installation_id)
        return found

    def jwt(self, now: float | None = None) -> str:
        now = int(now if now is not None else time.time())
        claims = {"iat": now - 60, "exp": now + 540, "iss": str(self.app_id)}
        if self._key is None:
            self._key = _private_key(
                self._key_pem.encode() if isinstance(self._key_pem, str) else self._key_pem)
        return jwt.encode(claims, self._key, algorithm="RS256")

    async def client_for_app(self) -> GitHubClient:
        """A client for /app routes; pass `jwt=self.jwt()` with each call."""
        return GitHubClient(self.session, base_url=self.api_url, metrics=self.metrics,
                            retry=self.retry, allowance=self.allowance(0))

    async def installation_token(
        self, installation_id: int, *, repository: str | None = None,
        permissions: Mapping[str, str] | None = None,
    ) -> InstallationToken:
        """A token for the installation; narrowed to one repository ("owner/name") and
        some permissions when asked (a push needs only `contents` on its repository)."""
        key: Any = installation_id
        if repository or permissions:
            key = (installation_id, repository, tuple(sorted((permissions or {}).items())))
        how, since = self.unavailable.get(installation_id, ("", 0.0))
        if how and time.time() < since + UNAVAILABLE_RECHECK_S:
            raise InstallationUnavailable(installation_id, how)
        cached = self._tokens.get(key)
        if cached:
            return cached
        lock = self._locks.setdefault(installation_id, asyncio.Lock())
        async with lock:
            cached = self._tokens.get(key)
            if cached:
                return cached
            body: dict[str, Any] = {}
            if repository:
                body["repositories"] = [repository.split("/", 1)[-1]]
            if permissions:
                body["permissions"] = dict(permissions)
            gh = await self.client_for_app()
            try:
                data = await gh.post(
                    "/app/installations/{installation_id}/access_tokens",
                    url_vars={"installation_id": str(installation_id)},
                    data=body,
                    jwt=self.jwt(),
                )
            except HTTPException as exc:
                refused = _unavailable(exc)
                if refused is None:
                    raise
                self.installation_ended(installation_id, refused)
                raise InstallationUnavailable(installation_id, refused) from exc
            self.unavailable.pop(installation_id, None)  # usable again, whatever was said
            token = InstallationToken(
                token=data["token"],
                expires_at=_parse_time(data["expires_at"]),
                permissions=data.get("permissions") or {},
            )
            self.tokens_minted += 1
            self._tokens[key] = token
            return token

    def forget_installation(self, installation_id: int) -> None:
        """The installation's permissions changed: tokens minted before carry the old."""
        for key in [k for k in list(self._tokens) if k == installation_id
                    or (isinstance(k, tuple) and k[0] == installation_id)]:
            self._tokens.pop(key, None)

    def installation_ended(self, installation_id: int, how: str) -> None:
        """Suspended or uninstalled: its tokens are dropped, and no other is asked for."""
        self.forget_installation(installation_id)
        self.unavailable[installation_id] = (how, time.time())

    def installation_usable(self, installation_id: int) -> None:
        """Unsuspended (or installed again): tokens are minted for it again."""
        self.unavailable.pop(installation_id, None)

    def forget_token(self, installation_id: int, token: str) -> None:
        """GitHub refused this token (401): it is not used again."""
        for key in [k for k, v in list(self._tokens.items()) if v.token == token]:
            self._tokens.pop(key, None)

    async def client(self, installation_id: int) -> GitHubClient:
        token = await self.installation_token(installation_id)

        async def renew(refused: str) -> str:
            self.forget_token(installation_id, refused)
            return (await self.installation_token(installation_id)).token

        def suspended() -> InstallationUnavailable:
            self.installation_ended(installation_id, SUSPENDED)
            return InstallationUnavailable(installation_id, SUSPENDED)

        return GitHubClient(
            self.session,
            base_url=self.api_url,
            oauth_token=token.token,
            metrics=self.metrics,
            retry=self.retry,
            allowance=self.allowance(installation_id),
            renew=renew,
            suspended=suspended,
        )


def _says_suspended(body: bytes) -> bool:
    """A 403 for a token whose installation was suspended after it was minted: GitHub's
    "This installation owned by … suspended your access at …"; not a 403 of permissions
    ("Resource not accessible by integration") or of a rate limit."""
    try:
        message = json.loads(body).get("message", "")
    except (ValueError, AttributeError):
        return False
    return isinstance(message, str) and "installation" in message.lower() \
        and "suspended" in message.lower()


def _unavailable(exc: HTTPException) -> str | None:
    """How a token mint was refused, when the installation cannot have one: GitHub answers
    403 "This installation has been suspended", and 404 for one uninstalled."""
    status = int(exc.status_code)
    if status == 403 and "suspended" in str(exc).lower():
        return SUSPENDED
    if status == 404:
        return UNINSTALLED
    return None


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
