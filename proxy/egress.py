"""Egress: the sandbox's HTTP(S) forward proxy, on the sandbox gate, with an allowlist.

A sandbox has no route out but hangar's sandbox gate. For everything besides git and
the model, its processes get `HTTPS_PROXY`/`HTTP_PROXY` pointing at the gate with a
per-sandbox credential (`http://<sandbox>:<hge_ token>@127.0.0.1:<port>`). The gate
takes `CONNECT host:port` (tunnels, for HTTPS) and plain-HTTP requests in absolute form
(`GET http://host/path`), and lets a connection through only when the environment's
allowlist (the operator's, perhaps narrowed by the repository) names the host and port,
and the host resolves to public addresses only — unless the operator pinned that exact
host to an address (`egress.hosts`), which is the only way to reach a private one.

Every refusal is counted per run and host:port, with its first and last time; the
status comment and the `hangar / agent` check run list them.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import ipaddress
import json
import logging
import re
import secrets
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

from proxy.tables import GateTables, token_hash

log = logging.getLogger(__name__)

TOKEN_PREFIX = "hge_"
DEFAULT_PORTS = (80, 443)
# Distinct host:port rows kept per run, every one listed in the run's check run; past
# that, refusals are counted under one row (a sandbox cannot fill the store).
MAX_BLOCKED_ROWS = 1000
OTHER_HOSTS = "(other hosts)"
CONNECT_TIMEOUT_S = 30
IDLE_TIMEOUT_S = 600  # a tunnel or an answer with nothing passing this long is ended
# Headers of the sandbox's request that are about the hop to hangar, not the origin.
_HOP_HEADERS = {"proxy-authorization", "proxy-connection", "connection", "keep-alive",
                "te", "trailer", "transfer-encoding", "upgrade", "host", "content-length"}
_DROP_RESPONSE = {"content-length", "connection", "keep-alive", "transfer-encoding",
                  "upgrade", "proxy-authenticate"}

_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_RULE = re.compile(rf"^(?P<wild>\*\.)?(?P<host>{_LABEL}(?:\.{_LABEL})*)(?::(?P<port>\d{{1,5}}))?$")


# ---- the rules (pure) ----------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """One allowlist entry: `host`, `host:port`, `*.domain` or `*.domain:port`.

    A wildcard matches every name under the domain, not the domain itself. Without a
    port the entry allows 80 and 443."""

    host: str
    wildcard: bool = False
    port: int | None = None

    def matches(self, host: str, port: int) -> bool:
        if (port not in DEFAULT_PORTS) if self.port is None else (port != self.port):
            return False
        if self.wildcard:
            return host.endswith("." + self.host)
        return host == self.host


def parse_rule(entry: str) -> Rule:
    """A Rule from an allowlist entry; ValueError with the fix when it is not one."""
    text = str(entry).strip().lower().rstrip(".")
    match = _RULE.match(text)
    port = int(match["port"]) if match and match["port"] else None
    if not match or (port is not None and not 0 < port < 65536):
        raise ValueError(f"{entry!r} is not an allowlist entry; write a host name, "
                         "optionally with a port or a leading *., e.g. pypi.org, "
                         "*.npmjs.org or registry.example.com:8443")
    return Rule(match["host"], wildcard=bool(match["wild"]), port=port)


def normal_host(host: str) -> str:
    return host.strip().lower().rstrip(".").removeprefix("[").removesuffix("]")


def allowed_by(rules: list[Rule], host: str, port: int) -> bool:
    host = normal_host(host)
    return any(rule.matches(host, port) for rule in rules)


def decide(host: str, port: int, operator: list[Rule], narrowed: list[Rule] | None) -> bool:
    """May a sandbox connect to host:port? The operator's list decides; a repository's
    list (`narrowed`, None when it gave none) can only take away."""
    if not allowed_by(operator, host, port):
        return False
    return narrowed is None or allowed_by(narrowed, host, port)


def is_public(address: str) -> bool:
    """Only globally routable unicast addresses; never loopback, private, link-local,
    shared (100.64/10), reserved or multicast, also when written as IPv4 in IPv6."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


