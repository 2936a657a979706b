"""The `/mcp` route on hangar's own port: what it checks before the MCP SDK is needed
(the Origin, the token, the body's size), and the SDK's server (`app.web.mcp`), loaded
at the first call that passes those checks.

The SDK and its protocol types take longer to import than the rest of `hangar serve`
together; a hangar that no orchestrator talks to never loads them, and one that is
asked loads them once, off the event loop, while webhooks go on being answered."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import ipaddress
import json
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from app.web.api import caller
from app.web.keys import SETTINGS

MAX_MCP_BODY = 1 << 20


class _Transport:
    """The SDK's ASGI transport for this application, made at the first call, and the
    task that runs its session manager from then until the application stops."""

    def __init__(self) -> None:
        self.asgi: Any = None
        self.made = asyncio.Lock()
        self.stop = asyncio.Event()
        self.task: asyncio.Task | None = None

    async def get(self, app: web.Application) -> Any:
        async with self.made:
            if self.asgi is None:
                mcp = await asyncio.to_thread(importlib.import_module, "app.web.mcp")
                server, asgi = mcp.http_transport(app)
                await self._run_sessions(server)
                self.asgi = asgi
        return self.asgi

    async def _run_sessions(self, server: Any) -> None:
        # The manager's task group must be entered and left in one task: it gets its own.
        started = asyncio.Event()

        async def run() -> None:
            async with server.session_manager.run():
                started.set()
                await self.stop.wait()

        self.task = asyncio.get_running_loop().create_task(run(), name="mcp-sessions")
        waiting = asyncio.ensure_future(started.wait())
        try:
            await asyncio.wait([self.task, waiting], return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiting.cancel()
        if self.task.done():
            self.task.result()  # the manager failed to start: say why

    async def close(self) -> None:
        self.stop.set()
        if self.task is not None:
            await self.task


TRANSPORT = web.AppKey("mcp_transport", _Transport)


def mount(app: web.Application) -> None:
    """Serve the MCP tools at /mcp (see app.web.mcp.http_transport)."""
    app.cleanup_ctx.append(_transport)
    app.router.add_route("*", "/mcp", serve_mcp)


async def _transport(app: web.Application) -> AsyncIterator[None]:
    app[TRANSPORT] = _Transport()
    yield
    await app[TRANSPORT].close()


async def serve_mcp(request: web.Request) -> web.StreamResponse:
    if not origin_allowed(request.headers.get("Origin"), request.app[SETTINGS]):
        raise web.HTTPForbidden(text=json.dumps({"error": (
            "this Origin may not use hangar's MCP server (a browser page on another site); "
            "an operator allows an origin with HANGAR_MCP_ALLOWED_ORIGINS")}),
            content_type="application/json")
    caller(request)  # 503 while the API is off, 401 without a live token
    length = request.content_length or 0
    if length > MAX_MCP_BODY:
        raise web.HTTPRequestEntityTooLarge(max_size=MAX_MCP_BODY, actual_size=length)
    body = await request.read()
    asgi = await request.app[TRANSPORT].get(request.app)
    from app.web.mcp import serve_asgi  # loaded by the line above

    return await serve_asgi(asgi, request, body)


def origin_allowed(origin: str | None, settings: Any) -> bool:
    """The MCP specification's defence against DNS rebinding: a request from a browser
    (it carries `Origin`) is served only from a loopback origin, hangar's own public URL
    or an origin the operator lists (`mcp_allowed_origins`); one without `Origin` (not a
    browser) is judged by its token alone."""
    if origin is None:
        return True
    try:
        parsed = urlsplit(origin)
        host = (parsed.hostname or "").lower()
    except ValueError:
        return False
    if parsed.scheme not in ("http", "https") or not host:
        return False  # "null" (a sandboxed page, a file) or nonsense
    if host == "localhost" or host.endswith(".localhost"):
        return True
    with contextlib.suppress(ValueError):
        if ipaddress.ip_address(host).is_loopback:
            return True
    allowed = {_origin_of(url) for url in [settings.public_url, *settings.mcp_allowed_origins]
               if url}
    return _origin_of(origin) in allowed


def _origin_of(url: str) -> str:
    parts = urlsplit(url.strip())
    default = {"http": 80, "https": 443}.get(parts.scheme)
    port = f":{parts.port}" if parts.port and parts.port != default else ""
    return f"{parts.scheme}://{(parts.hostname or '').lower()}{port}"
