"""The proxy's HTTP behaviour against a recording stand-in for the upstream.

The stand-in only records what reached it and answers canned bytes; real git against
fakehub is in test_proxy_git.py.
"""

import asyncio
import base64
import gzip
import hashlib
import os
import random
import zlib

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from proxy import TokenRegistry, pktline, setup_proxy

OLD = "a" * 40
NEW = "b" * 40
ZERO = "0" * 40
BRANCH = "hangar/12-ab3f"
OWN = f"refs/heads/{BRANCH}"
INSTALLATION_TOKEN = "ghs_installationsecret"


class RecordingUpstream:
    """Records every request that reaches it; answers like a git host would, briefly."""

    def __init__(self):
        self.requests: list[dict] = []
        self.tip = OLD
        self.status = 200
        self.early_headers = False
        self.broken: list[str] = []  # requests whose body never arrived whole
        self.app = web.Application(client_max_size=2**30)
        self.app.router.add_route("*", "/{tail:.*}", self.handle)
        self.base = ""

    async def credentials(self, grant):
        assert grant.repo == "octo/widgets"
        return self.base, INSTALLATION_TOKEN

    async def handle(self, request):
        early = None
        if self.early_headers and request.path.endswith("/git-receive-pack"):
            # Like git http-backend: the answer's headers go out before the body is read.
            early = web.StreamResponse(
                headers={"Content-Type": "application/x-git-receive-pack-result"}
            )
            await early.prepare(request)
        try:
            body = await request.read()
        except BaseException:  # cut off, or cancelled because the connection went away
            self.broken.append(request.path)
            raise
        self.requests.append(
            {
                "method": request.method,
                "path": request.path,
                "query": dict(request.query),
                "headers": dict(request.headers),
                "body": body,
            }
        )
        if self.status != 200:
            return web.Response(status=self.status, text="no")
        if request.path.endswith("/info/refs"):
            service = request.query["service"]
            adv = (
                pktline.encode(f"# service={service}\n")
                + b"0000"
                + pktline.encode(f"{self.tip} refs/heads/main\0report-status side-band-64k\n")
                + pktline.encode(f"{self.tip} {OWN}\n")
                + b"0000"
            )
            return web.Response(body=adv, content_type=f"application/x-{service}-advertisement")
        if request.path.endswith("/git-receive-pack"):
            commands = pktline.parse_commands(body)
            answer = b""
            if commands.commands:
                report = pktline.encode("unpack ok\n")
                for ref in commands.refs:
                    report += pktline.encode(f"ok {ref}\n")
                answer = pktline.sideband(1, report + b"0000") + b"0000"
            if early is not None:
                await early.write_eof(answer)
                return early
            return web.Response(body=answer, content_type="application/x-git-receive-pack-result")
        return web.Response(
            body=b"0008NAK\n" + str(len(body)).encode(),
            content_type="application/x-git-upload-pack-result",
            headers={"X-Echo-Encoding": request.headers.get("Content-Encoding", "")},
        )

    def posts(self, service):
        return [r for r in self.requests if r["path"].endswith(service)]


@pytest.fixture
def registry(tmp_path):
    return TokenRegistry(tmp_path / "hangar.db")


@pytest.fixture
async def upstream(aiohttp_server):
    fake = RecordingUpstream()
    server = await aiohttp_server(fake.app)
    fake.base = str(server.make_url("")).rstrip("/")
    return fake


@pytest.fixture
def make_client(aiohttp_client, registry, upstream):
    async def make(max_push_bytes=200 * 2**20, handled=None):
        middlewares = []
        if handled is not None:

            @web.middleware
            async def record_end(request, handler):
                try:
                    return await handler(request)
                finally:
                    handled.append(request.path)

            middlewares.append(record_end)
        app = web.Application(middlewares=middlewares)
        setup_proxy(app, registry=registry, upstream=upstream, max_push_bytes=max_push_bytes)
        return await aiohttp_client(app)

    return make


def basic(token, user="x-hangar"):
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode()}


def push_body(*commands, caps="report-status side-band-64k agent=git/2.39", pack=b""):
    out = bytearray()
    for i, command in enumerate(commands):
        out += pktline.encode(f"{command}\0{caps}" if i == 0 else command)
    return bytes(out) + b"0000" + pack