# ---- grants and refusals ---------------------------------------------------------------


@dataclass(frozen=True)
class EgressGrant:
    sandbox_id: str
    run_id: str
    allow: list[Rule]
    narrowed: list[Rule] | None
    hosts: dict[str, str] = field(default_factory=dict)  # operator's pins: name -> address


@dataclass(frozen=True)
class Blocked:
    host: str
    port: int
    count: int
    first_at: float
    last_at: float
    reason: str


class EgressLedger(GateTables):
    """Egress credentials per sandbox and refused connections per run, in hangar's database."""

    def issue(self, sandbox_id: str, *, run_id: str, allow: list[str],
              narrowed: list[str] | None = None, hosts: dict[str, str] | None = None) -> str:
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        policy = json.dumps({"allow": allow, "narrowed": narrowed, "hosts": hosts or {}})
        with self._connect() as db:
            db.execute("INSERT INTO egress_grants (sandbox_id, token_sha256, run_id,"
                       " policy, issued_at, revoked_at) VALUES (?, ?, ?, ?, ?, NULL)"
                       " ON CONFLICT (sandbox_id) DO UPDATE SET token_sha256 ="
                       " excluded.token_sha256, run_id = excluded.run_id, policy ="
                       " excluded.policy, issued_at = excluded.issued_at, revoked_at = NULL",
                       (sandbox_id, token_hash(token), run_id, policy, time.time()))
        self._credential_ended()  # the sandbox's earlier token, if any
        return token

    def check(self, sandbox_id: str, token: str) -> EgressGrant | None:
        """The grant if `token` is the sandbox's live egress token. It dies with the
        sandbox's git grant (`proxy_tokens`) as well as on its own revocation."""
        row = self._live_row("egress_grants", "run_id, policy", sandbox_id, token)
        if row is None:
            return None
        run_id, policy = row[0], json.loads(row[1])
        narrowed = policy.get("narrowed")
        return EgressGrant(
            sandbox_id, run_id, [parse_rule(e) for e in policy.get("allow") or []],
            None if narrowed is None else [parse_rule(e) for e in narrowed],
            {normal_host(k): v for k, v in (policy.get("hosts") or {}).items()})

    def revoke(self, sandbox_id: str) -> None:
        with self._connect() as db:
            db.execute("UPDATE egress_grants SET revoked_at = ? WHERE sandbox_id = ?"
                       " AND revoked_at IS NULL", (time.time(), sandbox_id))
        self._credential_ended()

    def record_blocked(self, run_id: str, host: str, port: int, reason: str) -> None:
        now = time.time()
        with self._transaction() as db:
            known = db.execute("SELECT 1 FROM egress_blocked WHERE run_id = ? AND host = ?"
                               " AND port = ?", (run_id, host, port)).fetchone()
            rows = db.execute("SELECT COUNT(*) FROM egress_blocked WHERE run_id = ?",
                              (run_id,)).fetchone()[0]
            if known is None and rows >= MAX_BLOCKED_ROWS:
                host, port, reason = OTHER_HOSTS, 0, "more hosts than hangar lists"
            db.execute(
                "INSERT INTO egress_blocked (run_id, host, port, count, first_at, last_at,"
                " reason) VALUES (?, ?, ?, 1, ?, ?, ?) ON CONFLICT(run_id, host, port)"
                " DO UPDATE SET count = egress_blocked.count + 1, last_at = excluded.last_at,"
                " reason = excluded.reason", (run_id, host, port, now, now, reason))

    def blocked(self, run_id: str) -> list[Blocked]:
        """This run's refused connections, most refused first."""
        with self._connect() as db:
            rows = db.execute("SELECT host, port, count, first_at, last_at, reason"
                              " FROM egress_blocked WHERE run_id = ?"
                              " ORDER BY count DESC, first_at", (run_id,)).fetchall()
        return [Blocked(*row) for row in rows]


