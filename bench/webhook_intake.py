"""Webhook intake: hangar's POST /webhook against a bare endpoint that only checks the
signature, both in their own processes, driven from this one over loopback.

Prints deliveries per second at full speed (64 in flight) and p50/p99 acknowledgement
latency at a fixed 200 deliveries/s, for both, and hangar's ratio to the bare endpoint.
A third row, "no write", is hangar with its durable write taken out (the store's group
commit answers at once): what hangar's own work costs beside the
write to SQLite that must come before the 2xx.
Each round runs every server in turn, first and last in turn, so that a noisy machine
hurts all alike; the ratio is taken within each round and reported as the median over
rounds with its spread. On Linux it also prints each server's CPU time
per delivery at full speed (all its threads): on a machine other work shares, that
moves much less than throughput does.

    .venv/bin/python bench/webhook_intake.py [--deliveries 3000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import hashlib
import hmac
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fakehub.testing import running_fakehub
from fakehub.webhooks import delivery_guid

ROOT = Path(__file__).resolve().parents[1]
SECRET = "bench-secret"
EXAMPLES = ROOT / "tests/reference/node_modules/@octokit/webhooks-examples/api.github.com"

BARE_SERVER = """
import hmac, hashlib, sys
from aiohttp import web
secret = sys.argv[2].encode()
async def hook(request):
    body = await request.read()
    sig = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(sig, request.headers.get("X-Hub-Signature-256", "")):
        return web.json_response({"ok": False}, status=401)
    return web.json_response({"ok": True}, status=202)
app = web.Application(client_max_size=26 * 2**20)
app.router.add_post("/webhook", hook)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""


def ended_with_bench() -> None:
    """In a server's child: SIGTERM when the bench ends, however it ends (killed by a
    timeout, say), so no server is left serving."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def payload(event: str = "issue_comment") -> bytes:
    """GitHub's own example payload for the event (a comment that is no command)."""
    index = json.loads((EXAMPLES / "index.json").read_text())
    for entry in index:
        if entry["name"] == event:
            example = dict(entry["examples"][0])
            if "comment" in example:
                example["comment"] = {**example["comment"], "body": "Looks good to me."}
            return json.dumps(example).encode()
    raise SystemExit(f"the {event} example is missing; run scripts/setup.sh")


def wait_port(port: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise SystemExit("server did not start")


# `hangar serve` with the store's group commit answering at once: every delivery new.
WITHOUT_WRITE = """
import sys
from app import cli, store
store.Store.write_deliveries = lambda self, items, outcomes: [True] * len(items)
sys.exit(cli.main(["serve"]))
"""


def start_hangar(tmp: Path, hub, *, write: bool = True) -> tuple[subprocess.Popen, int]:
    """`hangar serve` for a fakehub App: serve asks GitHub for its App before it listens
    (the deliveries sent here are no commands, so hangar asks GitHub nothing more)."""
    tmp.mkdir(parents=True, exist_ok=True)
    app = hub.create_app(name=f"hangar-{tmp.name}")
    port = free_port()
    env = {
        **os.environ,
        "HANGAR_APP_ID": str(app.id),
        "HANGAR_PRIVATE_KEY_FILE": str(app.private_key_path),
        "HANGAR_WEBHOOK_SECRET": SECRET,
        "HANGAR_DATA_DIR": str(tmp / "data"),
        "HANGAR_GITHUB_URL": hub.api_url,
        "HANGAR_PORT": str(port),
        # As the bare endpoint, no line a delivery: at its default (INFO) hangar also
        # writes "delivery stored", which bench/log_line.py measures on its own.
        "HANGAR_LOG_LEVEL": "WARNING",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve"] if write
        else [sys.executable, "-c", WITHOUT_WRITE],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=ended_with_bench,
    )
    wait_port(port, proc)
    return proc, port


def start_bare() -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", BARE_SERVER, str(port), SECRET],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=ended_with_bench,
    )
    wait_port(port, proc)
    return proc, port


EVENT = ["issue_comment"]
# GitHub's delivery ids are time-based (fakehub.webhooks.delivery_guid); --random-ids sends
# random ones (version 4), which a store keyed by id writes all over its index.
GUIDS = [delivery_guid]


def headers(body: bytes) -> dict[str, str]:
    return {
        "X-GitHub-Event": EVENT[0],
        "X-GitHub-Delivery": GUIDS[0](),
        "X-Hub-Signature-256": "sha256="
        + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest(),
        "Content-Type": "application/json",
    }


async def full_speed(url: str, body: bytes, count: int, in_flight: int = 64) -> float:
    """Deliveries per second with `in_flight` requests outstanding."""
    queue = list(range(count))
    async with aiohttp.ClientSession() as session:

        async def worker() -> None:
            while queue:
                queue.pop()
                async with session.post(url, data=body, headers=headers(body)) as r:
                    assert r.status in (200, 202), r.status
                    await r.read()

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(in_flight)))
        return count / (time.perf_counter() - started)


