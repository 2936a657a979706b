"""Run fakehub on its own thread and event loop, for tests and the demo.

    with running_fakehub(tmp_path) as hub:
        app = hub.create_app("hangar", webhook_url=...)

The caller gets a synchronous Driver; it may block (run git, poll) freely because
fakehub's loop is elsewhere.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from aiohttp import web

from fakehub import faults
from fakehub.ci import CIRunner
from fakehub.driver import Driver
from fakehub.faults import FAULTS_KEY
from fakehub.hub import Hub
from fakehub.server import create_app


class ServerThread:
    """fakehub's aiohttp server on a private loop in a daemon thread."""

    def __init__(self, data_dir: Path, host: str = "127.0.0.1", port: int = 0) -> None:
        self.hub = Hub(Path(data_dir))
        self.hub.ci = CIRunner(self.hub)
        self.host, self.port = host, port
        self.app = create_app(self.hub)
        self.loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="fakehub", daemon=True)

    @property
    def faults(self):
        return self.app[FAULTS_KEY]

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(30)
        if self._error:
            raise self._error
        if not self._ready.is_set():
            raise RuntimeError("fakehub did not start within 30 s")

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._serve())
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        self.loop.run_forever()

    async def _serve(self) -> None:
        self._runner = web.AppRunner(self.app, access_log=None, shutdown_timeout=2)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        server = site._server
        assert server is not None and server.sockets
        self.port = server.sockets[0].getsockname()[1]
        self.hub.base_url = f"http://{self.host}:{self.port}"

    def stop(self) -> None:
        if not self.loop.is_running():
            return

        async def shutdown() -> None:
            for task in faults.hanging.pop(self.loop, set()):
                task.cancel()
            if self._runner:
                await self._runner.cleanup()

        future = asyncio.run_coroutine_threadsafe(shutdown(), self.loop)
        try:
            future.result(30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)


@contextmanager
def running_fakehub(data_dir: Path, *, port: int = 0, host: str = "127.0.0.1") -> Iterator[Driver]:
    server = ServerThread(Path(data_dir), host=host, port=port)
    server.start()
    try:
        yield Driver(server)
    finally:
        server.stop()
