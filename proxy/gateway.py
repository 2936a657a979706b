"""The model gateway: `/model/{sandbox_id}/…`, where a sandbox's agent reaches its model.

The agent holds a per-sandbox `hgm_` token, good only while its sandbox's git grant
lives (the same life as the push proxy's `hgs_` token). hangar swaps it for the real
credential of the run (an API key or a bearer/subscription token, from hangar's own
environment) and relays to that credential's endpoint. The real key never enters the
sandbox. Answers stream through as they arrive; on the way hangar reads token usage and
the rate-limit headers, and keeps them per run and per credential (every header family
the vendors send, one reading per window: proxy/usage.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import re
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web
from cachetools import TTLCache

from app.redact import redact
from proxy.model_routes import Refuse, decide
from proxy.prices import PRICES, price  # noqa: F401 (the gateway's prices, by model)
from proxy.tables import GateTables, token_hash
from proxy.usage import Reading, UsageLedger, from_headers

log = logging.getLogger(__name__)

TOKEN_PREFIX = "hgm_"
ROUTE = "/model/{sandbox_id}/{tail:.*}"
# How long a checked model token is trusted without reading its row again: the bound for a
# revocation written by another process. One made in this process counts at once.
CHECKED_FOR_S = 30.0
# How far into an answer the credential's limits are written, if it has not ended by then.
LIMITS_AFTER_S = 1.0
# An error answer is read whole and masked before it is relayed; past this it is cut.
ERROR_BODY_BYTES = 64 * 1024
# An answer with no byte for STALL_S is stalled: hangar closes it (the agent sees it end).
STALL_S = 600.0
UPSTREAM_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=STALL_S)
# How often a streaming answer looks whether the sandbox's side is still there.
CLIENT_GONE_POLL_S = 0.5


class Outcome:
    """How one model request ended, as the gateway saw it (`model_requests.outcome`)."""

    OPEN = "open"  # still streaming (or hangar died before it ended)
    OK = "ok"
    STATUS = "status"  # the endpoint answered a status of 400 or more
    ERROR_EVENT = "error_event"  # an error event in a 2xx stream
    CUT = "cut"  # the endpoint's stream ended before its last event
    STALLED = "stalled"  # no byte for STALL_S: hangar closed it
    ABORTED = "aborted"  # the sandbox's side went away first: hangar closed it upstream
    RESTART = "restart"  # open when hangar started again: its restart cut it
    UNREACHABLE = "unreachable"  # no answer at all
# Request headers that are the sandbox's to send; everything about auth is hangar's.
_DROP_REQUEST = {"host", "x-api-key", "authorization", "content-length", "connection",
                 "keep-alive", "proxy-authorization", "te", "trailer", "transfer-encoding",
                 "upgrade", "accept-encoding"}
_DROP_RESPONSE = {"content-length", "connection", "keep-alive", "transfer-encoding",
                  "content-encoding", "upgrade"}
@dataclass(frozen=True)
class Endpoint:
    """Where a credential's requests go and how the credential is sent."""

    base_url: str  # e.g. https://api.anthropic.com (the CLI adds /v1/...)
    secret: str
    auth: str = "x-api-key"  # or "bearer"
    kind: str = "anthropic"  # or "openai": which API's paths are relayed (model_routes)

    @property
    def shown(self) -> str:
        """The base URL as people and sandboxes may see it: no userinfo, no query."""
        parts = urlsplit(self.base_url)
        # The host and port as written (a port out of range must not raise here).
        return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"

    @property
    def secrets(self) -> list[str]:
        """Everything of the endpoint that is secret: its key, and its URL's credentials."""
        parts = urlsplit(self.base_url)
        query = [pair.partition("=")[2] for pair in parts.query.split("&")]
        return [v for v in (self.secret, parts.password, parts.username, *query) if v]


class Endpoints(Protocol):
    def endpoint(self, credential: str) -> Endpoint | None:
        """The endpoint and secret for a credential name, None when hangar has no secret."""
        ...


@dataclass(frozen=True)
class Usage:
    run_id: str
    credential: str
    requests: int
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    last_status: int | None
    last_error: str | None
    reset_at: float | None
    at: float | None = None  # the run's last request