async def fixed_rate(url: str, body: bytes, rate: float, seconds: float) -> list[float]:
    """Acknowledgement latencies (s) at a steady `rate` deliveries per second."""
    latencies: list[float] = []
    async with aiohttp.ClientSession() as session:

        async def one() -> None:
            started = time.perf_counter()
            async with session.post(url, data=body, headers=headers(body)) as r:
                await r.read()
                assert r.status in (200, 202), r.status
            latencies.append(time.perf_counter() - started)

        tasks = []
        start = time.perf_counter()
        for i in range(int(rate * seconds)):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one()))
        await asyncio.gather(*tasks)
    return latencies


def cpu_seconds(pid: int) -> float | None:
    """CPU time (user + system, all threads) a process has used, where /proc tells."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load_average() -> str:
    """The machine's 1-minute load average: on a shared machine, what the figures mean."""
    return f"{os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else "unknown"


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--deliveries", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rate", type=float, default=200)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--event", default="issue_comment",
                        help="whose example payload to send (e.g. ping, a small one)")
    parser.add_argument("--random-ids", action="store_true",
                        help="random delivery ids (uuid4) instead of time-based ones, as "
                             "GitHub's are")
    args = parser.parse_args()
    EVENT[0] = args.event
    if args.random_ids:
        GUIDS[0] = lambda: str(uuid.uuid4())
    body = payload(args.event)
    results: dict[str, dict[str, list[float]]] = {
        name: {"throughput": [], "latency": [], "cpu": []}
        for name in ("hangar", "no write", "bare")
    }
    load_before = load_average()
    with tempfile.TemporaryDirectory() as tmp, running_fakehub(Path(tmp) / "hub") as hub:
        servers = {"hangar": start_hangar(Path(tmp) / "hangar", hub),
                   "no write": start_hangar(Path(tmp) / "nowrite", hub, write=False),
                   "bare": start_bare()}
        try:
            urls = {name: f"http://127.0.0.1:{port}/webhook"
                    for name, (_, port) in servers.items()}
            for name in urls:  # warm up all
                asyncio.run(full_speed(urls[name], body, 200))
            pids = {name: proc.pid for name, (proc, _) in servers.items()}
            for n in range(args.rounds):
                # Each its turn, first and last in turn: a noisy minute hurts all alike.
                for name, url in (urls.items() if n % 2 == 0 else reversed(urls.items())):
                    before = cpu_seconds(pids[name])
                    results[name]["throughput"].append(
                        asyncio.run(full_speed(url, body, args.deliveries))
                    )
                    after = cpu_seconds(pids[name])
                    if before is not None and after is not None:
                        results[name]["cpu"].append((after - before) / args.deliveries)
                    results[name]["latency"] += asyncio.run(
                        fixed_rate(url, body, args.rate, args.seconds)
                    )
        finally:
            for proc, _ in servers.values():
                proc.terminate()
    print(f"payload: {args.event}, {len(body)} bytes; "
          f"{'random' if args.random_ids else 'time-based'} delivery ids; "
          f"{args.rounds} rounds, alternating; "
          f"load average {load_before} before, {load_average()} after")
    for name, r in results.items():
        tput = statistics.median(r["throughput"])
        p50, p99 = pct(r["latency"], 50) * 1000, pct(r["latency"], 99) * 1000
        cpu = f";  {statistics.median(r['cpu']) * 1e6:4.0f} us CPU each" if r["cpu"] else ""
        print(f"{name:8s} {tput:8.0f} deliveries/s at full speed;  at {args.rate:g}/s: "
              f"p50 {p50:6.2f} ms  p99 {p99:6.2f} ms{cpu}")
    ratios = [h / b for h, b in zip(results["hangar"]["throughput"],
                                    results["bare"]["throughput"], strict=True)]
    ratio = statistics.median(ratios)
    unwritten = statistics.median(
        h / b for h, b in zip(results["no write"]["throughput"],
                              results["bare"]["throughput"], strict=True))
    p99 = pct(results["hangar"]["latency"], 99) * 1000
    print("ratio hangar/bare throughput by round: " + " ".join(f"{r:.2f}" for r in ratios))
    print(
        f"ratio hangar/bare throughput: median {ratio:.2f}, spread {min(ratios):.2f}-"
        f"{max(ratios):.2f} (target >= 0.70); "
        f"hangar p99 at {args.rate:g}/s: {p99:.1f} ms (target < 25 ms)"
    )
    print(f"ratio without the durable write / bare throughput: median {unwritten:.2f} (what "
          "hangar's own work leaves; the rest is the write to SQLite before the 2xx)")
    if results["hangar"]["cpu"] and results["bare"]["cpu"]:
        cpu_ratio = statistics.median(results["bare"]["cpu"]) / statistics.median(
            results["hangar"]["cpu"])
        print(f"ratio bare/hangar CPU per delivery: {cpu_ratio:.2f} (the throughput ratio "
              "a server that is CPU-bound on its own core would reach)")


if __name__ == "__main__":
    main()
