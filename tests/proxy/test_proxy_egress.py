"""The egress proxy: the allowlist rule (tables and properties), private addresses, and
the proxy itself over real sockets on loopback (CONNECT tunnels and absolute-URI
requests), with every refusal recorded per run."""

from __future__ import annotations

import asyncio
import base64

import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

from proxy import TokenRegistry
from proxy.egress import (
    MAX_BLOCKED_ROWS,
    OTHER_HOSTS,
    EgressLedger,
    allowed_by,
    decide,
    is_public,
    parse_rule,
    proxy_env,
    setup_egress,
)

OPERATOR = [parse_rule(e) for e in ["pypi.org", "*.npmjs.org", "registry.test:8443"]]


@pytest.mark.parametrize(("host", "port", "narrowed", "allowed"), [
    ("pypi.org", 443, None, True),
    ("pypi.org", 80, None, True),
    ("pypi.org", 22, None, False),  # no port in the entry: 80 and 443 only
    ("PyPI.org.", 443, None, True),  # case and a trailing dot do not matter
    ("files.pypi.org", 443, None, False),  # an exact name is not a wildcard
    ("evilpypi.org", 443, None, False),
    ("pypi.org.evil.com", 443, None, False),
    ("registry.npmjs.org", 443, None, True),
    ("a.b.npmjs.org", 443, None, True),
    ("npmjs.org", 443, None, False),  # *.domain is only what is under it
    ("xnpmjs.org", 443, None, False),
    ("registry.test", 8443, None, True),
    ("registry.test", 443, None, False),  # a port in the entry is the only port
    ("example.org", 443, None, False),
    ("pypi.org", 443, ["pypi.org"], True),
    ("registry.npmjs.org", 443, ["pypi.org"], False),  # the repository narrowed it away
    ("example.org", 443, ["example.org"], False),  # a repository cannot widen
    ("example.org", 443, ["*.org"], False),
    ("registry.npmjs.org", 443, ["registry.npmjs.org"], True),
    ("other.npmjs.org", 443, ["registry.npmjs.org"], False),
    ("pypi.org", 443, [], False),  # an empty list from the repository: nothing
])
def test_the_allowlist_rule(host, port, narrowed, allowed):
    rules = None if narrowed is None else [parse_rule(e) for e in narrowed]
    assert decide(host, port, OPERATOR, rules) is allowed


@pytest.mark.parametrize("entry", ["", "*", "*.", "http://pypi.org", "pypi.org/simple",
                                   "pypi.org:0", "pypi.org:70000", "a..b", "*.*.org",
                                   "pypi .org", "-bad.org"])
def test_entries_that_are_not_rules_are_refused_with_the_fix(entry):
    with pytest.raises(ValueError, match=r"e\.g\. pypi\.org"):
        parse_rule(entry)


_labels = st.sampled_from(["a", "b", "pypi", "org", "npmjs", "x-1"])
_names = st.lists(_labels, min_size=1, max_size=4).map(".".join)
_entries = st.tuples(st.booleans(), _names, st.sampled_from([None, 80, 443, 8080])).map(
    lambda t: ("*." if t[0] else "") + t[1] + (f":{t[2]}" if t[2] else ""))


@given(operator=st.lists(_entries, max_size=4), repo=st.one_of(st.none(), st.lists(_entries,
       max_size=4)), host=_names, port=st.sampled_from([22, 80, 443, 8080]))
def test_a_repository_only_ever_narrows(operator, repo, host, port):
    ops = [parse_rule(e) for e in operator]
    narrowed = None if repo is None else [parse_rule(e) for e in repo]
    if decide(host, port, ops, narrowed):
        assert allowed_by(ops, host, port)
        assert narrowed is None or allowed_by(narrowed, host, port)
    if repo is None:
        assert decide(host, port, ops, None) == allowed_by(ops, host, port)


@pytest.mark.parametrize(("address", "public"), [
    ("93.184.216.34", True), ("2606:2800:220:1::1", True),
    ("127.0.0.1", False), ("127.8.9.1", False), ("::1", False), ("10.1.2.3", False),
    ("172.17.0.1", False), ("192.168.1.1", False), ("169.254.169.254", False),
    ("100.64.0.1", False), ("0.0.0.0", False), ("fe80::1", False), ("fd00::1", False),
    ("::ffff:127.0.0.1", False), ("::ffff:10.0.0.1", False), ("224.0.0.1", False),
    ("not-an-address", False),
])
def test_only_public_addresses_count_as_public(address, public):
    assert is_public(address) is public