class ModelLedger(UsageLedger, GateTables):
    """Model tokens, per-run usage and per-credential usage windows (proxy/usage.py), in
    hangar's database."""

    def __init__(self, target: Path | str):
        super().__init__(target)
        # The gateway checks the token of every request of every agent; a read of the
        # file after an idle moment costs more CPU than relaying the answer's first bytes.
        self._checked: TTLCache = TTLCache(maxsize=4096, ttl=CHECKED_FOR_S)
        self._checked_lock = threading.Lock()

    # ---- tokens ------------------------------------------------------------------

    def issue(self, sandbox_id: str, *, credential: str, run_id: str) -> str:
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        with self._connect() as db:
            db.execute(
                "INSERT INTO model_tokens (sandbox_id, token_sha256, credential,"
                " run_id, issued_at, revoked_at) VALUES (?, ?, ?, ?, ?, NULL)"
                " ON CONFLICT (sandbox_id) DO UPDATE SET token_sha256 = excluded.token_sha256,"
                " credential = excluded.credential, run_id = excluded.run_id,"
                " issued_at = excluded.issued_at, revoked_at = NULL",
                (sandbox_id, token_hash(token), credential, run_id, time.time()))
        self._credential_ended()  # the sandbox's earlier token, if any
        return token

    def check(self, sandbox_id: str, token: str) -> tuple[str, str] | None:
        """(credential, run id) if `token` is the sandbox's live model token.

        A model token dies with the sandbox's git grant too (`proxy_tokens`), so every
        place that ends a sandbox's access ends its model access as well. A live token is
        remembered until this process revokes or replaces any credential of the file, and
        for CHECKED_FOR_S at most (the bound for an end written by another process).
        """
        key = (sandbox_id, token_hash(token))
        revocations = self._revocation_count()  # before the read: a later one forgets it
        with self._checked_lock:
            known = self._checked.get(key)
        if known is not None and known[0] == revocations:
            return known[1]
        row = self._live_row("model_tokens", "credential, run_id", sandbox_id, token)
        if row is None:
            return None
        grant = (row[0], row[1])
        with self._checked_lock:
            self._checked[key] = (revocations, grant)
        return grant

    def revoke(self, sandbox_id: str) -> None:
        with self._connect() as db:
            db.execute("UPDATE model_tokens SET revoked_at = ? WHERE sandbox_id = ?"
                       " AND revoked_at IS NULL", (time.time(), sandbox_id))
        self._credential_ended()

    # ---- usage and limits ----------------------------------------------------------

    def record(self, run_id: str, credential: str, *, input_tokens: int = 0,
               output_tokens: int = 0, cost_usd: float | None = None,
               status: int | None = None, error: str | None = None,
               reset_at: float | None = None, limits: list[Reading] = (),
               answered_at: float | None = None) -> None:
        """Count one request of the run; with `limits`, the credential's windows read from
        its answer too, in the same transaction (one commit, one wait for the disk).
        `answered_at`: when the model took the request (its answer's headers came)."""
        with self._transaction() as db:
            db.execute(
                "INSERT INTO model_usage (run_id, credential, requests, input_tokens,"
                " output_tokens, cost_usd, last_status, last_error, reset_at, at)"
                " VALUES (?, ?, 1, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT(run_id) DO UPDATE SET requests = model_usage.requests + 1,"
                " input_tokens = model_usage.input_tokens + excluded.input_tokens,"
                " output_tokens = model_usage.output_tokens + excluded.output_tokens,"
                " cost_usd = CASE WHEN excluded.cost_usd IS NULL THEN model_usage.cost_usd"
                "   ELSE COALESCE(model_usage.cost_usd, 0) + excluded.cost_usd END,"
                " last_status = excluded.last_status, last_error = excluded.last_error,"
                " reset_at = COALESCE(excluded.reset_at, model_usage.reset_at),"
                " at = excluded.at",
                (run_id, credential, input_tokens, output_tokens, cost_usd, status, error,
                 reset_at, time.time()))
            if limits:
                self._write(db, credential, limits)
            if answered_at is not None and status is not None and status < 400:
                self._accepted(db, credential, answered_at)

    # ---- requests, one by one ---------------------------------------------------

    def begin(self, run_id: str, credential: str, *, status: int | None, started_at: float,
              outcome: str = Outcome.OPEN, error_type: str | None = None) -> int:
        """A request metered from the first byte of its answer (or, not reached, at once)."""
        ended = None if outcome == Outcome.OPEN else time.time()
        with self._connect() as db:
            row = db.execute(
                "INSERT INTO model_requests (run_id, credential, status, outcome, error_type,"
                " started_at, last_byte_at, ended_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                " RETURNING id",
                (run_id, credential, status, outcome, error_type, started_at,
                 time.time() if status is not None else None, ended)).fetchone()
            return int(row[0])

    def end(self, request_id: int, *, outcome: str, error_type: str | None,
            last_byte_at: float | None) -> None:
        with self._connect() as db:
            db.execute("UPDATE model_requests SET outcome = ?, error_type = ?, last_byte_at ="
                       " COALESCE(?, last_byte_at), ended_at = ? WHERE id = ?",
                       (outcome, error_type, last_byte_at, time.time(), request_id))

    def mark_restarted(self) -> int:
        """At the gateway's start: the requests still open were cut by hangar's restart."""
        with self._connect() as db:
            return db.execute("UPDATE model_requests SET outcome = ?, ended_at = ?"
                              " WHERE outcome = ?",
                              (Outcome.RESTART, time.time(), Outcome.OPEN)).rowcount

    def requests_of(self, run_id: str) -> list[dict[str, Any]]:
        with self._connect() as db:
            rows = db.execute(
                "SELECT id, status, outcome, error_type, started_at, last_byte_at, ended_at"
                " FROM model_requests WHERE run_id = ? ORDER BY id", (run_id,)).fetchall()
        keys = ("id", "status", "outcome", "error_type", "started_at", "last_byte_at",
                "ended_at")
        return [dict(zip(keys, row, strict=True)) for row in rows]

    def usage(self, run_id: str) -> Usage | None:
        with self._connect() as db:
            row = db.execute(
                "SELECT run_id, credential, requests, input_tokens, output_tokens, cost_usd,"
                " last_status, last_error, reset_at, at FROM model_usage WHERE run_id = ?",
                (run_id,)).fetchone()
        return Usage(*row) if row else None

