"""The `/git/{sandbox_id}/{owner}/{repo}.git/…` routes: git smart HTTP, checked and relayed.

A sandbox authenticates with its `hgs_` token. Fetches of its repository are relayed
as they are. A push is held until its command list has been read and allowed by
`policy.decide`; only then does any byte go upstream, and the rest of the body follows
as a stream. hangar's installation token is added here and never leaves this process.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import NoReturn, Protocol

import aiohttp
from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError

from . import packwalk, pktline
from .grant import Grant
from .policy import decide, not_fast_forward_refusal
from .tokens import TOKEN_PREFIX, TokenRegistry

log = logging.getLogger(__name__)

DEFAULT_MAX_PUSH_BYTES = 200 * 2**20
# git's command list is a few hundred bytes; anything near this is not a push we want.
MAX_COMMAND_BYTES = 64 * 2**10
# After refusing a push we read (and drop) what the client is still sending, so that
# it gets to read our answer, but not forever.
DRAIN_SECONDS = 120.0

# Pushes may stream for minutes; only silence ends them.
UPSTREAM_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=600)
RECEIVE_RESULT = "application/x-git-receive-pack-result"
SERVICES = ("git-upload-pack", "git-receive-pack")
# What git clients send (gzip for large fetches); a body in any other encoding is refused.
_ENCODINGS = ("", "identity", "gzip", "x-gzip", "deflate")
_PKT_LENGTH = re.compile(rb"[0-9a-fA-F]{4}")
_REQUEST_HEADERS = (
    "Accept",
    "Accept-Encoding",
    "Accept-Language",
    "Content-Type",
    "Content-Encoding",
    "Git-Protocol",
    "User-Agent",
)
_RESPONSE_HEADERS = ("Content-Type", "Content-Encoding", "Cache-Control", "Expires", "Pragma")


class Upstream(Protocol):
    """Where a grant's repository lives and how hangar authenticates there."""

    async def credentials(self, grant: Grant) -> tuple[str, str]:
        """(git base URL like `https://github.com`, installation token) for the grant."""
        ...


