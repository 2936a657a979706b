"""The sandbox gate holds under pressure: a request's headers must come within a
deadline, one sandbox holds only so many connections, the gate never takes the
descriptors hangar keeps for itself, and errors of accepting are counted, not logged
one by one. hangar runs for real (its own thread, its real gate on its unix socket)."""

from __future__ import annotations

import asyncio
import logging
import select
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from aiohttp import web

from app.datadir import gate_dir
from app.metrics import Metrics
from app.service import ServiceThread
from app.settings import Settings
from app.web.keys import METRICS, MODELS, TOKENS
from app.web.sandbox_gate import (
    FILES_PER_CONNECTION,
    RESERVED_FILES,
    GateGuard,
    count_accept_errors,
    gate_connection_budget,
)
from tests.e2e.conftest import free_port


def _settings(tmp_path: Path, **overrides) -> Settings:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = tmp_path / "app.pem"
    pem.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
    return Settings(app_id=1, private_key_file=pem, webhook_secret="s" * 16,
                    data_dir=tmp_path / "data", github_url="http://127.0.0.1:9/api/v3",
                    port=free_port(), shutdown_grace_seconds=0.5, **overrides)


def gate_socket(settings: Settings) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(gate_dir(settings.data_dir) / "proxy.sock"))
    return sock


def closed_within(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        while chunk := sock.recv(4096):
            if chunk.startswith(b"HTTP/"):
                continue
        return True
    except TimeoutError:
        return False
    except OSError:
        return True


class HangingModel:
    """A model endpoint that takes requests and never answers them."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.held.append(conn)

    def close(self) -> None:
        self.server.close()
        for conn in self.held:
            conn.close()


def test_a_request_whose_headers_never_end_is_closed(tmp_path):
    settings = _settings(tmp_path, sandbox_gate_header_timeout_seconds=0.5)
    with ServiceThread(settings) as hangar:
        slow = gate_socket(settings)
        slow.sendall(b"GET /model/sb-1/v1/models HTTP/1.1\r\nHost: x\r\n")  # never ends
        assert closed_within(slow, 20)
        assert hangar.app[METRICS].sandbox_gate_refusals.value(reason="header_timeout") >= 1
        # A connection that sends its headers in time gets its answer.
        quick = gate_socket(settings)
        quick.sendall(b"GET /model/sb-1/v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
        quick.settimeout(20)
        assert quick.recv(4096).startswith(b"HTTP/1.1 401")


def test_one_sandbox_holds_at_most_its_share_of_connections(tmp_path, monkeypatch):
    model = HangingModel()
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-real-model-key-0123456789")
    settings = _settings(tmp_path, sandbox_gate_connections_per_sandbox=2, model_endpoints={
        "ANTHROPIC_API_KEY": {"base_url": f"http://127.0.0.1:{model.port}"}})
    try:
        with ServiceThread(settings) as hangar:
            hangar.app[TOKENS].issue("sb-1", repo="acme/widgets", branch="hangar/1-ab",
                                     installation_id=1)
            token = hangar.app[MODELS].issue("sb-1", credential="ANTHROPIC_API_KEY",
                                             run_id="run-1")
            request = (b"POST /model/sb-1/v1/messages HTTP/1.1\r\nHost: x\r\n"
                       b"x-api-key: " + token.encode() + b"\r\nContent-Length: 2\r\n\r\n{}")
            held = []
            for _ in range(2):  # relayed, and held by the model
                sock = gate_socket(settings)
                sock.sendall(request)
                held.append(sock)
            deadline = time.monotonic() + 20
            while len(model.held) < 2 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert len(model.held) == 2
            third = gate_socket(settings)
            third.sendall(request)
            third.settimeout(20)
            assert third.recv(4096).startswith(b"HTTP/1.1 429")
            assert hangar.app[METRICS].sandbox_gate_refusals.value(reason="per_sandbox") == 1
            # Another sandbox is not held back by sb-1's connections.
            other = gate_socket(settings)
            other.sendall(b"GET /model/sb-2/v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
            other.settimeout(20)
            assert other.recv(4096).startswith(b"HTTP/1.1 401")
            # One of sb-1's connections ends: its share frees.
            held.pop().close()
            relayed = len(model.held)
            deadline = time.monotonic() + 20
            while len(model.held) == relayed:  # until one is relayed: the model holds it
                assert time.monotonic() < deadline, "sb-1's freed share was never given back"
                again = gate_socket(settings)
                again.sendall(request)
                while len(model.held) == relayed and time.monotonic() < deadline:
                    if select.select([again], [], [], 0.02)[0]:  # answered: not relayed
                        assert again.recv(4096).startswith(b"HTTP/1.1 429")
                        time.sleep(0.05)
                        break
            # The model lets go first: hangar's stop then waits for no relay.
            model.close()
    finally:
        model.close()


async def test_the_gate_takes_no_more_than_its_budget(tmp_path):
    async def hello(request: web.Request) -> web.Response:
        return web.Response(text="hi")

    app = web.Application()
    app.router.add_get("/model/{sb}/x", hello)
    metrics = Metrics()
    guard = GateGuard(max_connections=3, per_sandbox=100, header_timeout_s=60,
                      metrics=metrics)
    app.middlewares.append(guard.middleware)
    runner = web.AppRunner(app)
    await runner.setup()
    path = tmp_path / "gate.sock"
    server = await asyncio.get_running_loop().create_unix_server(
        guard.protocols(runner.server), str(path))
    try:
        conns = [await asyncio.open_unix_connection(str(path)) for _ in range(5)]
        for _, writer in conns:
            writer.write(b"GET /model/sb-1/x HTTP/1.1\r\nHost: x\r\n")
        for reader, _ in conns[3:]:  # closed at once: over the budget
            try:
                assert await asyncio.wait_for(reader.read(), 10) == b""
            except ConnectionResetError:
                pass
        assert len(guard.open) == 3 and metrics.sandbox_gate_refusals.value(
            reason="gate_full") == 2
        for _, writer in conns:
            writer.close()
    finally:
        server.close()
        await runner.cleanup()


def test_the_budget_leaves_the_reserve():
    assert gate_connection_budget(1024) == (1024 - RESERVED_FILES) // FILES_PER_CONNECTION
    assert gate_connection_budget(100) == 16  # never none at all


def test_the_soft_open_files_limit_is_raised_to_the_hard_one():
    code = ("import resource; from app.web.sandbox_gate import raise_open_files_limit; "
            "print(raise_open_files_limit(), resource.getrlimit(resource.RLIMIT_NOFILE)[0])")

    def limit() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 1500))

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         preexec_fn=limit, cwd=Path(__file__).resolve().parents[2], check=True)
    assert out.stdout.split() == ["1500", "1500"]


async def test_accept_errors_are_counted_and_logged_once_a_minute(caplog):
    loop = asyncio.get_running_loop()
    metrics = Metrics()
    previous = count_accept_errors(loop, metrics)
    try:
        with caplog.at_level(logging.WARNING):
            for _ in range(1000):
                loop.call_exception_handler({
                    "message": "socket.accept() out of system resource",
                    "exception": OSError(24, "Too many open files")})
        assert metrics.accept_errors.value() == 1000
        assert len([r for r in caplog.records if "accepting" in r.getMessage()]) == 1
    finally:
        loop.set_exception_handler(previous)