def test_proxy_env_points_at_the_gate_and_keeps_the_gate_direct():
    env = proxy_env("http://127.0.0.1:8080", "sb-1", "hge_tok")
    assert env["HTTPS_PROXY"] == env["http_proxy"] == "http://sb-1:hge_tok@127.0.0.1:8080"
    assert env["NO_PROXY"].split(",")[:2] == ["127.0.0.1", "localhost"]


def test_refusals_are_counted_per_run_and_bounded(tmp_path):
    ledger = EgressLedger(tmp_path / "hangar.db")
    for _ in range(3):
        ledger.record_blocked("run-1", "example.org", 443, "not allowed")
    ledger.record_blocked("run-1", "evil.test", 80, "not allowed")
    ledger.record_blocked("run-2", "example.org", 443, "not allowed")
    blocked = ledger.blocked("run-1")
    assert [(b.host, b.port, b.count) for b in blocked] == [("example.org", 443, 3),
                                                            ("evil.test", 80, 1)]
    assert blocked[0].first_at <= blocked[0].last_at
    for i in range(MAX_BLOCKED_ROWS + 50):
        ledger.record_blocked("run-3", f"h{i}.test", 443, "not allowed")
    rows = ledger.blocked("run-3")
    assert len(rows) == MAX_BLOCKED_ROWS + 1
    assert rows[0].host == OTHER_HOSTS and rows[0].count == 50



def test_the_host_that_matters_is_kept_behind_a_thousand_decoys(tmp_path):
    """A sandbox that tries 999 decoys first cannot push the one host it cares about into
    the lumped row: every one of a thousand is kept by name, for the check run to list."""
    ledger = EgressLedger(tmp_path / "hangar.db")
    for i in range(999):
        ledger.record_blocked("run-1", f"decoy-{i}.test", 443, "not allowed")
    ledger.record_blocked("run-1", "exfil.example.net", 443, "not allowed")
    hosts = {row.host for row in ledger.blocked("run-1")}
    assert "exfil.example.net" in hosts and OTHER_HOSTS not in hosts

# ---- the proxy over real sockets ------------------------------------------------------


class World:
    pass


@pytest.fixture
async def world(aiohttp_server, tmp_path):
    """A gate with the egress proxy, an origin on loopback that the operator pinned
    `registry.test` to, and a resolver that maps everything else as DNS would."""

    async def origin_handler(request: web.Request) -> web.Response:
        return web.Response(text=f"origin saw {request.method} {request.path_qs} "
                                 f"proxy-auth={request.headers.get('Proxy-Authorization')}")

    origin_app = web.Application()
    origin_app.router.add_route("*", "/{tail:.*}", origin_handler)
    origin = await aiohttp_server(origin_app)
    resolved: list[str] = []

    async def resolve(host: str, port: int) -> list[str]:
        resolved.append(host)
        names = {"pypi.org": ["151.101.0.223"], "rebind.test": ["151.101.0.1", "127.0.0.1"],
                 "local.test": ["127.0.0.1"]}
        if host not in names:
            raise OSError(-2, "Name or service not known")
        return names[host]

    ledger = EgressLedger(tmp_path / "hangar.db")
    grants = TokenRegistry(tmp_path / "hangar.db")
    gate = web.Application()
    async def git_route(request: web.Request) -> web.Response:
        return web.Response(text="git route")

    gate.router.add_get("/git/{tail:.*}", git_route)
    setup_egress(gate, ledger=ledger, resolve=resolve)
    server = await aiohttp_server(gate)
    w = World()
    w.origin, w.ledger, w.grants, w.server, w.resolved = origin, ledger, grants, server, resolved
    grants.issue("sb-1", repo="octo/widgets", branch="hangar/1-ab", installation_id=1)
    w.token = ledger.issue(
        "sb-1", run_id="run-1",
        allow=["registry.test:" + str(origin.port), "local.test:" + str(origin.port),
               "rebind.test", "pypi.org"],
        hosts={"registry.test": "127.0.0.1"})
    return w


