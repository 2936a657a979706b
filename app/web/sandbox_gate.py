"""The sandbox gate: the only part of hangar a sandbox can reach.

hangar's main listener serves people and GitHub (`/webhook`, `/api`, `/metrics`,
`/healthz`); no sandbox reaches it. Sandboxes reach a second aiohttp application, served
on a unix socket of its own (`<data dir>/sandbox-gate/proxy.sock`), which the local and
docker providers bind into each sandbox and relay to from 127.0.0.1:<port> inside it,
and, with `sandbox_port` set, on host:sandbox_port for sandboxes that reach hangar over
a network (kubernetes).

Every route a sandbox may use is registered in `sandbox_routes`, and nowhere else: the
push proxy (`/git/`), the model gateway (`/model/`) and the egress proxy (requests in
proxy form: `CONNECT host:port`, `GET http://host/...`; docs/egress.md).

The gate holds under pressure (`GateGuard`): hangar raises its soft open-files limit to
the hard one at start and keeps a reserve of descriptors that the gate never takes, so
that `/healthz`, webhooks and the API always answer; a connection must finish its
request's headers within a deadline; a sandbox may hold only so many connections; and
what the gate refuses, and the errors of accepting, are counted, not logged one by one.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import resource
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web

from app.datadir import gate_dir
from app.metrics import Metrics
from app.web.keys import EGRESS, MAX_WEBHOOK_BYTES, METRICS, MODELS, SESSION, SETTINGS, TOKENS
from app.web.upstream import CredentialEndpoints, InstallationUpstream
from proxy import setup_proxy
from proxy.egress import setup_egress
from proxy.gateway import setup_gateway
from sandbox.providers._relay import bind_unix_socket


def sandbox_routes(gate: web.Application, hangar: web.Application) -> None:
    """Mount every sandbox-facing route on `gate`. `hangar` is the main application, for
    shared state (the HTTP session, the token registry, settings). Add new sandbox
    services here, under their own prefix."""
    gate[SESSION] = hangar[SESSION]
    setup_proxy(gate, registry=hangar[TOKENS], upstream=InstallationUpstream(hangar),
                session_key=SESSION)
    setup_gateway(gate, ledger=hangar[MODELS], endpoints=CredentialEndpoints(hangar))
    # Proxy requests (CONNECT host:port, GET http://host/...) are egress, whatever path.
    setup_egress(gate, ledger=hangar[EGRESS])


async def serve_gate(app: web.Application) -> AsyncIterator[None]:
    """cleanup_ctx of the main application: the gate runs while hangar runs."""
    settings = app[SETTINGS]
    guard = GateGuard(max_connections=gate_connection_budget(raise_open_files_limit()),
                      per_sandbox=settings.sandbox_gate_connections_per_sandbox,
                      header_timeout_s=settings.sandbox_gate_header_timeout_seconds,
                      metrics=app[METRICS])
    gate = web.Application(client_max_size=MAX_WEBHOOK_BYTES, middlewares=[guard.middleware])
    sandbox_routes(gate, app)
    # An idle connection of a sandbox is closed after a minute, not aiohttp's hour.
    runner = web.AppRunner(gate, access_log=None, shutdown_timeout=2,
                           keepalive_timeout=IDLE_KEEPALIVE_S)
    await runner.setup()
    web_server = runner.server
    if web_server is None:  # setup() makes it
        raise RuntimeError("the sandbox gate's runner has no server after setup")
    loop = asyncio.get_running_loop()
    uncounted = count_accept_errors(loop, app[METRICS])
    servers = [await loop.create_server(guard.protocols(web_server),
                                        sock=bind_unix_socket(gate_dir(settings.data_dir)))]
    if settings.sandbox_port:
        servers.append(await loop.create_server(guard.protocols(web_server),
                                                host=settings.host, port=settings.sandbox_port,
                                                reuse_address=True))
    yield
    for server in servers:
        server.close()
    guard.close_all()
    await runner.cleanup()
    loop.set_exception_handler(uncounted)


log = logging.getLogger(__name__)

# Descriptors the gate never takes: hangar's own listener (webhooks, the API, /healthz),
# its store, its GitHub connections and its subprocesses' pipes.
RESERVED_FILES = 256
# A relayed connection holds a second descriptor upstream (the model, GitHub, a host).
FILES_PER_CONNECTION = 2
IDLE_KEEPALIVE_S = 60.0


def raise_open_files_limit() -> int:
    """Raise the soft open-files limit to the hard one (a default soft limit of 1,024 is
    a few hundred sandbox connections); the soft limit in force after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-files limit from %d to %d: %s", soft, hard,
                        exc)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def gate_connection_budget(open_files: int) -> int:
    """How many connections the gate holds at once: what the limit leaves after the
    reserve, two descriptors each."""
    return max(16, (open_files - RESERVED_FILES) // FILES_PER_CONNECTION)


def sandbox_of(request: web.Request) -> str:
    """Which sandbox a request says it is from: its path (`/git/<id>/`, `/model/<id>/`)
    or its egress credential's user; "?" when it says nothing."""
    if request.method == "CONNECT" or request.raw_path.startswith(("http://", "https://")):
        auth = request.headers.get("Proxy-Authorization", "")
        scheme, _, encoded = auth.partition(" ")
        if scheme.lower() == "basic":
            try:
                user = base64.b64decode(encoded, validate=True).decode().partition(":")[0]
            except (ValueError, UnicodeDecodeError):
                return "?"
            return user.partition(".")[0][:64] or "?"
        return "?"
    parts = request.path.split("/", 3)
    if len(parts) > 2 and parts[1] in ("git", "model"):
        return parts[2][:64] or "?"
    return "?"


class GateGuard:
    """The gate's connections: at most `max_connections` at once, at most `per_sandbox` of
    one sandbox, and each must finish its request's headers within `header_timeout_s` of
    its start (or of its last answer). What it refuses is counted by reason."""

    def __init__(self, *, max_connections: int, per_sandbox: int, header_timeout_s: float,
                 metrics: Metrics | None = None):
        self.max_connections = max_connections
        self.per_sandbox = per_sandbox
        self.header_timeout_s = header_timeout_s
        self.metrics = metrics
        self.open: dict[Any, GateConnection] = {}  # by transport
        self.by_sandbox: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()

    def protocols(self, server: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        return lambda: GateConnection(self, server())

    def count(self, reason: str) -> None:
        self.refused[reason] += 1
        if self.metrics is not None:
            self.metrics.sandbox_gate_refusals.inc(reason=reason)

    def close_all(self) -> None:
        for connection in list(self.open.values()):
            connection.transport.abort()

    @web.middleware
    async def middleware(self, request: web.Request,
                         handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                         ) -> web.StreamResponse:
        connection = self.open.get(request.transport)
        if connection is None:  # not through a guarded listener (tests of the routes)
            return await handler(request)
        connection.headers_read()
        if not connection.claim(sandbox_of(request)):
            self.count("per_sandbox")
            refused = web.json_response({"type": "error", "error": {
                "type": "rate_limit_error", "message": (
                    f"hangar: this sandbox already holds {self.per_sandbox} connections to "
                    "hangar; close some (or reuse them) and try again")}}, status=429)
            refused.force_close()
            return refused
        try:
            response = await handler(request)
        finally:
            connection.answered()
        if response.status in (401, 407):
            # A refused credential may have named another sandbox: it holds nothing.
            response.force_close()
        return response


class GateConnection(asyncio.Protocol):
    """One connection to the gate, counted and timed; aiohttp's handler does the HTTP."""

    def __init__(self, guard: GateGuard, inner: Any):
        self.guard = guard
        self.inner = inner
        self.transport: Any = None
        self.sandbox: str | None = None
        self.admitted = False
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        guard = self.guard
        if len(guard.open) >= guard.max_connections:
            guard.count("gate_full")
            transport.abort()
            return
        self.admitted = True
        guard.open[transport] = self
        self._arm()
        self.inner.connection_made(transport)

    def _arm(self) -> None:
        self.headers_read()
        self._deadline = asyncio.get_running_loop().call_later(self.guard.header_timeout_s,
                                                               self._too_slow)

    def _too_slow(self) -> None:
        self.guard.count("header_timeout")
        self.transport.abort()

    def headers_read(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def answered(self) -> None:
        """The next request on this connection has its own deadline for its headers."""
        if self.admitted and not self.transport.is_closing():
            self._arm()

    def claim(self, sandbox: str) -> bool:
        if self.sandbox == sandbox:
            return True
        if self.sandbox is not None:
            self.guard.by_sandbox[self.sandbox] -= 1
        self.sandbox = None
        if self.guard.by_sandbox[sandbox] >= self.guard.per_sandbox:
            return False
        self.guard.by_sandbox[sandbox] += 1
        self.sandbox = sandbox
        return True

    def data_received(self, data: bytes) -> None:
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.admitted:
            return
        self.headers_read()
        self.guard.open.pop(self.transport, None)
        if self.sandbox is not None:
            self.guard.by_sandbox[self.sandbox] -= 1
            if self.guard.by_sandbox[self.sandbox] <= 0:
                del self.guard.by_sandbox[self.sandbox]
        self.inner.connection_lost(exc)


_ACCEPT_ERRORS = ("socket.accept() out of system resource",)


def count_accept_errors(loop: asyncio.AbstractEventLoop, metrics: Metrics) -> Any:
    """Errors of accepting a connection (out of descriptors) are counted, and one line is
    logged a minute at most, instead of a traceback for each (tens of thousands a minute
    under a flood)."""
    previous = loop.get_exception_handler()
    last_logged = [0.0]

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message") in _ACCEPT_ERRORS:
            metrics.accept_errors.inc()
            now = time.monotonic()
            if now - last_logged[0] >= 60:
                last_logged[0] = now
                log.warning("accepting connections failed: %s (counted in "
                            "hangar_accept_errors_total; logged once a minute)",
                            context.get("exception"))
            return
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handle)
    return previous
