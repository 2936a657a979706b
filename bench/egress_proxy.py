"""Egress proxy overhead: throughput of a download through a CONNECT tunnel on the gate
vs straight from the origin, on loopback.

    .venv/bin/python bench/egress_proxy.py [--runs 10] [--mib 64]

An origin on 127.0.0.1 sends --mib MiB over a raw TCP stream. Each run reads it three
ways, alternating: directly; through hangar's egress proxy (credential check, allowlist,
the operator's pin to 127.0.0.1, then a tunnel); and through a bare byte relay that
reads nothing and checks nothing (the least any proxy in a process of its own costs on
this machine). The origin, the gate and the relay each run in a process of their own,
as they do for real: on one event loop with the reader, the tunnel's relaying would be
charged to the direct path's time too. Prints the median throughput of each, the
ratios against direct, and the median time to set up a tunnel (CONNECT to 200).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import statistics
import sys
import tempfile
import time
from pathlib import Path

from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.processes import ServerProcesses
from proxy.egress import EgressLedger, setup_egress

CHUNK = b"x" * 65536


def _origin(mib: int, ready) -> None:
    async def send(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()  # "go"
        for _ in range(mib * 16):
            writer.write(CHUNK)
            await writer.drain()
        writer.close()

    async def run() -> None:
        server = await asyncio.start_server(send, "127.0.0.1", 0)
        ready.put(server.sockets[0].getsockname()[1])
        await asyncio.Event().wait()

    asyncio.run(run())


def _gate(db: Path, ready) -> None:
    async def run() -> None:
        gate = web.Application()
        setup_egress(gate, ledger=EgressLedger(db))
        runner = web.AppRunner(gate, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        ready.put(site._server.sockets[0].getsockname()[1])
        await asyncio.Event().wait()

    asyncio.run(run())


def _relay(target: int, ready) -> None:
    """A bare relay: copies bytes both ways, reads none of them."""
    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(1 << 20):
            writer.write(data)
            await writer.drain()
        writer.close()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target)
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def run() -> None:
        server = await asyncio.start_server(accept, "127.0.0.1", 0)
        ready.put(server.sockets[0].getsockname()[1])
        await asyncio.Event().wait()

    asyncio.run(run())


async def read_all(reader: asyncio.StreamReader) -> int:
    size = 0
    while data := await reader.read(1 << 20):
        size += len(data)
    return size


async def direct(port: int) -> float:
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"go\n")
    size = await read_all(reader)
    writer.close()
    return size / (time.perf_counter() - started)


async def tunnelled(gate: int, port: int, auth: str) -> tuple[float, float]:
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", gate)
    writer.write(f"CONNECT origin.test:{port} HTTP/1.1\r\nHost: origin.test\r\n"
                 f"Proxy-Authorization: Basic {auth}\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    setup = time.perf_counter() - started
    writer.write(b"go\n")
    size = await read_all(reader)
    writer.close()
    return size / (time.perf_counter() - started), setup


async def main(runs: int, mib: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "hangar.db"
        with ServerProcesses() as servers:
            port = servers.start(_origin, mib)
            ledger = EgressLedger(db)
            token = ledger.issue("sb-bench", run_id="run-bench",
                                 allow=[f"origin.test:{port}"],
                                 hosts={"origin.test": "127.0.0.1"})
            gate_port = servers.start(_gate, db)
            relay_port = servers.start(_relay, port)
            auth = base64.b64encode(f"sb-bench:{token}".encode()).decode()
            plain, through, relayed, setups = [], [], [], []
            for _ in range(runs):
                plain.append(await direct(port))
                rate, setup = await tunnelled(gate_port, port, auth)
                through.append(rate)
                setups.append(setup)
                relayed.append(await direct(relay_port))
    p, t, r = statistics.median(plain), statistics.median(through), statistics.median(relayed)
    print(f"{mib} MiB, {runs} runs each way, alternating")
    print(f"direct:     {p / 2**20:8.1f} MiB/s")
    print(f"tunnel:     {t / 2**20:8.1f} MiB/s   ratio {t / p:.2f}")
    print(f"byte relay: {r / 2**20:8.1f} MiB/s   ratio {r / p:.2f}   (no proxy in a process"
          " of its own does better here)")
    print(f"CONNECT to 200: {statistics.median(setups) * 1000:.2f} ms (median of {runs})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--mib", type=int, default=64)
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.mib))
