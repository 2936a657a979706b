"""Run hangar's web application on its own thread and event loop.

The demo and the end-to-end tests use this so that they can block (run git, poll
fakehub) without stalling hangar, exactly as when hangar runs as its own process.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future

from aiohttp import web

from app.settings import Settings


class ServiceThread:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.app: web.Application | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="hangar",
                                        daemon=True)
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://{self.settings.host}:{self.settings.port}"

    def start(self) -> ServiceThread:
        self._thread.start()
        self.call(self._start())
        return self

    def stop(self) -> None:
        if self._runner is not None:
            self.call(self._runner.cleanup())
            self._runner = None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)

    def call(self, coro, timeout: float = 60):
        """Run a coroutine on hangar's loop and wait for its result."""
        future: Future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result(timeout)

    async def on_loop(self, coro):
        """Run a coroutine on hangar's loop, awaited from another loop: what hangar's own
        objects do (a provider's sandboxes, its timers) stays on the thread they belong to."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    async def _start(self) -> None:
        from app.wiring import create_app

        self.app = create_app(self.settings)
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.settings.host, self.settings.port)
        await site.start()

    def __enter__(self) -> ServiceThread:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