# ---- reading what passes through ---------------------------------------------------


# Only events that name a model, usage or an error are parsed; text deltas, most of a
# stream, are not. An event that carries one has the quoted key; text that happens to
# spell it only costs a parse.
_MAY_METER = re.compile(rb'"(?:usage|model|error|message_stop)"')


class UsageMeter:
    """Token usage read from an answer as it streams by (SSE) or from a JSON body."""

    def __init__(self, content_type: str):
        self.streaming = content_type.startswith("text/event-stream")
        self.json = content_type.startswith("application/json")
        self.model: str | None = None
        self.input_tokens = 0  # every prompt token, cached ones included
        self.cache_read_tokens = 0
        self.cache_write_tokens = 0
        self.output_tokens = 0
        self.error: str | None = None
        self.error_type: str | None = None
        self.ended = False  # the stream's last event came (message_stop, response.*)
        self._pending = b""
        self._body = bytearray()

    def feed(self, chunk: bytes) -> None:
        if self.streaming:
            data = self._pending + chunk
            lines = data.split(b"\n")
            self._pending = lines.pop()
            for line in lines:
                if line.startswith(b"data:") and _MAY_METER.search(line):
                    self._event(line[5:].strip())
        elif self.json and len(self._body) < 4 * 2**20:
            self._body += chunk

    def finish(self) -> None:
        if (self.streaming and self._pending.startswith(b"data:")
                and _MAY_METER.search(self._pending)):
            self._event(self._pending[5:].strip())
        if self.json and self._body:
            try:
                body = json.loads(bytes(self._body))
            except ValueError:
                return
            if isinstance(body, dict):
                self._read(body)

    def _event(self, raw: bytes) -> None:
        try:
            event = json.loads(raw)
        except ValueError:
            return
        if not isinstance(event, dict):
            return
        kind = event.get("type")
        if kind == "message_start":  # Anthropic
            self._read(event.get("message") or {})
        elif kind == "message_delta":
            output = (event.get("usage") or {}).get("output_tokens")
            if isinstance(output, int):
                self.output_tokens = output  # cumulative within the message
        elif kind == "message_stop":
            self.ended = True
        elif kind in ("response.completed", "response.failed", "response.incomplete"):
            self.ended = True
            self._read(event.get("response") or {})  # OpenAI Responses
        elif kind == "error":
            error = event.get("error") or event
            self.error = str(error.get("message") or error.get("type") or "error")[:300]
            self.error_type = str(error.get("type") or "error")[:100]

    def _read(self, body: dict) -> None:
        if isinstance(body.get("model"), str):
            self.model = body["model"]
        usage = body.get("usage")
        if not isinstance(usage, dict):
            return
        inputs = sum(v for k, v in usage.items() if isinstance(v, int) and k in (
            "input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"))
        if inputs:
            self.input_tokens = inputs
            # Anthropic counts cache reads and writes beside input_tokens; OpenAI within it.
            details = usage.get("input_tokens_details")
            cached = details.get("cached_tokens") if isinstance(details, dict) else None
            reads = usage.get("cache_read_input_tokens", cached)
            writes = usage.get("cache_creation_input_tokens")
            self.cache_read_tokens = reads if isinstance(reads, int) else 0
            self.cache_write_tokens = writes if isinstance(writes, int) else 0
        if isinstance(usage.get("output_tokens"), int):
            self.output_tokens = usage["output_tokens"]

    @property
    def cost_usd(self) -> float | None:
        return price(self.model, self.input_tokens, self.output_tokens,
                     cache_read_tokens=self.cache_read_tokens,
                     cache_write_tokens=self.cache_write_tokens)