def report_lines(data: bytes, sideband=True) -> list[bytes]:
    if sideband:
        inner = b"".join(
            p.payload[1:]
            for p in pktline.parse_all(data)
            if p.kind is pktline.PacketKind.DATA and p.payload[:1] == b"\x01"
        )
    else:
        inner = data
    return [p.payload for p in pktline.parse_all(inner) if p.kind is pktline.PacketKind.DATA]


RP = "/git/sb-1/octo/widgets.git/git-receive-pack"
RESULT = {"Content-Type": "application/x-git-receive-pack-request"}


@pytest.fixture
def token(registry):
    return registry.issue("sb-1", repo="octo/widgets", branch=BRANCH, installation_id=7)


async def test_info_refs_is_relayed_with_the_installation_token(make_client, upstream, token):
    client = await make_client()
    resp = await client.get(
        "/git/sb-1/octo/widgets.git/info/refs?service=git-upload-pack",
        headers={**basic(token), "Git-Protocol": "version=2"},
    )
    assert resp.status == 200
    assert resp.headers["Content-Type"] == "application/x-git-upload-pack-advertisement"
    assert pktline.advertised_refs(await resp.read())[OWN] == OLD
    [seen] = upstream.requests
    assert seen["path"] == "/octo/widgets.git/info/refs"
    assert seen["query"] == {"service": "git-upload-pack"}
    assert seen["headers"]["Git-Protocol"] == "version=2"
    assert (
        seen["headers"]["Authorization"]
        == basic(INSTALLATION_TOKEN, "x-access-token")["Authorization"]
    )
    assert token not in str(seen)


async def test_repo_path_without_dot_git_works(make_client, upstream, token):
    client = await make_client()
    resp = await client.get(
        "/git/sb-1/octo/widgets/info/refs?service=git-upload-pack", headers=basic(token)
    )
    assert resp.status == 200
    assert upstream.requests[0]["path"] == "/octo/widgets.git/info/refs"


@pytest.mark.parametrize(
    ("path", "auth", "status", "text"),
    [
        ("sb-1/octo/widgets", None, 401, "needs the sandbox's hgs_ token as the password"),
        ("sb-1/octo/widgets", "ghs_sometoken", 401, "needs the sandbox's hgs_ token"),
        (
            "sb-1/octo/widgets",
            "hgs_unknown",
            401,
            "hangar: the sandbox token is unknown or revoked",
        ),
        (
            "sb-2/octo/widgets",
            "TOKEN",
            403,
            "hangar: this token belongs to another sandbox, not sb-2",
        ),
        ("sb-1/octo/other", "TOKEN", 403, "may use only octo/widgets, not octo/other"),
        ("sb-1/evil/widgets", "TOKEN", 403, "may use only octo/widgets, not evil/widgets"),
    ],
)
async def test_refused_credentials(
    make_client, upstream, registry, token, path, auth, status, text
):
    registry.issue("sb-2", repo="octo/widgets", branch="hangar/2", installation_id=7)
    client = await make_client()
    headers = basic(token if auth == "TOKEN" else auth) if auth else {}
    for method, url in [
        ("GET", f"/git/{path}.git/info/refs?service=git-receive-pack"),
        ("POST", f"/git/{path}.git/git-upload-pack"),
        ("POST", f"/git/{path}.git/git-receive-pack"),
    ]:
        resp = await client.request(method, url, headers=headers, data=b"0000")
        assert resp.status == status
        assert text in await resp.text()
        assert resp.headers["Content-Type"].startswith("text/plain")
        if status == 401:
            assert resp.headers["WWW-Authenticate"] == 'Basic realm="hangar"'
    assert upstream.requests == []


async def test_revoked_token_is_401(make_client, upstream, registry, token):
    registry.revoke("sb-1")
    client = await make_client()
    resp = await client.get(
        "/git/sb-1/octo/widgets.git/info/refs?service=git-upload-pack", headers=basic(token)
    )
    assert resp.status == 401
    assert "unknown or revoked" in await resp.text()
    assert upstream.requests == []