# ---- the proxy -----------------------------------------------------------------------


class Refused(Exception):
    """A connection the policy refuses; str() says why, for the sandbox and the record."""


Resolve = Callable[[str, int], Awaitable[list[str]]]


async def system_resolve(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(info[4][0] for info in infos))


async def destination(grant: EgressGrant, host: str, port: int, resolve: Resolve) -> str:
    """The one address hangar connects to for host:port, or Refused.

    Resolved once and connected to by address, so a name cannot answer public for the
    check and private for the connection."""
    host = normal_host(host)
    if not decide(host, port, grant.allow, grant.narrowed):
        raise Refused(f"{host}:{port} is not on this environment's egress allowlist")
    if host in grant.hosts:  # the operator's own pin may be a private address
        return grant.hosts[host]
    try:
        addresses = await resolve(host, port)
    except OSError as exc:
        raise Refused(f"{host} could not be resolved ({exc.strerror or exc})") from None
    private = [a for a in addresses if not is_public(a)] or (["none"] if not addresses else [])
    if private:
        raise Refused(f"{host} resolves to a private or local address ({private[0]}); "
                      "only an operator's egress.hosts pin may reach one")
    return addresses[0]


def _credentials(request: web.Request) -> tuple[str, str] | None:
    scheme, _, value = request.headers.get("Proxy-Authorization", "").partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, _, password = base64.b64decode(value.strip()).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return user, password


def _refusal(status: int, message: str) -> web.Response:
    headers = {"Proxy-Authenticate": 'Basic realm="hangar egress"'} if status == 407 else {}
    response = web.Response(status=status, text=f"hangar: {message}\n", headers=headers)
    response.force_close()
    return response


class _Pinned(AbstractResolver):
    """Makes aiohttp connect to the address hangar checked, whatever DNS says now."""

    def __init__(self, address: str):
        self.address = address

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        fam = socket.AF_INET6 if ":" in self.address else socket.AF_INET
        return [{"hostname": host, "host": self.address, "port": port, "family": fam,
                 "proto": 0, "flags": socket.AI_NUMERICHOST}]

    async def close(self) -> None:
        pass


class _TunnelFeed:
    """The sandbox's side of a tunnel: bytes go upstream as they come; reading pauses
    while upstream is slow to take them."""

    HIGH_WATER = 2**20

    def __init__(self, writer: asyncio.StreamWriter, client: asyncio.Transport | None):
        self.writer = writer
        self.client = client
        self._draining: asyncio.Task | None = None

    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        if self.writer.is_closing():
            return False, b""
        self.writer.write(data)
        if (self.client is not None and self._draining is None
                and self.writer.transport.get_write_buffer_size() > self.HIGH_WATER):
            self.client.pause_reading()
            self._draining = asyncio.ensure_future(self._resume_after_drain())
        return False, b""

    async def _resume_after_drain(self) -> None:
        with contextlib.suppress(OSError, RuntimeError):
            await self.writer.drain()
        if self.client is not None and not self.client.is_closing():
            self.client.resume_reading()
        self._draining = None

    def feed_eof(self) -> None:
        if not self.writer.is_closing() and self.writer.can_write_eof():
            with contextlib.suppress(OSError):
                self.writer.write_eof()