# ---- the routes ------------------------------------------------------------------------


def _refusal(status: int, message: str) -> web.Response:
    # Both CLIs show the message of an Anthropic- or OpenAI-shaped error body.
    kind = "authentication_error" if status == 401 else "api_error"
    return web.json_response(
        {"type": "error", "error": {"type": kind, "message": message, "code": kind}},
        status=status)


UPSTREAM = web.AppKey("hangar_model_upstream", aiohttp.ClientSession)


@dataclass
class ModelGateway:
    ledger: ModelLedger
    endpoints: Endpoints
    app: web.Application
    # The meter's writes, off the event loop (which relays every other sandbox's stream
    # meanwhile) and out of the default pool, where a slow sandbox call would hold up the
    # end of every answer. A thread's write completes even if its request is cancelled.
    writer: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(
        max_workers=2, thread_name_prefix="model-meter"))
    # hangar is stopping: the answers it cuts now were cut by its restart, not the agent.
    stopping: bool = False

    async def shutting_down(self, _app: web.Application) -> None:
        self.stopping = True

    async def lifetime(self, app: web.Application) -> AsyncIterator[None]:
        """The gateway's own client, for the app's life: connections to each model
        endpoint are kept alive and reused (a TLS handshake with a vendor costs round
        trips every turn of an agent would wait for), in no pool shared with hangar's
        GitHub calls (a hundred streaming agents would hold all of one), with no cookie
        jar (one run's cookies are not sent with another's request; a CLI's own pass
        through as headers). At the end, the last answers' usage is committed."""
        connector = aiohttp.TCPConnector(limit=0)
        cut = await asyncio.to_thread(self.ledger.mark_restarted)
        if cut:
            log.warning("%d model request(s) were cut by hangar's restart", cut)
        try:
            async with aiohttp.ClientSession(
                    connector=connector, cookie_jar=aiohttp.DummyCookieJar(),
                    timeout=UPSTREAM_TIMEOUT, auto_decompress=False) as session:
                app[UPSTREAM] = session
                yield
        finally:
            self.writer.shutdown(wait=True)

    async def _write(self, call: Callable[..., None], *args: Any, **kwargs: Any) -> None:
        await asyncio.get_running_loop().run_in_executor(
            self.writer, functools.partial(call, *args, **kwargs))

    async def relay(self, request: web.Request) -> web.StreamResponse:
        sandbox_id = request.match_info["sandbox_id"]
        token = request.headers.get("x-api-key") or request.headers.get(
            "Authorization", "").removeprefix("Bearer ").strip()
        grant = self.ledger.check(sandbox_id, token) if token else None
        if grant is None:
            return _refusal(401, "hangar: this sandbox's model token is unknown or its run has "
                                 "ended; hangar gives each run its own token")
        credential, run_id = grant
        endpoint = self.endpoints.endpoint(credential)
        if endpoint is None:
            message = (f"hangar has no secret for the credential {credential}: the operator "
                       f"sets {credential} in hangar's environment")
            await self._write(self.ledger.record, run_id, credential, status=401, error=message)
            return _refusal(401, message)
        # Only the calls the CLIs make, under the configured base (proxy/model_routes.py).
        raw_tail = request.raw_path.partition("?")[0].split("/", 3)[3]
        route = decide(endpoint.kind, request.method, raw_tail)
        if isinstance(route, Refuse):
            return _refusal(403, f"hangar: {route.reason[:500]}")
        url = endpoint.base_url.rstrip("/") + "/" + route.path
        if request.query_string:
            url += "?" + request.query_string
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROP_REQUEST}
        # Plain bytes from upstream, so that hangar can read the usage as it passes.
        headers["Accept-Encoding"] = "identity"
        if endpoint.auth == "bearer":
            headers["Authorization"] = f"Bearer {endpoint.secret}"
        else:
            headers["x-api-key"] = endpoint.secret
        body = await request.read()
        started_at = time.time()
        try:
            upstream = await self.app[UPSTREAM].request(request.method, url, headers=headers,
                                                        data=body, allow_redirects=False)
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
            # What the client library says may spell the URL with its credentials.
            said = redact(str(exc) or type(exc).__name__, endpoint.secrets)
            reason = f"hangar could not reach the model endpoint {endpoint.shown}: {said}"
            await self._write(self.ledger.record, run_id, credential, status=None,
                              error=reason[:300])
            await self._write(self.ledger.begin, run_id, credential, status=None,
                              started_at=started_at, outcome=Outcome.UNREACHABLE)
            return _refusal(502, reason)
        async with upstream:
            return await self._stream_back(request, upstream, run_id, credential, started_at,
                                           endpoint)

    async def _stream_back(self, request: web.Request, upstream: aiohttp.ClientResponse,
                           run_id: str, credential: str, started_at: float | None = None,
                           endpoint: Endpoint | None = None) -> web.StreamResponse:
        if upstream.status >= 400 and endpoint is not None:
            return await self._error_back(request, upstream, run_id, credential, endpoint,
                                          started_at or time.time())
        response = _Relayed(status=upstream.status, headers={
            k: v for k, v in upstream.headers.items() if k.lower() not in _DROP_RESPONSE})
        await response.prepare(request)
        answered_at = time.time()
        meter = UsageMeter(upstream.headers.get("Content-Type", ""))
        # Metered from the answer's first byte: its row is written once that byte is on its
        # way to the agent (off its path), so a stream that never ends, or a hangar that dies
        # during it, still leaves the request in the run's record.
        begun: asyncio.Future | None = None
        started_at = started_at or time.time()
        watch = _SandboxSide(request, upstream)
        last_byte_at: float | None = None
        outcome = Outcome.OK
        broken = False  # the answer's bytes stopped short: the agent must see it broken
        reading: list[Reading] | None = None
        error_body = bytearray()
        # The credential's limits are written with the run's usage, in one commit, or
        # LIMITS_AFTER_S into a longer answer, so that queued runs see the credential's
        # use while it streams. Not at its first bytes: the write's thread would take the
        # core that the agent's client needs to read them.
        limit_writes: list[asyncio.Future] = []
        limit_timer: asyncio.TimerHandle | None = None
        last = b""
        content = upstream.content
        try:
            while chunk := await content.readany():  # as it arrives, however small
                last_byte_at = time.time()
                # Each chunk is forwarded before hangar reads it: metering, limits and
                # their writes never stand between the model's bytes and the agent.
                if reading is not None and content.at_eof():
                    last = chunk  # the last bytes leave with the end, in one write
                else:
                    await response.write(chunk)
                if begun is None:
                    begun = asyncio.ensure_future(self._begin(run_id, credential,
                                                              upstream.status, started_at))
                meter.feed(chunk)
                if upstream.status >= 400 and len(error_body) < 2000:
                    error_body += chunk
                if reading is None:
                    reading = from_headers(upstream.headers, upstream.status, time.time())
                    if reading and not content.at_eof():
                        limit_timer = asyncio.get_running_loop().call_later(
                            LIMITS_AFTER_S, self._start_limit_write, limit_writes,
                            credential, reading)
                if last:
                    break
        except (ConnectionError, aiohttp.ClientConnectionResetError):
            outcome, broken = Outcome.ABORTED, True  # the sandbox's side closed first
        except asyncio.CancelledError:
            # The sandbox's side went away, under a server that cancels the handler then
            # (not the gate's default); or hangar is stopping while the answer streams: a
            # restart of hangar cut it, as one that kill -9 cut is found at the next start.
            transport = request.transport
            gone = watch.gone or transport is None or transport.is_closing()
            outcome, broken = (Outcome.ABORTED if gone else Outcome.RESTART), True
            upstream.close()
            raise
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError,
                aiohttp.ClientConnectionError, TimeoutError) as exc:
            broken = True
            outcome = (Outcome.ABORTED if watch.gone else
                       Outcome.STALLED if isinstance(exc, TimeoutError) else Outcome.CUT)
        finally:
            watch.stop()
            if limit_timer is not None:
                limit_timer.cancel()
            limit_written = limit_writes[0] if limit_writes else None
            meter.finish()
            if reading is None:
                reading = from_headers(upstream.headers, upstream.status, time.time())
            error = _error_message(bytes(error_body)) if upstream.status >= 400 else meter.error
            if self.stopping and (watch.gone or broken):
                outcome = Outcome.RESTART
            elif watch.gone and outcome != Outcome.RESTART:
                outcome = Outcome.ABORTED
            elif outcome == Outcome.RESTART:
                pass
            elif upstream.status >= 400:
                outcome = Outcome.STATUS
            elif meter.error_type is not None:
                outcome = Outcome.ERROR_EVENT
            elif outcome == Outcome.OK and meter.streaming and not meter.ended:
                outcome = Outcome.CUT  # the body ended cleanly, the stream did not
            error_type = (_error_type(bytes(error_body)) if upstream.status >= 400
                          else meter.error_type)
            try:
                if limit_written is not None:
                    await limit_written
            finally:
                # Committed before the answer ends: the run's facts are read once its
                # agent has stopped, which may be right after this answer.
                request_id = await begun if begun is not None else None
                # One trip to the writer for the usage and the request's end.
                await self._write(
                    self._settle, begun is None, request_id,
                    dict(run_id=run_id, credential=credential, input_tokens=meter.input_tokens,
                         output_tokens=meter.output_tokens, cost_usd=meter.cost_usd,
                         status=upstream.status, error=error,
                         reset_at=_refused_until(reading) if upstream.status == 429 else None,
                         limits=reading if limit_written is None else (),
                         answered_at=answered_at),
                    dict(run_id=run_id, credential=credential, status=upstream.status,
                         started_at=started_at),
                    dict(outcome=outcome, error_type=error_type, last_byte_at=last_byte_at))
        if not broken and not watch.gone:
            await response.write_eof(last)
        elif request.transport is not None:
            # The answer broke off upstream: the agent sees it broken, not complete.
            request.transport.close()
        return response

    def _settle(self, unbegun: bool, request_id: int | None, usage: dict[str, Any],
                begin: dict[str, Any], end: dict[str, Any]) -> None:
        """In the writer's thread: the answer's usage, then its request's end (begun here
        when not a byte of the answer came)."""
        self.ledger.record(**usage)
        if unbegun:
            request_id = self.ledger.begin(**begin)
        if request_id is not None:
            self.ledger.end(request_id, **end)

    async def _begin(self, run_id: str, credential: str, status: int,
                     started_at: float) -> int | None:
        try:
            return await asyncio.get_running_loop().run_in_executor(
                self.writer, functools.partial(self.ledger.begin, run_id, credential,
                                               status=status, started_at=started_at))
        except Exception:
            log.exception("could not meter a model request's start", extra={"run": run_id})
            return None


    async def _error_back(self, request: web.Request, upstream: aiohttp.ClientResponse,
                          run_id: str, credential: str, endpoint: Endpoint,
                          started_at: float) -> web.Response:
        """An error answer, read whole (it is small) and masked of the endpoint's secrets
        before the sandbox sees it: a proxy may echo the credential it was sent. Metered as
        any answer of its status is (`_settle`)."""
        answered_at = time.time()
        body = bytearray()
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):  # what came is relayed
            # read(n) returns what has arrived: a chunked answer takes more than one.
            while len(body) < ERROR_BODY_BYTES and (
                    chunk := await upstream.content.read(ERROR_BODY_BYTES - len(body))):
                body += chunk
        clean = redact(body.decode("utf-8", "replace"), endpoint.secrets).encode()
        reading = from_headers(upstream.headers, upstream.status, time.time())
        meter = UsageMeter(upstream.headers.get("Content-Type", ""))
        meter.feed(clean)
        meter.finish()
        await self._write(
            self._settle, True, None,
            dict(run_id=run_id, credential=credential, input_tokens=meter.input_tokens,
                 output_tokens=meter.output_tokens, cost_usd=meter.cost_usd,
                 status=upstream.status, error=_error_message(clean),
                 reset_at=_refused_until(reading) if upstream.status == 429 else None,
                 limits=reading, answered_at=answered_at),
            dict(run_id=run_id, credential=credential, status=upstream.status,
                 started_at=started_at),
            dict(outcome=Outcome.STATUS, error_type=_error_type(clean),
                 last_byte_at=time.time() if clean else None))
        return web.Response(status=upstream.status, body=clean, headers={
            k: v for k, v in upstream.headers.items() if k.lower() not in _DROP_RESPONSE})

    def _start_limit_write(self, writes: list[asyncio.Future], credential: str,
                           limits: list[Reading]) -> None:
        writes.append(asyncio.ensure_future(self._write(
            self.ledger.record_readings, credential, limits)))