async def test_dumb_http_is_refused(make_client, upstream, token):
    client = await make_client()
    resp = await client.get("/git/sb-1/octo/widgets.git/info/refs", headers=basic(token))
    assert resp.status == 403
    assert "smart HTTP" in await resp.text()
    assert upstream.requests == []


@pytest.mark.parametrize("early_headers", [False, True])
async def test_push_to_own_branch_is_streamed_upstream_and_recorded(
    make_client, upstream, registry, token, early_headers
):
    upstream.early_headers = early_headers
    client = await make_client()
    pack = b"PACK" + os.urandom(300_000)
    body = push_body(f"{OLD} {NEW} {OWN}", pack=pack)

    async def chunks():
        for i in range(0, len(body), 7001):
            yield body[i : i + 7001]

    resp = await client.post(RP, data=chunks(), headers={**basic(token), **RESULT})
    assert resp.status == 200
    assert report_lines(await resp.read()) == [b"unpack ok\n", f"ok {OWN}\n".encode()]
    [seen] = upstream.posts("git-receive-pack")
    assert seen["body"] == body
    assert seen["headers"]["Content-Type"] == RESULT["Content-Type"]
    [record] = registry.pushes("sb-1")
    assert (record.ref, record.old, record.new, record.bytes) == (OWN, OLD, NEW, len(body))


async def test_push_with_content_length_keeps_it(make_client, upstream, token):
    client = await make_client()
    body = push_body(f"{OLD} {NEW} {OWN}", pack=b"PACK" + b"x" * 1000)
    resp = await client.post(RP, data=body, headers={**basic(token), **RESULT})
    assert resp.status == 200
    [seen] = upstream.posts("git-receive-pack")
    assert seen["headers"]["Content-Length"] == str(len(body))
    assert seen["body"] == body


@pytest.mark.parametrize(
    ("commands", "reason"),
    [
        ([f"{OLD} {NEW} refs/heads/main"], f"hangar: this sandbox may push only to {BRANCH}"),
        ([f"{ZERO} {NEW} refs/tags/v1"], "hangar: this sandbox may not push tags"),
        ([f"{OLD} {ZERO} {OWN}"], f"hangar: this sandbox may not delete {BRANCH}"),
        ([f"{OLD} {NEW} {OWN}", f"{OLD} {NEW} refs/heads/x"], "hangar: push one branch per push"),
    ],
)
async def test_refused_push_reaches_nothing_upstream(
    make_client, upstream, token, commands, reason
):
    client = await make_client()
    body = push_body(*commands, pack=b"PACK" + os.urandom(100_000))
    resp = await client.post(RP, data=body, headers={**basic(token), **RESULT})
    assert resp.status == 200
    assert resp.headers["Content-Type"] == "application/x-git-receive-pack-result"
    lines = report_lines(await resp.read())
    assert lines[0] == b"unpack ok\n"
    assert len(lines) == 1 + len(commands)
    for line, command in zip(lines[1:], commands, strict=True):
        assert line.startswith(f"ng {command.split()[2]} {reason}".encode())
    assert upstream.requests == []


async def test_refusal_without_sideband_is_a_plain_report(make_client, upstream, token):
    client = await make_client()
    body = push_body(f"{OLD} {NEW} refs/heads/main", caps="report-status")
    resp = await client.post(RP, data=body, headers={**basic(token), **RESULT})
    assert report_lines(await resp.read(), sideband=False) == [
        b"unpack ok\n",
        f"ng refs/heads/main hangar: this sandbox may push only to {BRANCH}\n".encode(),
    ]


@pytest.mark.parametrize(
    ("body", "text"),
    [
        (pktline.encode(f"{OLD} {NEW} {OWN}"), "ended inside its command list"),
        (b"zzzz", "the push request is malformed"),
        (
            b"".join(pktline.encode(f"{OLD} {NEW} refs/heads/b{i}") for i in range(800)),
            "command list is longer than 64 KiB",
        ),
    ],
)
async def test_malformed_push_is_400(make_client, upstream, token, body, text):
    client = await make_client()
    resp = await client.post(RP, data=body, headers={**basic(token), **RESULT})
    assert resp.status == 400
    assert text in await resp.text()
    assert upstream.requests == []