@dataclass
class EgressProxy:
    ledger: EgressLedger
    resolve: Resolve = system_resolve

    def is_proxy_request(self, request: web.Request) -> bool:
        return request.method == "CONNECT" or request.raw_path.startswith(("http://",
                                                                           "https://"))

    async def handle(self, request: web.Request) -> web.StreamResponse:
        creds = _credentials(request)
        grant = self.ledger.check(*creds) if creds else None
        if grant is None:
            return _refusal(407, "this proxy needs the sandbox's own egress credential; "
                                 "use the HTTPS_PROXY hangar set in the sandbox")
        try:
            target = (URL.build(authority=request.raw_path) if request.method == "CONNECT"
                      else URL(request.raw_path))
            host, port = target.raw_host or "", target.port
        except ValueError:
            host, port = "", None
        if not host or port is None:
            return _refusal(400, f"{request.raw_path[:200]!r} is not host:port or an "
                                 "absolute http:// URL")
        try:
            address = await destination(grant, host, port, self.resolve)
        except Refused as exc:
            self.ledger.record_blocked(grant.run_id, normal_host(host), port, str(exc))
            log.info("egress refused", extra={"sandbox": grant.sandbox_id, "run": grant.run_id,
                                              "host": host, "port": port, "reason": str(exc)})
            return _refusal(403, f"{exc}; an operator allows hosts in the environment's "
                                 "egress.allow (docs/egress.md)")
        if request.method == "CONNECT":
            return await self._tunnel(request, address, port)
        return await self._forward(request, target, address)

    async def _tunnel(self, request: web.Request, address: str,
                      port: int) -> web.StreamResponse:
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                reader, writer = await asyncio.open_connection(address, port)
        except (OSError, TimeoutError) as exc:
            return _refusal(502, f"could not connect to {request.raw_path}: {exc}")
        response = web.StreamResponse(status=200, reason="Connection established")
        await response.prepare(request)
        # After a CONNECT, aiohttp hands the connection's further bytes to a payload
        # parser set on the protocol (as for websockets): ours writes them upstream.
        feed = _TunnelFeed(writer, request.transport)
        request.protocol.set_parser(feed)  # type: ignore[arg-type]
        try:
            with contextlib.suppress(OSError, aiohttp.ClientError, RuntimeError, TimeoutError):
                while True:
                    async with asyncio.timeout(IDLE_TIMEOUT_S):
                        data = await reader.read(1 << 20)
                    if not data:
                        break
                    await response.write(data)
        finally:
            writer.close()
        response.force_close()  # the tunnel was the connection (set late: it would end it)
        return response

    async def _forward(self, request: web.Request, target: URL,
                       address: str) -> web.StreamResponse:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS}
        connector = aiohttp.TCPConnector(resolver=_Pinned(address), force_close=True,
                                         use_dns_cache=False)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S,
                                        sock_read=IDLE_TIMEOUT_S)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout,
                                         auto_decompress=False) as session:
            try:
                upstream = await session.request(
                    request.method, target, headers=headers, allow_redirects=False,
                    data=request.content if request.body_exists else None)
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                return _refusal(502, f"could not reach {target.host}:{target.port}: {exc}")
            async with upstream:
                response = web.StreamResponse(status=upstream.status, reason=upstream.reason,
                                              headers={k: v for k, v in upstream.headers.items()
                                                       if k.lower() not in _DROP_RESPONSE})
                response.force_close()
                await response.prepare(request)
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
                return response


def setup_egress(gate: web.Application, *, ledger: EgressLedger,
                 resolve: Resolve = system_resolve) -> EgressProxy:
    """Proxy requests (CONNECT, absolute URIs) on `gate` go to egress; others to routes."""
    proxy = EgressProxy(ledger, resolve)

    @web.middleware
    async def egress_first(request: web.Request, handler):
        if proxy.is_proxy_request(request):
            return await proxy.handle(request)
        return await handler(request)

    gate.middlewares.append(egress_first)
    return proxy


def proxy_env(gate_url: str, sandbox_id: str, token: str) -> dict[str, str]:
    """The variables that point a sandbox's processes at the gate for egress; the gate's
    own routes (git, the model) on loopback stay direct."""
    url = URL(gate_url)
    proxy = str(url.with_user(sandbox_id).with_password(token).with_path(""))
    no_proxy = ",".join(dict.fromkeys([url.host or "127.0.0.1", "127.0.0.1", "localhost",
                                       "::1"]))
    return {"HTTP_PROXY": proxy, "HTTPS_PROXY": proxy, "http_proxy": proxy,
            "https_proxy": proxy, "NO_PROXY": no_proxy, "no_proxy": no_proxy}