def _refused_until(readings: list[Reading]) -> float | None:
    """When a refused answer said the model takes requests again: the latest of its
    retry-after and the resets of the windows it reported full (the later one holds)."""
    resets = [r.reset_at for r in readings if r.refused and r.reset_at is not None]
    return max(resets) if resets else None


class _SandboxSide:
    """Watches the sandbox's side of a relayed answer: when it goes away (the agent was
    stopped, its sandbox destroyed), the request upstream is closed too, instead of
    streaming on to no one, or waiting on a model that went quiet."""

    def __init__(self, request: web.Request, upstream: aiohttp.ClientResponse):
        self.gone = False
        self._request = request
        self._upstream = upstream
        self._task = asyncio.ensure_future(self._watch())

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(CLIENT_GONE_POLL_S)
            transport = self._request.transport
            if transport is None or transport.is_closing():
                self.gone = True
                self._upstream.close()
                return

    def stop(self) -> None:
        self._task.cancel()


class _Relayed(web.StreamResponse):
    """A relayed answer: its headers leave in one write with its first bytes (aiohttp's
    own Response does the same), not in a write and a wake-up of the client of their own."""

    _send_headers_immediately = False


def _error_type(body: bytes) -> str | None:
    """The error's type an endpoint's error body names (`overloaded_error`), if any."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    error = data.get("error") if isinstance(data, dict) else None
    kind = error.get("type") if isinstance(error, dict) else None
    return str(kind)[:100] if kind else None


def _error_message(body: bytes) -> str:
    try:
        data = json.loads(body)
        error = data.get("error") if isinstance(data, dict) else None
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:300]
    except ValueError:
        pass
    return body.decode("utf-8", "replace").strip()[:300] or "no reason given"


def setup_gateway(app: web.Application, *, ledger: ModelLedger,
                  endpoints: Endpoints) -> ModelGateway:
    gateway = ModelGateway(ledger=ledger, endpoints=endpoints, app=app)
    app.cleanup_ctx.append(gateway.lifetime)
    app.on_shutdown.append(gateway.shutting_down)
    app.router.add_route("*", ROUTE, gateway.relay)
    return gateway


def model_base_url(proxy_base_url: str, sandbox_id: str) -> str:
    """The base URL a sandbox's agent uses for its model (the CLI appends /v1/…)."""
    return f"{proxy_base_url.rstrip('/')}/model/{sandbox_id}"