async def test_probe_is_relayed(make_client, upstream, token):
    client = await make_client()
    resp = await client.post(RP, data=b"0000", headers={**basic(token), **RESULT})
    assert resp.status == 200
    [seen] = upstream.posts("git-receive-pack")
    assert seen["body"] == b"0000"


@pytest.mark.parametrize("early_headers", [False, True])
async def test_push_over_the_cap_while_streaming_is_refused(
    make_client, upstream, registry, token, early_headers
):
    upstream.early_headers = early_headers
    client = await make_client(max_push_bytes=2**20)
    body = push_body(f"{OLD} {NEW} {OWN}", pack=b"PACK" + os.urandom(3 * 2**20))

    async def chunks():
        for i in range(0, len(body), 65536):
            yield body[i : i + 65536]

    resp = await client.post(RP, data=chunks(), headers={**basic(token), **RESULT})
    lines = report_lines(await resp.read())
    assert (
        lines[1]
        == (
            f"ng {OWN} hangar: this push is larger than 1 MiB, the limit for sandbox pushes; "
            "keep large files out of the repository\n"
        ).encode()
    )
    # The upstream never received a whole request, and nothing is recorded.
    assert upstream.posts("git-receive-pack") == []
    assert registry.pushes("sb-1") == []


async def test_push_over_the_cap_by_content_length_is_refused_up_front(
    make_client, upstream, token
):
    client = await make_client(max_push_bytes=2**20)
    body = push_body(f"{OLD} {NEW} {OWN}", pack=b"PACK" + b"\0" * (2 * 2**20))
    resp = await client.post(RP, data=body, headers={**basic(token), **RESULT})
    assert b"this push is larger than 1 MiB" in report_lines(await resp.read())[1]
    assert upstream.requests == []


async def client_for(aiohttp_client, app, **runner_kwargs):
    server = TestServer(app)
    await server.start_server(**runner_kwargs)
    return await aiohttp_client(server)


@pytest.mark.parametrize("server_decodes", [True, False])
async def test_gzip_upload_pack_reaches_upstream_intact(
    aiohttp_client, registry, upstream, token, server_decodes
):
    # hangar's server may or may not undo Content-Encoding itself; either way the
    # upstream must get a body that matches its headers.
    app = web.Application()
    setup_proxy(app, registry=registry, upstream=upstream)
    client = await client_for(aiohttp_client, app, auto_decompress=server_decodes)
    raw = (pktline.encode("command=fetch\n") + b"0001" + pktline.encode("done\n") + b"0000") * 100
    compressed = gzip.compress(raw)
    resp = await client.post(
        "/git/sb-1/octo/widgets.git/git-upload-pack",
        data=compressed,
        headers={
            **basic(token),
            "Content-Type": "application/x-git-upload-pack-request",
            "Content-Encoding": "gzip",
        },
    )
    assert resp.status == 200
    assert resp.headers["Content-Type"] == "application/x-git-upload-pack-result"
    assert await resp.read() == b"0008NAK\n" + str(len(raw)).encode()
    [seen] = upstream.posts("git-upload-pack")
    if server_decodes:
        assert seen["body"] == raw
        assert "Content-Encoding" not in seen["headers"]
    else:
        assert seen["headers"]["Content-Encoding"] == "gzip"
        assert seen["headers"]["Content-Length"] == str(len(compressed))


@pytest.mark.parametrize("server_decodes", [True, False])
async def test_gzip_receive_pack(aiohttp_client, registry, upstream, token, server_decodes):
    app = web.Application()
    setup_proxy(app, registry=registry, upstream=upstream)
    client = await client_for(aiohttp_client, app, auto_decompress=server_decodes)
    body = push_body(f"{OLD} {NEW} refs/heads/main")
    resp = await client.post(
        RP, data=gzip.compress(body), headers={**basic(token), **RESULT, "Content-Encoding": "gzip"}
    )
    if server_decodes:
        # Decoded by the server, then checked like any push.
        assert b"may push only to" in report_lines(await resp.read())[1]
    else:
        assert resp.status == 415
        assert "compressed push requests are not accepted" in await resp.text()
    assert upstream.requests == []


