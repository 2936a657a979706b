"""Model gateway overhead: time to first byte and throughput, through hangar vs direct.

    .venv/bin/python bench/model_gateway.py [--rounds 5] [--fetches 20] [--chunks 2000]
                                            [--model-latency-ms 200] [--latency-fetches 8]

The scripted model server streams an Anthropic Messages answer of --chunks text deltas
(about 230 bytes each). Each round starts every process afresh and fetches the answer
four ways, in turn (in a fresh random order each time, 10 ms apart):

- direct: straight from the model server;
- gateway: through hangar's model gateway (token check, credential swap, metering);
- http relay: a do-nothing HTTP relay built from the same parts as the gateway (an
  aiohttp server that forwards with an aiohttp client and streams the answer back), with
  no token, no credential and no metering: what the gateway would cost if it did nothing;
- byte relay: a TCP relay that copies bytes both ways and reads none of them: the least
  that any proxy in a process of its own adds on this machine.

The model server, the gateway and the relays each run in a process of their own, as they
do for real (the model is remote; the gateway is hangar's). The rounds run three times:
with the model answering at once (its first byte after about a millisecond, so the
gateway's whole cost shows), first with a short answer (one delta: the first byte is
then the cost of one request through each path), then with the long one (the first byte
now also waits for a core: the model, the path and the client all want one at once, and
this machine may have two); and with --model-latency-ms before the model's first byte
(a fast real model's time to its first token; default 200 ms) and the long answer.

For each path it prints the median over rounds of each round's median time to first and
to last byte, what the path adds to the first byte in ms, and two ratios against the
direct fetches of the same round: first byte (direct time / path time) and throughput
(direct time to last byte / path time to last byte). A ratio of 1.0 is as fast as
direct; the goal for the gateway is >= 0.95. Each figure is the median over the rounds,
with the lowest and highest round in brackets. Throughput above 1.0 is possible: a relay
forwards what has arrived in one write, where the model wrote each event on its own.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.processes import ServerProcesses
from fakehub.model import ModelScript, ModelServer, Scene, Step
from proxy import TokenRegistry
from proxy.gateway import Endpoint, ModelLedger, setup_gateway

KEY = "sk-bench-key"
GOAL = 0.95
BODY = {"model": "claude-sonnet-4-5", "stream": True, "max_tokens": 1000,
        "tools": [{"name": "Bash", "input_schema": {"type": "object"}}],
        "messages": [{"role": "user", "content": "hangar Request: say a lot"}]}
PATHS = ("direct", "gateway", "http relay", "byte relay")
SETTLE_S = 0.01  # between fetches, so that each starts with every process idle
# Per fetch: seconds to the first byte of the answer's body, to its last, and its size.
Fetch = tuple[float, float, int]


class Fixed:
    def __init__(self, base_url: str):
        self.base_url = base_url

    def endpoint(self, credential: str) -> Endpoint:
        return Endpoint(self.base_url, KEY, "x-api-key", "anthropic")


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    return runner, f"http://127.0.0.1:{port}"


async def fetch(session: aiohttp.ClientSession, url: str, headers: dict) -> Fetch:
    started = time.perf_counter()
    async with session.post(url, json=BODY, headers=headers) as response:
        first = None
        size = 0
        async for chunk in response.content.iter_any():
            if first is None:
                first = time.perf_counter() - started
            size += len(chunk)
    return first or 0.0, time.perf_counter() - started, size


def _serve_forever(make_app: Callable[[], web.Application], ready) -> None:
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


_HOP_BY_HOP = {"host", "content-length", "transfer-encoding", "connection", "keep-alive"}
CLIENT = web.AppKey("bench_relay_client", aiohttp.ClientSession)


def _http_relay_app(model_url: str) -> web.Application:
    """The gateway's floor: the same server and client, forwarding and nothing else."""
    app = web.Application()

    async def client(app: web.Application):
        async with aiohttp.ClientSession(auto_decompress=False) as session:
            app[CLIENT] = session
            yield

    async def relay(request: web.Request) -> web.StreamResponse:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        async with request.app[CLIENT].request(
                request.method, model_url + request.path_qs, headers=headers,
                data=await request.read()) as upstream:
            response = web.StreamResponse(status=upstream.status, headers={
                k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_BY_HOP})
            response._send_headers_immediately = False  # as the gateway: with the first bytes
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response

    app.cleanup_ctx.append(client)
    app.router.add_route("*", "/{tail:.*}", relay)
    return app


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


async def one_round(db: Path, token: str, chunks: int, latency_s: float,
                    fetches: int) -> dict[str, list[Fetch]]:
    """Fresh processes, one unmeasured fetch on each path, then `fetches` on each."""
    with ServerProcesses() as servers:
        model_url = servers.start(_serve_forever,
                                  functools.partial(_model_app, chunks, latency_s))
        gateway_url = servers.start(_serve_forever,
                                    functools.partial(_gateway_app, db, model_url))
        http_relay_url = servers.start(_serve_forever,
                                       functools.partial(_http_relay_app, model_url))
        byte_relay_url = servers.start(_relay_forever, int(model_url.rsplit(":", 1)[1]))
        targets = {
            "direct": (f"{model_url}/v1/messages", {"x-api-key": KEY}),
            "gateway": (f"{gateway_url}/model/sb-bench/v1/messages", {"x-api-key": token}),
            "http relay": (f"{http_relay_url}/v1/messages", {"x-api-key": KEY}),
            "byte relay": (f"{byte_relay_url}/v1/messages", {"x-api-key": KEY})}
        results: dict[str, list[Fetch]] = {name: [] for name in PATHS}
        order = random.Random(1)
        async with aiohttp.ClientSession() as client:
            for url, headers in targets.values():
                await fetch(client, url, headers)
            for _ in range(fetches):
                # A fresh order each time: a fetch right after a direct one waits for the
                # model to finish with that one, and no path should always come next.
                for name in order.sample(PATHS, len(PATHS)):
                    await asyncio.sleep(SETTLE_S)
                    results[name].append(await fetch(client, *targets[name]))
        return results


