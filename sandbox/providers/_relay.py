"""A sandbox's only way out of a `network: loopback` sandbox: hangar's sandbox gate.

A sandbox with its own network namespace has nothing but `lo`. A small relay inside the
namespace listens on 127.0.0.1:<proxy port> and forwards each connection to a unix socket
in a directory bound read-only into the sandbox. hangar's sandbox gate (app/web/sandbox_gate.py,
a listener of its own that serves only sandbox routes such as `/git/`) listens on that
socket, so the sandbox reaches the gate and nothing else: not hangar's webhook, API or
metrics, not any other service on the host's loopback.

Without a gate (a bare push proxy in tests), `ProxyRelay` is the host end instead: it
listens on the socket and forwards to 127.0.0.1:<port>.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from pathlib import Path

RELAY_SANDBOX_DIR = "/run/hangar-relay"
SOCKET_NAME = "proxy.sock"

# Runs inside the sandbox with the host's python3 (-I -S: no site, no user paths). Binds
# first, then forks: the child relays, the parent becomes the command, so the command
# never starts before the port is open. The relay ends when the command ends (the kernel
# kills it when its parent, the command, exits), and with the sandbox's pid namespace.
# TCP_NODELAY: with Nagle, a streamed event written while the last is unacknowledged
# waits for the agent's delayed ACK, up to 40 ms. _socket and _thread, not socket and
# threading: their imports (enum, selectors, collections) were most of the relay's start,
# and the command waits for it.
_IN_SANDBOX = r"""
import os, sys, _socket as S, _thread
port, path, argv = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
srv = S.socket(S.AF_INET, S.SOCK_STREAM); srv.setsockopt(S.SOL_SOCKET, S.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", port)); srv.listen(64)
def pump(a, b, done=None):
    try:
        while data := a.recv(65536):
            b.sendall(data)
    except OSError:
        pass
    for s, how in ((b, S.SHUT_WR), (a, S.SHUT_RD)):
        try: s.shutdown(how)
        except OSError: pass
    if done is not None: done.release()
def serve(fd):
    conn = S.socket(S.AF_INET, S.SOCK_STREAM, 0, fd)
    conn.setsockopt(S.IPPROTO_TCP, S.TCP_NODELAY, 1)
    up = S.socket(S.AF_UNIX, S.SOCK_STREAM)
    try: up.connect(path)
    except OSError: conn.close(); up.close(); return
    done = _thread.allocate_lock(); done.acquire()
    _thread.start_new_thread(pump, (up, conn, done))
    pump(conn, up); done.acquire(); conn.close(); up.close()
command = os.getpid()
if os.fork() == 0:
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    except Exception:
        pass
    if os.getppid() != command:
        os._exit(0)
    fd = os.open(os.devnull, os.O_RDWR)
    for n in (0, 1, 2): os.dup2(fd, n)
    os.setsid()
    while True:
        c, _ = srv._accept()
        _thread.start_new_thread(serve, (c,))
srv.close()
os.execvp(argv[0], argv)
"""


def bind_unix_socket(directory: Path, name: str = SOCKET_NAME) -> socket.socket:
    """A listening unix socket `directory/name`, world-connectable (the sandbox's uid may
    map to anyone), replacing a stale one. Long paths (> 100 bytes, past the limit of
    sun_path) are reached through a directory descriptor."""
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o755)
    with contextlib.suppress(FileNotFoundError):
        (directory / name).unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dir_fd = os.open(directory, os.O_PATH)
    try:
        path = str(directory / name)
        sock.bind(path if len(path) <= 100 else f"/proc/self/fd/{dir_fd}/{name}")
    except OSError:
        sock.close()
        raise
    finally:
        os.close(dir_fd)
    os.chmod(directory / name, 0o777)
    sock.listen(128)
    sock.setblocking(False)
    return sock


def relay_argv(python: str, port: int, argv: list[str]) -> list[str]:
    sock = f"{RELAY_SANDBOX_DIR}/{SOCKET_NAME}"
    return [python, "-I", "-S", "-c", _IN_SANDBOX, str(port), sock, *argv]


class ProxyRelay:
    """hangar's end: a unix socket in `directory` forwarding to 127.0.0.1:port.

    Started on demand by the provider (also after a restart, when the engine observes a
    run again), on the running event loop.
    """

    def __init__(self, directory: Path, port: int) -> None:
        self.directory = directory
        self.port = port
        self._server: asyncio.base_events.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.directory.mkdir(parents=True, exist_ok=True)
        os.chmod(self.directory, 0o755)

    @property
    def socket_path(self) -> Path:
        return self.directory / SOCKET_NAME

    async def ensure_running(self) -> None:
        loop = asyncio.get_running_loop()
        if self._server is not None and self._loop is loop and self._server.is_serving():
            return
        if self._server is not None and self._loop is loop:
            self._server.close()
        sock = bind_unix_socket(self.directory)
        self._server = await asyncio.start_unix_server(self._handle, sock=sock)
        self._loop = loop

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.port)
        except OSError:
            writer.close()
            return

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
                if dst.can_write_eof():
                    dst.write_eof()
            except (OSError, RuntimeError):
                pass

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))
        for w in (writer, up_writer):
            w.close()