def commit_pack(parent: str, padding: int = 0) -> tuple[str, bytes]:
    """A one-commit pack (plus `padding` bytes of blob) and the commit's id."""
    body = f"tree {'d' * 40}\nparent {parent}\n\nwork\n".encode()
    oid = hashlib.sha1(b"commit %d\0" % len(body) + body).hexdigest()

    def entry(kind, data):
        size = len(data)
        header = bytearray([(kind << 4) | (size & 15)])
        size >>= 4
        while size:
            header[-1] |= 0x80
            header.append(size & 0x7F)
            size >>= 7
        return bytes(header) + zlib.compress(data)

    objects = [entry(1, body)] + ([entry(3, os.urandom(padding))] if padding else [])
    pack = b"PACK" + (2).to_bytes(4, "big") + len(objects).to_bytes(4, "big")
    pack += b"".join(objects)
    return oid, pack + hashlib.sha1(pack).digest()


async def test_no_force_compares_with_the_upstream_tip(make_client, upstream, registry):
    token = registry.issue(
        "sb-1", repo="octo/widgets", branch=BRANCH, installation_id=7, allow_force=False
    )
    client = await make_client()
    new, pack = commit_pack(parent=OLD)
    upstream.tip = "c" * 40
    resp = await client.post(
        RP, data=push_body(f"{OLD} {new} {OWN}", pack=pack), headers={**basic(token), **RESULT}
    )
    assert (
        b"force-push is off for this sandbox and hangar/12-ab3f is at cccccccccccc"
        in (report_lines(await resp.read())[1])
    )
    assert upstream.posts("git-receive-pack") == []
    assert upstream.requests[0]["query"] == {"service": "git-receive-pack"}

    upstream.tip = OLD
    resp = await client.post(
        RP, data=push_body(f"{OLD} {new} {OWN}", pack=pack), headers={**basic(token), **RESULT}
    )
    assert report_lines(await resp.read())[1] == f"ok {OWN}\n".encode()


@pytest.mark.parametrize("early_headers", [False, True])
@pytest.mark.parametrize("padding", [0, 500_000])
async def test_no_force_refuses_a_push_that_does_not_contain_the_tip(
    make_client, upstream, registry, padding, early_headers
):
    upstream.early_headers = early_headers
    token = registry.issue(
        "sb-1", repo="octo/widgets", branch=BRANCH, installation_id=7, allow_force=False
    )
    client = await make_client()
    new, pack = commit_pack(parent="e" * 40, padding=padding)
    body = push_body(f"{OLD} {new} {OWN}", pack=pack)

    async def chunks():
        for i in range(0, len(body), 16384):
            yield body[i : i + 16384]

    resp = await client.post(RP, data=chunks(), headers={**basic(token), **RESULT})
    assert (
        report_lines(await resp.read())[1]
        == (
            f"ng {OWN} hangar: force-push is off for this sandbox; the new tip of {BRANCH} must "
            "contain its current tip (fetch, rebase onto it and push again)\n"
        ).encode()
    )
    # The end of the pack was held back: upstream never got a whole request.
    assert upstream.posts("git-receive-pack") == []

    # Without a readable pack nothing is proven either.
    resp = await client.post(
        RP, data=push_body(f"{OLD} {new} {OWN}"), headers={**basic(token), **RESULT}
    )
    assert b"must contain its current tip" in report_lines(await resp.read())[1]
    assert upstream.posts("git-receive-pack") == []


@pytest.mark.parametrize("status", [401, 403, 500])
async def test_upstream_refusal_never_reaches_git_as_401(make_client, upstream, token, status):
    upstream.status = status
    client = await make_client()
    resp = await client.get(
        "/git/sb-1/octo/widgets.git/info/refs?service=git-upload-pack", headers=basic(token)
    )
    assert resp.status == 502
    assert "WWW-Authenticate" not in resp.headers
    assert "hangar: " in await resp.text()

    resp = await client.post(
        RP, data=push_body(f"{OLD} {NEW} {OWN}"), headers={**basic(token), **RESULT}
    )
    assert resp.status == 200
    assert report_lines(await resp.read())[1].startswith(f"ng {OWN} hangar: ".encode())


async def test_upstream_unreachable(make_client, upstream, token):
    upstream.base = "http://127.0.0.1:9"
    client = await make_client()
    resp = await client.get(
        "/git/sb-1/octo/widgets.git/info/refs?service=git-upload-pack", headers=basic(token)
    )
    assert resp.status == 502
    assert "could not reach GitHub" in await resp.text()