def _auth(user: str, token: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode()


async def _raw(port: int, request: bytes, then: bytes = b"") -> bytes:
    """Send request; after a 200 answer, send `then` through the tunnel; read all."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    if then and head.startswith(b"HTTP/1.1 200"):
        writer.write(then)
        await writer.drain()
    rest = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return head + rest


async def test_connect_to_an_allowed_pinned_host_tunnels(world):
    port = world.origin.port
    out = await _raw(world.server.port,
                     f"CONNECT registry.test:{port} HTTP/1.1\r\nHost: registry.test:{port}\r\n"
                     f"Proxy-Authorization: {_auth('sb-1', world.token)}\r\n\r\n".encode(),
                     then=b"GET /simple/ HTTP/1.1\r\nHost: registry.test\r\n"
                          b"Connection: close\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 200 Connection established"), out
    assert b"origin saw GET /simple/ proxy-auth=None" in out
    assert world.ledger.blocked("run-1") == []
    assert "registry.test" not in world.resolved  # the pin, not DNS


async def test_plain_http_in_absolute_form_is_forwarded_without_the_credential(world):
    port = world.origin.port
    out = await _raw(world.server.port,
                     f"GET http://registry.test:{port}/a?b=1 HTTP/1.1\r\nHost: registry.test\r\n"
                     f"Proxy-Authorization: {_auth('sb-1', world.token)}\r\n"
                     "Connection: close\r\n\r\n".encode())
    assert out.startswith(b"HTTP/1.1 200"), out
    assert b"origin saw GET /a?b=1 proxy-auth=None" in out


@pytest.mark.parametrize(("target", "why"), [
    ("example.org:443", b"not on this environment's egress allowlist"),
    ("pypi.org:22", b"not on this environment's egress allowlist"),
    ("local.test:{port}", b"resolves to a private or local address"),  # allowed, not pinned
    ("rebind.test:443", b"resolves to a private or local address"),  # any private answer
    ("127.0.0.1:{port}", b"not on this environment's egress allowlist"),
])
async def test_refused_connections_are_answered_and_recorded(world, target, why):
    target = target.format(port=world.origin.port)
    request = (f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n"
               f"Proxy-Authorization: {_auth('sb-1', world.token)}\r\n\r\n").encode()
    for _ in range(3):
        out = await _raw(world.server.port, request)
        assert out.startswith(b"HTTP/1.1 403"), out
        assert why in out
    host, _, port = target.rpartition(":")
    blocked = world.ledger.blocked("run-1")
    assert [(b.host, b.port, b.count) for b in blocked] == [(host, int(port), 3)]


async def test_plain_http_to_a_refused_host_is_recorded_too(world):
    out = await _raw(world.server.port,
                     b"GET http://example.org/x HTTP/1.1\r\nHost: example.org\r\n"
                     b"Proxy-Authorization: " + _auth("sb-1", world.token).encode() +
                     b"\r\nConnection: close\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 403"), out
    assert [(b.host, b.port) for b in world.ledger.blocked("run-1")] == [("example.org", 80)]


@pytest.mark.parametrize("auth", [None, ("sb-1", "hge_wrong"), ("sb-2", "tok")])
async def test_without_the_sandboxs_credential_nothing_passes(world, auth):
    header = f"Proxy-Authorization: {_auth(*auth)}\r\n" if auth else ""
    out = await _raw(world.server.port,
                     f"CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org\r\n{header}\r\n".encode())
    assert out.startswith(b"HTTP/1.1 407"), out
    assert b"Proxy-Authenticate: Basic" in out


async def test_the_credential_dies_with_the_sandboxs_git_grant(world):
    world.grants.revoke("sb-1")
    port = world.origin.port
    out = await _raw(world.server.port,
                     f"CONNECT registry.test:{port} HTTP/1.1\r\nHost: x\r\n"
                     f"Proxy-Authorization: {_auth('sb-1', world.token)}\r\n\r\n".encode())
    assert out.startswith(b"HTTP/1.1 407"), out


async def test_the_gates_own_routes_still_answer_in_origin_form(world):
    out = await _raw(world.server.port,
                     b"GET /git/x HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 200") and out.endswith(b"git route")
    # ...but the same path asked of another host in proxy form is egress, not the route.
    out = await _raw(world.server.port,
                     b"GET http://example.org/git/x HTTP/1.1\r\nHost: example.org\r\n"
                     b"Connection: close\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 407"), out