def _spread(values: list[float], fmt: str) -> str:
    return (f"{format(statistics.median(values), fmt)}"
            f" [{format(min(values), fmt)}..{format(max(values), fmt)}]")


def report(title: str, rounds: list[dict[str, list[Fetch]]]) -> dict[str, dict]:
    """Per round: each path's median first and last byte, and its ratios to direct."""
    per_round = []
    for results in rounds:
        first = {name: statistics.median(f[0] for f in rs) for name, rs in results.items()}
        last = {name: statistics.median(f[1] for f in rs) for name, rs in results.items()}
        per_round.append((first, last))
    print(title)
    print(f"  {'':10s} {'first byte ms':>13s} {'last byte ms':>13s} {'adds ms to first':>22s}"
          f" {'first-byte ratio':>22s} {'throughput ratio':>22s}")
    figures: dict[str, dict] = {}
    for name in PATHS:
        firsts = [first[name] * 1000 for first, _ in per_round]
        lasts = [last[name] * 1000 for _, last in per_round]
        adds = [(first[name] - first["direct"]) * 1000 for first, _ in per_round]
        ttfb = [first["direct"] / first[name] for first, _ in per_round]
        throughput = [last["direct"] / last[name] for _, last in per_round]
        figures[name] = {"adds": adds, "ttfb": ttfb, "throughput": throughput}
        line = f"  {name:10s} {statistics.median(firsts):13.2f} {statistics.median(lasts):13.2f}"
        if name != "direct":
            line += (f" {_spread(adds, '+.2f'):>22s} {_spread(ttfb, '.2f'):>22s}"
                     f" {_spread(throughput, '.2f'):>22s}")
        print(line)
    beyond = [(first["gateway"] - first["http relay"]) * 1000 for first, _ in per_round]
    print(f"  the gateway's own work (gateway - http relay): {_spread(beyond, '+.2f')} ms"
          f" to the first byte")
    return figures


def _verdict(ratios: list[float]) -> str:
    median = statistics.median(ratios)
    return f"{_spread(ratios, '.2f')} ({'meets' if median >= GOAL else 'does NOT meet'} {GOAL})"


async def main(rounds: int, fetches: int, chunks: int, latency_ms: float,
               latency_fetches: int) -> None:
    db = Path(tempfile.mkdtemp()) / "hangar.db"
    ledger = ModelLedger(db)
    TokenRegistry(db).issue("sb-bench", repo="o/r", branch="b", installation_id=1)
    token = ledger.issue("sb-bench", credential="ANTHROPIC_API_KEY", run_id="run-bench")
    scenarios = {
        "model answering at once, short answer": (0, 0.0, 3 * fetches),
        "model answering at once": (chunks, 0.0, fetches),
        f"model with {latency_ms:g} ms before its first byte": (chunks, latency_ms / 1000,
                                                                 latency_fetches)}
    print(f"{rounds} rounds; per round and path {3 * fetches} fetches of the short answer,"
          f" {fetches} of the long one at once, {latency_fetches} with latency")
    figures: dict[str, dict] = {}
    sent = 0
    for title, (deltas, latency_s, n) in scenarios.items():
        results = [await one_round(db, token, deltas, latency_s, n) for _ in range(rounds)]
        sent += rounds * (n + 1)
        size = results[0]["direct"][0][2]
        figures[title] = report(f"{title} ({size / 1024:.1f} KiB in {deltas + 1} deltas):",
                                results)
    usage = ledger.usage("run-bench")
    print(f"metered: {usage.requests} of the {sent} requests through the gateway"
          f" ({usage.output_tokens} output tokens in the last)")
    print(f"goal (gateway >= {GOAL} of direct, median of rounds [lowest..highest]):")
    for title, paths in figures.items():
        gateway = paths["gateway"]
        if scenarios[title][0] == 0:
            # A one-delta answer has no throughput to speak of; its end waits, by design,
            # for the run's usage to be committed (the run's facts are read once its agent
            # stops).
            print(f"  {title}: first byte {_verdict(gateway['ttfb'])}, last byte"
                  f" {_spread(gateway['throughput'], '.2f')} (waits for the usage commit)")
            continue
        print(f"  {title}: first byte {_verdict(gateway['ttfb'])},"
              f" throughput {_verdict(gateway['throughput'])}")
    print("floor (what a relay that does nothing adds to the first byte, ms):")
    for title, paths in figures.items():
        print(f"  {title}: byte relay {_spread(paths['byte relay']['adds'], '+.2f')},"
              f" http relay {_spread(paths['http relay']['adds'], '+.2f')},"
              f" gateway {_spread(paths['gateway']['adds'], '+.2f')}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--fetches", type=int, default=20)
    parser.add_argument("--chunks", type=int, default=2000)
    parser.add_argument("--model-latency-ms", type=float, default=200)
    parser.add_argument("--latency-fetches", type=int, default=8)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.fetches, args.chunks, args.model_latency_ms,
                     args.latency_fetches))
