"""Model gateway overhead: time to first byte and throughput, through hangar vs direct.

    .venv/bin/python bench/model_gateway.py [--runs 40] [--chunks 2000]
                                            [--model-latency-ms 200] [--latency-runs 15]

The scripted model server streams an Anthropic Messages answer of --chunks text deltas
(about 230 bytes each). Each run fetches it three ways, alternating:

- direct: straight from the model server;
- gateway: through hangar's model gateway (token check, credential swap, metering);
- byte relay: through a plain TCP relay that copies bytes both ways and reads none of
  them: the least that any proxy in a process of its own adds on this machine.

The model server, the gateway and the relay each run in a process of their own, as they
do for real (the model is remote; the gateway is hangar's). It runs twice: with the model
answering at once (its first byte after about a millisecond, so the gateway's whole cost
shows), and with --model-latency-ms before the model's first byte (a fast real model's
time to its first token; default 200 ms). Prints, for each, the median time to first and
to last byte, what the gateway adds in ms, and the ratios against the direct baseline of
the same run (goal: >= 0.95). Throughput above 1.0 is possible: the gateway relays what
has arrived in one write, where the model wrote each event on its own.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fakehub.model import ModelScript, ModelServer, Scene, Step
from proxy import TokenRegistry
from proxy.gateway import Endpoint, ModelLedger, setup_gateway

KEY = "sk-bench-key"
GOAL = 0.95
BODY = {"model": "claude-sonnet-4-5", "stream": True, "max_tokens": 1000,
        "tools": [{"name": "Bash", "input_schema": {"type": "object"}}],
        "messages": [{"role": "user", "content": "hangar Request: say a lot"}]}


class Fixed:
    def __init__(self, base_url: str):
        self.base_url = base_url

    def endpoint(self, credential: str) -> Endpoint:
        return Endpoint(self.base_url, KEY, "x-api-key")


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    return runner, f"http://127.0.0.1:{port}"


async def fetch(
    session: aiohttp.ClientSession, url: str, headers: dict
) -> tuple[float, float, int]:
    started = time.perf_counter()
    async with session.post(url, json=BODY, headers=headers) as response:
        first = None
        size = 0
        async for chunk in response.content.iter_any():
            if first is None:
                first = time.perf_counter() - started
            size += len(chunk)
    return first or 0.0, time.perf_counter() - started, size


def _serve_forever(make_app, ready) -> None:
    """In a process of its own: serve make_app() on a free loopback port, send the URL."""
    async def run() -> None:
        _runner, url = await serve(make_app())  # served until the process ends
        ready.put(url)
        await asyncio.Event().wait()

    asyncio.run(run())


def _model_app(chunks: int, latency_s: float) -> web.Application:
    script = ModelScript(api_key=KEY, filler_chunks=chunks,
                         scenes=[Scene(when="", steps=[Step(say="done")])])
    app = ModelServer(script).app()

    @web.middleware
    async def think(request: web.Request, handler):
        await asyncio.sleep(latency_s)  # the model's time to its first token
        return await handler(request)

    if latency_s:
        app.middlewares.append(think)
    return app


def _gateway_app(db: Path, model_url: str) -> web.Application:
    gateway = web.Application()
    setup_gateway(gateway, ledger=ModelLedger(db), endpoints=Fixed(model_url))
    return gateway


class _Pipe(asyncio.Protocol):
    """One side of the byte relay: what arrives is written to the other side."""

    def __init__(self, peer: _Pipe | None = None):
        self.peer = peer
        self.transport: asyncio.Transport | None = None
        self.early: list[bytes] = []

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.peer is None or self.peer.transport is None:
            self.early.append(data)
        else:
            self.peer.transport.write(data)

    def connection_lost(self, exc) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()


def _relay_forever(target_port: int, ready) -> None:
    async def run() -> None:
        loop = asyncio.get_running_loop()

        class Inbound(_Pipe):
            def connection_made(self, transport) -> None:
                super().connection_made(transport)
                self.dialing = loop.create_task(self.dial())

            async def dial(self) -> None:
                _, out = await loop.create_connection(lambda: _Pipe(self), "127.0.0.1",
                                                      target_port)
                self.peer = out
                for data in self.early:
                    out.transport.write(data)

        server = await loop.create_server(Inbound, "127.0.0.1", 0)
        ready.put(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
        await asyncio.Event().wait()

    asyncio.run(run())


def start(target, *args) -> tuple[multiprocessing.Process, str]:
    ready: multiprocessing.Queue = multiprocessing.Queue()
    process = multiprocessing.Process(target=target, args=(*args, ready), daemon=True)
    process.start()
    return process, ready.get(timeout=30)


async def measure(model_url: str, gateway_url: str, relay_url: str, token: str,
                  runs: int) -> dict[str, list[tuple[float, float, int]]]:
    paths = {"direct": (f"{model_url}/v1/messages", {"x-api-key": KEY}),
             "gateway": (f"{gateway_url}/model/sb-bench/v1/messages", {"x-api-key": token}),
             "byte relay": (f"{relay_url}/v1/messages", {"x-api-key": KEY})}
    results: dict[str, list] = {name: [] for name in paths}
    async with aiohttp.ClientSession() as client:
        for url, headers in paths.values():  # one unmeasured warm-up each
            await fetch(client, url, headers)
        for _ in range(runs):
            for name, (url, headers) in paths.items():
                results[name].append(await fetch(client, url, headers))
    return results


def report(title: str, results: dict[str, list[tuple[float, float, int]]]) -> dict:
    size = results["direct"][0][2]
    first = {name: statistics.median(r[0] for r in rs) for name, rs in results.items()}
    last = {name: statistics.median(r[1] for r in rs) for name, rs in results.items()}
    print(title)
    for name in results:
        line = (f"  {name:10s} first byte {first[name] * 1000:8.2f} ms   last byte "
                f"{last[name] * 1000:8.2f} ms   {size / last[name] / 2**20:6.1f} MiB/s")
        if name != "direct":
            line += (f"   adds {(first[name] - first['direct']) * 1000:+.2f} ms to the first"
                     f" byte: ratio {first['direct'] / first[name]:.2f};"
                     f" throughput ratio {last['direct'] / last[name]:.2f}")
        print(line)
    return {"first": first["direct"] / first["gateway"],
            "throughput": last["direct"] / last["gateway"]}


def _verdict(ratio: float) -> str:
    return f"{ratio:.2f} ({'meets' if ratio >= GOAL else 'does NOT meet'} {GOAL})"


async def main(runs: int, chunks: int, latency_ms: float, latency_runs: int) -> None:
    tmp = Path(tempfile.mkdtemp())
    db = tmp / "hangar.db"
    ledger = ModelLedger(db)
    TokenRegistry(db).issue("sb-bench", repo="o/r", branch="b", installation_id=1)
    token = ledger.issue("sb-bench", credential="ANTHROPIC_API_KEY", run_id="run-bench")
    ratios = {}
    for latency_s, n, title in (
            (0.0, runs, "model answering at once:"),
            (latency_ms / 1000, latency_runs,
             f"model with {latency_ms:g} ms before its first byte:")):
        processes = []
        try:
            model, model_url = start(_serve_forever,
                                     functools.partial(_model_app, chunks, latency_s))
            processes.append(model)
            gateway, gateway_url = start(_serve_forever,
                                         functools.partial(_gateway_app, db, model_url))
            processes.append(gateway)
            relay, relay_url = start(_relay_forever, int(model_url.rsplit(":", 1)[1]))
            processes.append(relay)
            results = await measure(model_url, gateway_url, relay_url, token, n)
        finally:
            for process in processes:
                process.terminate()
        if not ratios:
            size = results["direct"][0][2]
            print(f"answer: {size / 1024:.0f} KiB in {chunks} deltas, "
                  f"{runs} runs (at once) / {latency_runs} (with latency), paths alternating")
        ratios[title] = report(title, results)
    usage = ledger.usage("run-bench")
    print(f"metered: {usage.requests} requests through the gateway "
          f"({usage.output_tokens} output tokens last seen)")
    (at_once, slow) = ratios.values()
    print(f"goal (gateway >= {GOAL} of direct):")
    print(f"  model answering at once: first byte {_verdict(at_once['first'])}, "
          f"throughput {_verdict(at_once['throughput'])}")
    print(f"  model with {latency_ms:g} ms latency: first byte {_verdict(slow['first'])}, "
          f"throughput {_verdict(slow['throughput'])}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--chunks", type=int, default=2000)
    parser.add_argument("--model-latency-ms", type=float, default=200)
    parser.add_argument("--latency-runs", type=int, default=15)
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.chunks, args.model_latency_ms, args.latency_runs))