async def test_mutated_push_bodies_never_reach_upstream_for_another_ref(
    make_client, upstream, token
):
    """Random edits of real command lists, posted to the proxy: a refusal or a relay of
    exactly the sandbox's own branch, never an error and never another ref upstream."""
    rng = random.Random(5)
    client = await make_client()
    seeds = [
        push_body(f"{OLD} {NEW} {OWN}", pack=b"PACK"),
        push_body(f"{OLD} {NEW} refs/heads/main", pack=b"PACK"),
        push_body(f"{OLD} {NEW} {OWN}", f"{OLD} {NEW} refs/heads/main"),
        push_body(f"{ZERO} {NEW} refs/tags/v1"),
    ]
    statuses = set()
    for _ in range(300):
        body = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(body) + 1)
            how = rng.choice(["flip", "insert", "delete", "truncate"])
            if how == "flip" and at < len(body):
                body[at] = rng.randrange(256)
            elif how == "insert":
                body[at:at] = rng.choice([b"0000", b"\0", b" ", b"\n", bytes([rng.randrange(256)])])
            elif how == "delete":
                del body[at : at + rng.randint(1, 4)]
            else:
                del body[at:]
        resp = await client.post(RP, data=bytes(body), headers={**basic(token), **RESULT})
        await resp.read()
        statuses.add(resp.status)
        assert resp.status in (200, 400)
    for seen in upstream.posts("git-receive-pack"):
        parsed = pktline.parse_commands(seen["body"])
        assert parsed.refs in ((), (OWN,))
    assert statuses == {200, 400}


@pytest.mark.parametrize("early_headers", [False, True])
async def test_push_cut_off_by_the_client_is_dropped_upstream_at_once(
    make_client, upstream, token, early_headers
):
    upstream.early_headers = early_headers
    handled = []
    client = await make_client(handled=handled)
    body = push_body(f"{OLD} {NEW} {OWN}", pack=b"PACK" + os.urandom(200_000))
    # A client killed mid-push: the kernel closes its socket half-way through the body.
    _reader, writer = await asyncio.open_connection(client.host, client.port)
    auth = basic(token)["Authorization"]
    writer.write(
        f"POST {RP} HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\n"
        f"Content-Type: {RESULT['Content-Type']}\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
        + b"%x\r\n" % len(body)
        + body
        + b"\r\n"
    )
    await writer.drain()
    await asyncio.sleep(0.3)
    writer.transport.abort()
    # The proxy lets go of the upstream request at once, not at the read timeout.
    for _ in range(100):
        if handled:
            break
        await asyncio.sleep(0.05)
    assert handled == [RP]
    if early_headers:
        # Upstream had started: it sees its request end short at once.
        for _ in range(100):
            if upstream.broken:
                break
            await asyncio.sleep(0.05)
        assert upstream.broken == ["/octo/widgets.git/git-receive-pack"]
    # Never a whole request upstream.
    assert upstream.broken in ([], ["/octo/widgets.git/git-receive-pack"])
    assert upstream.posts("git-receive-pack") == []


@pytest.mark.parametrize("server_decodes", [True, False])
@pytest.mark.parametrize("service", ["git-upload-pack", "git-receive-pack"])
@pytest.mark.parametrize(
    ("encoding", "status"), [("gzip", 400), ("deflate", 400), ("x-unknown", 415)]
)
async def test_a_body_that_does_not_match_its_encoding_is_refused_with_a_reason(
    aiohttp_client, registry, upstream, token, server_decodes, service, encoding, status
):
    app = web.Application()
    setup_proxy(app, registry=registry, upstream=upstream)
    client = await client_for(aiohttp_client, app, auto_decompress=server_decodes)
    resp = await client.post(
        f"/git/sb-1/octo/widgets.git/{service}",
        data=b"this is not compressed at all " * 10,
        headers={**basic(token), "Content-Type": f"application/x-{service}-request",
                 "Content-Encoding": encoding},
    )
    assert resp.status == status, await resp.text()
    assert "Content-Encoding" in await resp.text()
    assert upstream.posts(service) == []