class _Refused(Exception):
    """A request ends here with a plain-text answer (git prints it as `remote: …`)."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason

    def response(self) -> web.Response:
        headers = {"Cache-Control": "no-cache"}
        if self.status == 401:
            headers["WWW-Authenticate"] = 'Basic realm="hangar"'
        return web.Response(status=self.status, text=self.reason + "\n", headers=headers)


@dataclass
class _Proxy:
    app: web.Application
    registry: TokenRegistry
    upstream: Upstream
    max_push_bytes: int
    session_key: web.AppKey[aiohttp.ClientSession]

    @property
    def session(self) -> aiohttp.ClientSession:
        return self.app[self.session_key]

    # ---- requests ----------------------------------------------------------------

    async def info_refs(self, request: web.Request) -> web.StreamResponse:
        service = request.query.get("service")
        if service not in SERVICES:
            return _Refused(
                403, "hangar: only git's smart HTTP protocol is served here; use git 1.6.6 or newer"
            ).response()
        return await self._relay(request, f"info/refs?service={service}", body=None)

    async def upload_pack(self, request: web.Request) -> web.StreamResponse:
        try:
            first, encoded = await _first_chunk(request)
        except _Refused as refused:
            return refused.response()
        return await self._relay(
            request, "git-upload-pack", body=_chain(first, request), encoded=encoded
        )

    async def receive_pack(self, request: web.Request) -> web.StreamResponse:
        try:
            grant = await self._authenticate(request)
        except _Refused as refused:
            return refused.response()
        try:
            first, encoded = await _first_chunk(request)
        except _Refused as refused:
            return refused.response()
        if encoded:
            return _Refused(
                415,
                "hangar: compressed push requests are not accepted; "
                "git does not compress pushes, so check the client",
            ).response()

        commands, head_bytes, head_error = await _read_command_head(request, first)
        if commands is None:
            await _drain(request)
            return _Refused(400, head_error or "hangar: the push request is malformed").response()
        if commands.is_probe and not (head_bytes[4:] or await request.content.readany()):
            # git's `0000` probe before a large push: no command, nothing to check.
            return await self._relay(
                request, "git-receive-pack", body=_once(head_bytes), grant=grant
            )
        length = request.content_length
        if length is not None and length > self.max_push_bytes:
            return await self._refuse_push(request, commands, self._too_large_reason())

        current_tip = None
        if not grant.allow_force:
            current_tip = await self._upstream_tip(grant, request)
        decision = decide(commands, grant, current_tip=current_tip)
        if not decision.allowed:
            assert decision.reason is not None
            log.info(
                "push refused",
                extra={
                    "sandbox_id": grant.sandbox_id,
                    "repo": grant.repo,
                    "refs": list(decision.refs),
                    "reason": decision.reason,
                },
            )
            return await self._refuse_push(request, commands, decision.reason)

        command = commands.commands[0]
        walker = None
        if not grant.allow_force and not command.is_create and grant.lease is None:
            walker = packwalk.PackCommits(
                push_options="push-options" in commands.capabilities,
                hash_len=len(command.old) // 2,
            )
        body = _PushBody(
            request,
            head_bytes,
            commands.length,
            limit=self.max_push_bytes,
            too_large=self._too_large_reason(),
            walker=walker,
            command=command,
            not_fast_forward=not_fast_forward_refusal(grant),
        )

        async def record(report: bytes) -> None:
            # Recorded before git sees the answer, so the engine never misses a push.
            if command.ref in _accepted_refs(report, sideband=commands.sideband):
                await asyncio.to_thread(
                    self.registry.record_push,
                    grant.sandbox_id,
                    repo=grant.repo,
                    ref=command.ref,
                    old=command.old,
                    new=command.new,
                    size=body.total,
                    at=time.time(),
                )

        try:
            return await self._forward(
                request, "git-receive-pack", grant, body=body, push=body, before_eof=record
            )
        except _Refused as refused:
            reason = body.refusal or refused.reason
            return await self._refuse_push(request, commands, reason)

    # ---- pieces ------------------------------------------------------------------

    def _too_large_reason(self) -> str:
        return (
            f"hangar: this push is larger than {_size(self.max_push_bytes)}, the limit for "
            "sandbox pushes; keep large files out of the repository"
        )

    async def _authenticate(self, request: web.Request) -> Grant:
        sandbox_id = request.match_info["sandbox_id"]
        token = _basic_password(request.headers.get("Authorization", ""))
        if token is None or not token.startswith(TOKEN_PREFIX):
            raise _Refused(
                401, "hangar: this git URL needs the sandbox's hgs_ token as the password"
            )
        grant = await asyncio.to_thread(self.registry.check, sandbox_id, token)
        if grant is None:
            owner = await asyncio.to_thread(self.registry.owner_of, token)
            if owner is not None:
                raise _Refused(
                    403, f"hangar: this token belongs to another sandbox, not {sandbox_id}"
                )
            raise _Refused(401, "hangar: the sandbox token is unknown or revoked")
        name = request.match_info["repo"].removesuffix(".git")
        path_repo = f"{request.match_info['owner']}/{name}"
        if path_repo.casefold() != grant.repo.casefold():
            raise _Refused(403, f"hangar: this sandbox may use only {grant.repo}, not {path_repo}")
        return grant

    async def _upstream(self, grant: Grant) -> tuple[str, dict[str, str]]:
        try:
            base, token = await self.upstream.credentials(grant)
        except Exception as exc:
            log.exception("upstream credentials failed", extra={"repo": grant.repo})
            raise _Refused(
                503, f"hangar: could not get a GitHub token for {grant.repo}; try again"
            ) from exc
        auth = base64.b64encode(f"x-access-token:{token}".encode()).decode()
        return f"{base.rstrip('/')}/{grant.repo}.git", {"Authorization": f"Basic {auth}"}

    async def _upstream_tip(self, grant: Grant, request: web.Request) -> str | None:
        """The branch's object id upstream (zeros when absent), None when unreadable."""
        try:
            url, headers = await self._upstream(grant)
            headers["User-Agent"] = request.headers.get("User-Agent", "hangar")
            async with self.session.get(
                f"{url}/info/refs",
                params={"service": "git-receive-pack"},
                headers=headers,
                allow_redirects=False,
                auto_decompress=True,
                timeout=aiohttp.ClientTimeout(total=60),
            ) as resp:
                if resp.status != 200:
                    return None
                refs = pktline.advertised_refs(await resp.read())
        except (_Refused, aiohttp.ClientError, pktline.PktLineError):
            return None
        length = len(next(iter(refs.values()), "0" * 40))
        return refs.get(grant.ref, "0" * length)

    async def _relay(
        self,
        request: web.Request,
        path: str,
        *,
        body: AsyncIterator[bytes] | None,
        grant: Grant | None = None,
        encoded: bool = False,
    ) -> web.StreamResponse:
        """Relay a fetch (or a probe) upstream and stream the answer back."""
        try:
            if grant is None:
                grant = await self._authenticate(request)
            return await self._forward(request, path, grant, body=body, encoded=encoded)
        except _Refused as refused:
            return refused.response()

    async def _forward(
        self,
        request: web.Request,
        path: str,
        grant: Grant,
        *,
        body: AsyncIterator[bytes] | None,
        push: _PushBody | None = None,
        before_eof: Callable[[bytes], Awaitable[None]] | None = None,
        encoded: bool = False,
    ) -> web.StreamResponse:
        """Send the request upstream and stream the answer back.

        Raises _Refused before anything was sent to the client. `before_eof` gets the
        head of the answer before the last byte goes out.
        """
        url, headers = await self._upstream(grant)
        for name in _REQUEST_HEADERS:
            if name in request.headers:
                headers[name] = request.headers[name]
        if not encoded:
            # The body we relay is the decoded one (or never was encoded).
            headers.pop("Content-Encoding", None)
        if (
            body is not None
            and request.content_length is not None
            and (encoded or "Content-Encoding" not in request.headers)
        ):
            headers["Content-Length"] = str(request.content_length)
        sending = asyncio.ensure_future(
            self.session.request(
                "GET" if body is None else "POST",
                f"{url}/{path}",
                data=body,
                headers=headers,
                allow_redirects=False,
                auto_decompress=False,
                timeout=UPSTREAM_TIMEOUT,
            )
        )
        try:
            if push is not None:
                await self._until_sent(sending, push)
            upstream = await sending
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            if push is not None and push.refusal:
                raise _Refused(409, push.refusal) from exc
            log.warning("upstream unreachable", extra={"repo": grant.repo, "error": str(exc)})
            raise _Refused(502, "hangar: could not reach GitHub; try again") from exc
        except BaseException:
            # Cancelled (the client went away) or refused: let go of upstream now.
            _drop(sending)
            raise
        async with upstream:
            if upstream.status in (401, 403, 404) or upstream.status >= 500:
                text = (await upstream.text(errors="replace")).strip()[:500]
                log.warning(
                    "upstream refused",
                    extra={"repo": grant.repo, "status": upstream.status, "upstream_text": text},
                )
                # Never pass a 401 on: git would erase the sandbox's stored token.
                raise _Refused(
                    404 if upstream.status == 404 else 502,
                    _upstream_reason(grant, upstream.status),
                )
            response = web.StreamResponse(status=upstream.status)
            for name in _RESPONSE_HEADERS:
                if name in upstream.headers:
                    response.headers[name] = upstream.headers[name]
            if upstream.content_length is not None:
                response.content_length = upstream.content_length
            await response.prepare(request)
            kept = bytearray()
            # One chunk is held back so that `before_eof` runs before the client has it all.
            held = b""
            async for chunk in upstream.content.iter_any():
                if before_eof is not None and len(kept) < MAX_COMMAND_BYTES:
                    kept += chunk[: MAX_COMMAND_BYTES - len(kept)]
                if held:
                    await response.write(held)
                held = chunk
            if before_eof is not None:
                await before_eof(bytes(kept))
            await response.write_eof(held)
        return response

    async def _until_sent(
        self, sending: asyncio.Future[aiohttp.ClientResponse], push: _PushBody
    ) -> None:
        """Wait until the whole push went upstream, or stop it there.

        git's http-backend answers with headers before it reads the pack, so the answer
        may start early; nothing goes back to the client before the body is complete,
        so that a push stopped on the way (over the cap, not a fast-forward) can still
        be answered with hangar's own report. Stopping drops the upstream connection
        before the end of the pack: upstream then stores nothing.
        """
        ended = asyncio.ensure_future(push.ended.wait())
        try:
            while not ended.done():
                if sending.done():
                    if sending.cancelled() or sending.exception() is not None:
                        return  # upstream unreachable; the caller answers
                    answer = sending.result()
                    if answer.status != 200 or answer.content.is_eof():
                        return  # upstream answered in full without waiting for the rest
                waiting = {t for t in (sending, ended) if not t.done()}
                await asyncio.wait(waiting, timeout=0.5, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ended.cancel()
        if not push.complete:
            raise _Refused(409, push.refusal or "hangar: the push was cut off; push again")

    async def _refuse_push(
        self, request: web.Request, commands: pktline.CommandList, reason: str
    ) -> web.StreamResponse:
        """Answer a push with a report-status that refuses every ref, so git prints why."""
        drained = await _drain(request)
        body = pktline.report_status_refusal(commands.refs, reason, use_sideband=commands.sideband)
        response = web.Response(
            body=body, headers={"Content-Type": RECEIVE_RESULT, "Cache-Control": "no-cache"}
        )
        if not drained:
            response.force_close()
        return response


def _drop(sending: asyncio.Future[aiohttp.ClientResponse]) -> None:
    """Abandon an upstream request: its connection is closed, not reused."""
    if not sending.done():
        sending.cancel()
    elif not sending.cancelled() and sending.exception() is None:
        sending.result().close()


class _PushStopped(Exception):
    pass


class _PushBody:
    """The push body as it goes upstream: the head already read, then the rest, counted.

    With a `walker` (force-push is off) the last chunk, which ends the pack, is held
    back until the pack's commits prove a fast-forward; a push that fails that check
    never reaches upstream whole, so upstream stores nothing.
    """

    def __init__(
        self,
        request: web.Request,
        head: bytes,
        commands_length: int,
        *,
        limit: int,
        too_large: str,
        walker: packwalk.PackCommits | None,
        command: pktline.RefCommand,
        not_fast_forward: str,
    ):
        self.request = request
        self.head = head
        self.commands_length = commands_length
        self.limit = limit
        self.walker = walker
        self.command = command
        self.messages = {"too_large": too_large, "not_fast_forward": not_fast_forward}
        self.total = 0
        self.refusal: str | None = None
        self.unreadable = False
        # Set when the body generator is over, whichever way; `complete` if it got to the end.
        self.ended = asyncio.Event()
        self.complete = False

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._checked_chunks():
                yield chunk
            self.complete = True
        finally:
            self.ended.set()

    async def _checked_chunks(self) -> AsyncIterator[bytes]:
        self.total = len(self.head)
        if self.walker is None:
            yield self.head
            async for chunk in self.request.content.iter_any():
                self.total += len(chunk)
                if self.total > self.limit:
                    self._stop(self.messages["too_large"])
                yield chunk
            return
        self._walk(self.head[self.commands_length :])
        held = self.head
        async for chunk in self.request.content.iter_any():
            self.total += len(chunk)
            if self.total > self.limit:
                self._stop(self.messages["too_large"])
            self._walk(chunk)
            yield held
            held = chunk
        try:
            self.walker.finish()
            proven = not self.unreadable and packwalk.proves_fast_forward(
                self.walker.commits, self.command.old, self.command.new
            )
        except packwalk.PackError:
            proven = False
        if not proven:
            self._stop(self.messages["not_fast_forward"])
        yield held

    def _walk(self, data: bytes) -> None:
        assert self.walker is not None
        if self.unreadable:
            return
        try:
            self.walker.feed(data)
        except packwalk.PackError:
            # A pack we cannot read proves nothing; the push is refused at its end.
            self.unreadable = True

    def _stop(self, reason: str) -> NoReturn:
        """End the body here, short of the end of the pack."""
        self.refusal = reason
        raise _PushStopped(reason)


async def _first_chunk(request: web.Request) -> tuple[bytes, bool]:
    """The body's first bytes, and whether they are still compressed.

    aiohttp's server may already have undone a `Content-Encoding` (its default) or not
    (`auto_decompress=False`); git bodies start with pkt-line hex, never a gzip or
    zlib header, so the bytes tell which. A body that is neither, or an encoding git
    never sends, is refused here rather than failing halfway.
    """
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in _ENCODINGS:
        await _drain(request)
        raise _Refused(
            415, f"hangar: Content-Encoding {encoding!r} is not accepted; send the body "
                 "uncompressed or with gzip")
    try:
        first = await request.content.readany()
        if encoding in ("", "identity"):
            return first, False
        while 0 < len(first) < 4 and not request.content.at_eof():
            first += await request.content.readany()
    except RequestPayloadError:
        first = b""  # the server could not undo the encoding: the bytes do not match it
    if first[:1] in (b"\x1f", b"\x78"):
        return first, True
    if first and _PKT_LENGTH.fullmatch(first[:4]):
        return first, False
    await _drain(request)
    raise _Refused(
        400, f"hangar: the body does not match its Content-Encoding ({encoding}); "
             "send it uncompressed or compressed as the header says")


async def _chain(first: bytes, request: web.Request) -> AsyncIterator[bytes]:
    if first:
        yield first
    async for chunk in request.content.iter_any():
        yield chunk


async def _read_command_head(
    request: web.Request, first: bytes
) -> tuple[pktline.CommandList | None, bytes, str | None]:
    """Read the body up to the end of its command list: (commands, bytes read, error)."""
    buffer = bytearray(first)
    while True:
        try:
            commands = pktline.parse_commands(bytes(buffer))
        except pktline.PktLineError as exc:
            return None, bytes(buffer), f"hangar: the push request is malformed ({exc})"
        if commands is not None:
            return commands, bytes(buffer), None
        if len(buffer) > MAX_COMMAND_BYTES:
            return (
                None,
                bytes(buffer),
                (
                    f"hangar: the push's command list is longer than {_size(MAX_COMMAND_BYTES)}; "
                    "push one branch"
                ),
            )
        chunk = await request.content.readany()
        if not chunk:
            return None, bytes(buffer), "hangar: the push request ended inside its command list"
        buffer += chunk


async def _drain(request: web.Request) -> bool:
    """Read and drop the rest of the body; False if it did not end in time."""
    try:
        async with asyncio.timeout(DRAIN_SECONDS):
            while await request.content.readany():
                pass
    except (TimeoutError, aiohttp.ClientError, ConnectionError, RequestPayloadError):
        return False
    return True


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


def _accepted_refs(report: bytes, *, sideband: bool) -> set[str]:
    """Refs upstream's report-status says it updated (`ok <ref>`)."""
    try:
        packets = pktline.PktLineReader()
        packets.feed(report)
        data = bytearray()
        for packet in packets.packets():
            if packet.kind is not pktline.PacketKind.DATA:
                continue
            if not sideband:
                data += pktline.encode(packet.payload)
            elif packet.payload[:1] == b"\x01":
                data += packet.payload[1:]
        inner = pktline.PktLineReader()
        inner.feed(bytes(data))
        return {
            p.payload.decode("utf-8", "replace").rstrip("\n")[3:]
            for p in inner.packets()
            if p.kind is pktline.PacketKind.DATA and p.payload.startswith(b"ok ")
        }
    except pktline.PktLineError:
        return set()


def _upstream_reason(grant: Grant, status: int) -> str:
    if status in (401, 403):
        return (
            f"hangar: GitHub refused hangar's access to {grant.repo} (HTTP {status}); "
            "check that the App is installed on it with Contents: write"
        )
    if status == 404:
        return f"hangar: {grant.repo} was not found upstream, or the App cannot see it"
    return f"hangar: GitHub answered HTTP {status}; try again"


def _basic_password(header: str) -> str | None:
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    _, sep, password = decoded.partition(":")
    return password if sep else None


def _size(n: int) -> str:
    return f"{n / 2**20:g} MiB" if n >= 2**20 else f"{n / 2**10:g} KiB"


def _session_ctx(
    key: web.AppKey[aiohttp.ClientSession],
) -> Callable[[web.Application], AsyncIterator[None]]:
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        async with aiohttp.ClientSession(
            timeout=UPSTREAM_TIMEOUT, auto_decompress=False
        ) as session:
            app[key] = session
            yield

    return ctx


PROXY_SESSION = web.AppKey("hangar_proxy_session", aiohttp.ClientSession)


def setup_proxy(
    app: web.Application,
    *,
    registry: TokenRegistry,
    upstream: Upstream,
    max_push_bytes: int = DEFAULT_MAX_PUSH_BYTES,
    session_key: web.AppKey[aiohttp.ClientSession] | None = None,
) -> None:
    """Mount the `/git/` routes on `app`.

    `session_key` names the app's shared ClientSession; without one the proxy opens
    (and closes) its own with the app.
    """
    if session_key is None:
        session_key = PROXY_SESSION
        app.cleanup_ctx.append(_session_ctx(session_key))
    proxy = _Proxy(app, registry, upstream, max_push_bytes, session_key)
    prefix = "/git/{sandbox_id}/{owner}/{repo}"
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    app.router.add_get(f"{prefix}/info/refs", proxy.info_refs, allow_head=False)
    handler = proxy.upload_pack
    app.router.add_post(f"{prefix}/git-upload-pack", handler)
    handler = proxy.receive_pack
    app.router.add_post(f"{prefix}/git-receive-pack", handler)
