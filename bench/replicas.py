"""Replicas on PostgreSQL, beside one process on SQLite.

Prints three figures, each on PostgreSQL and, beside it, on SQLite:

1. Webhook intake: deliveries per second at full speed (64 in flight) into one `hangar
   serve` on SQLite, one on PostgreSQL, and two on one PostgreSQL (the load spread over
   both, as a load balancer would); the ratio of two replicas to one.
2. Failover: a row whose step runs on one replica; that replica is killed with kill -9;
   the time until another replica steps the row (goal: within the lease plus 2 s). On
   SQLite, with its one process, the same kill followed at once by a restart.
3. One event's latency (`/hangar status` on a new issue, comment to step done, through
   fakehub) with 10 and 10,000 past jobs (goal: the 10,000 within 1.5x the 10).

A PostgreSQL of its own is started (as the tests do, tests/postgres.py), unless
HANGAR_DATABASE_URL names a server where its user may create databases.

    .venv/bin/python bench/replicas.py [--deliveries 3000] [--rounds 3] [--events 10]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GIVEN_URL = os.environ.get("HANGAR_DATABASE_URL")  # read before tests.postgres takes it
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

LEASE_S = 3.0

# A replica for the failover figure: an engine with one kind of row, whose step notes who
# took it and then runs long; killed with kill -9 by the bench.
WORKER = """
import asyncio, sys, time
from pydantic import BaseModel
from app.engine import Engine, RowKind
from app.metrics import Metrics
from app.settings import Settings
from app.store import Store

name, target, data, lease = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])

class Row(BaseModel):
    id: str

async def step(engine, row_id):
    engine.store.note(row_id, f"{name} {time.time()}")
    await asyncio.sleep(3600)

async def main():
    shared = target.startswith("postgresql://")
    settings = Settings(data_dir=data, replica_id=name, lease_seconds=lease,
                        database_url=target if shared else None)
    store = Store(target, owner=name if shared else "hangar")
    engine = Engine(settings=settings, store=store, auth=None, metrics=Metrics(), tokens=None)
    engine.register(RowKind("row", "row", Row, step, next_at=lambda row: 0.0))
    engine.start()
    print("ready", flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


def start_worker(name: str, target: str, data: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", WORKER, name, str(target), str(data),
                             str(LEASE_S)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def wait_for_note(store, row_id: str, who: str, timeout: float = 120) -> float:
    """When `who` noted it took the row (its own clock, this machine's)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for _, what in store.notes(row_id):
            name, _, at = what.partition(" ")
            if name == who:
                return float(at)
        time.sleep(0.01)
    raise SystemExit(f"{who} never stepped {row_id}")


def failover(target: str | Path, tmp: Path, rounds: int) -> list[float]:
    """Seconds from kill -9 of the replica stepping a row to another stepping it."""
    from pydantic import BaseModel

    from app.store import Store

    class Row(BaseModel):
        id: str

    shared = str(target).startswith("postgresql://")
    store = Store(target)
    taken = []
    for n in range(rounds):
        row_id = f"row-{n}"
        first = start_worker("a", target, tmp / f"a-{n}")
        others = [start_worker("b", target, tmp / f"b-{n}")] if shared else []
        try:
            store.put("row", row_id, Row(id=row_id), active=True)
            wait_for_note(store, row_id, "a")
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
            killed = time.time()
            if not shared:  # one process: its restart is the failover
                others = [start_worker("a2", target, tmp / f"a-{n}")]
            taken.append(wait_for_note(store, row_id, "b" if shared else "a2") - killed)
            store.put("row", row_id, Row(id=row_id), active=False)
        finally:
            for proc in [first, *others]:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
    store.close()
    return taken


def start_serve(tmp: Path, name: str, database: str | None, hub, app) -> tuple[
        subprocess.Popen, int]:
    """`hangar serve` for a fakehub App (serve asks GitHub for its App before it listens;
    the deliveries sent are no commands, so it asks GitHub nothing more)."""
    from webhook_intake import SECRET, free_port, wait_port

    port = free_port()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("HANGAR_")},
           "HANGAR_APP_ID": str(app.id), "HANGAR_PRIVATE_KEY_FILE": str(app.private_key_path),
           "HANGAR_WEBHOOK_SECRET": SECRET, "HANGAR_DATA_DIR": str(tmp / name),
           "HANGAR_GITHUB_URL": hub.api_url, "HANGAR_PORT": str(port),
           "HANGAR_LOG_LEVEL": "WARNING", "HANGAR_REPLICA_ID": name}
    if database:
        env["HANGAR_DATABASE_URL"] = database
    tmp.mkdir(parents=True, exist_ok=True)
    log = tmp / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve"], cwd=ROOT, env=env,
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_port(port, proc)
    except SystemExit:
        print(log.read_text(errors="replace")[-3000:], file=sys.stderr)
        raise
    return proc, port


async def spread(urls: list[str], body: bytes, count: int, in_flight: int = 64) -> float:
    """Deliveries per second, `in_flight` outstanding, spread over the urls in turn."""
    import aiohttp
    from webhook_intake import headers

    queue = list(range(count))
    async with aiohttp.ClientSession() as session:

        async def worker(n: int) -> None:
            while queue:
                queue.pop()
                url = urls[n % len(urls)]
                async with session.post(url, data=body, headers=headers(body)) as answer:
                    assert answer.status in (200, 202), answer.status
                    await answer.read()

        started = time.perf_counter()
        await asyncio.gather(*(worker(n) for n in range(in_flight)))
        return count / (time.perf_counter() - started)


def intake(tmp: Path, new_database, deliveries: int, rounds: int) -> dict[str, list[float]]:
    from webhook_intake import payload

    from fakehub.testing import running_fakehub

    body = payload("issue_comment")
    results: dict[str, list[float]] = {"sqlite": [], "postgresql 1": [], "postgresql 2": []}
    with running_fakehub(tmp / "intake-hub") as hub:
        app = hub.create_app(name="hangar")
        for n in range(rounds):  # rounds alternate between the three setups
            for setup in results:
                database = None if setup == "sqlite" else new_database()
                count = 2 if setup.endswith("2") else 1
                place = tmp / f"intake-{n}-{setup[:2]}{setup[-1]}"
                servers = [start_serve(place, f"r{i}", database, hub, app)
                           for i in range(count)]
                try:
                    urls = [f"http://127.0.0.1:{port}/webhook" for _, port in servers]
                    asyncio.run(spread(urls, body, 200))  # warm up
                    results[setup].append(asyncio.run(spread(urls, body, deliveries)))
                finally:
                    for proc, _ in servers:
                        proc.terminate()
                        proc.wait(30)
    return results


def event_latency(tmp: Path, target: str | Path, size: int, events: int) -> list[float]:
    """One event's latency, as bench/engine_scale.py measures it, on this database."""
    from engine_scale import REPO, world

    from app.models import Intent
    from app.service import ServiceThread
    from app.settings import Settings
    from app.store import Store
    from fakehub.testing import running_fakehub
    from tests.e2e.conftest import free_port

    envs = tmp / "envs"
    envs.mkdir(parents=True, exist_ok=True)
    (envs / "default.yaml").write_text(
        "name: default\nprovider: local\nharness: script\nagent_script: 'true'\n")
    shared = str(target).startswith("postgresql://")
    # On SQLite hangar's database is its data directory's hangar.db: the seeded file's.
    data = tmp / f"data-{size}-pg" if shared else Path(target).parent
    latencies = []
    with tempfile.TemporaryDirectory(dir=tmp) as hub_dir, running_fakehub(Path(hub_dir)) as hub:
        app, _ = world(hub)
        port = free_port()
        hub.set_webhook_url(app.id, f"http://127.0.0.1:{port}/webhook")
        settings = Settings(app_id=app.id, private_key_file=app.private_key_path,
                            webhook_secret=app.webhook_secret, data_dir=data,
                            github_url=hub.api_url, port=port, envs_dir=envs,
                            log_level="WARNING", database_url=str(target) if shared else None)
        store = Store(target)
        with ServiceThread(settings):
            for n in range(events + 2):
                issue = hub.create_issue(REPO, f"question {n}", "", as_user="mona")
                begun = time.perf_counter()
                comment = hub.comment(REPO, issue, "/hangar status", as_user="mona")
                intent_id = f"comment-{comment}-0"
                while True:
                    intent = store.get("intent", intent_id, Intent)
                    if intent is not None and intent.state == "done":
                        break
                    if time.perf_counter() - begun > 300:
                        raise SystemExit(f"no answer to {intent_id} in 300 s")
                    time.sleep(0.002)
                if n >= 2:  # the first two warm the caches (token, permission)
                    latencies.append(time.perf_counter() - begun)
        store.close()
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--deliveries", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--events", type=int, default=10)
    parser.add_argument("--sizes", default="10,10000")
    parser.add_argument("--only", default="intake,failover,latency")
    args = parser.parse_args()
    only = set(args.only.split(","))
    from engine_scale import seed

    from app.store import Store
    from tests.postgres import PostgresServer

    server = PostgresServer(GIVEN_URL).start()
    try:
        with tempfile.TemporaryDirectory() as tmp_name:
            tmp = Path(tmp_name)
            if "intake" in only:
                results = intake(tmp, server.new_database, args.deliveries, args.rounds)
                for setup, figures in results.items():
                    print(f"intake, {setup:13s}: {statistics.median(figures):7.0f} deliveries/s"
                          f" (rounds: {' '.join(f'{f:.0f}' for f in figures)})", flush=True)
                ratios = [two / one for two, one in zip(results["postgresql 2"],
                                                        results["postgresql 1"], strict=True)]
                beside = (statistics.median(results["postgresql 1"])
                          / statistics.median(results["sqlite"]))
                print(f"intake ratio, two replicas / one on PostgreSQL: median "
                      f"{statistics.median(ratios):.2f} (rounds: "
                      f"{' '.join(f'{r:.2f}' for r in ratios)}); one on PostgreSQL / SQLite: "
                      f"{beside:.2f}", flush=True)
            if "failover" in only:
                pg = failover(server.new_database(), tmp / "fo-pg", args.rounds)
                lite = failover(tmp / "fo-sqlite" / "hangar.db", tmp / "fo-sqlite", args.rounds)
                print(f"failover, PostgreSQL (kill -9, another replica steps the row): "
                      f"median {statistics.median(pg):.2f} s, max {max(pg):.2f} s "
                      f"(lease {LEASE_S:g} s; goal <= {LEASE_S + 2:g} s)", flush=True)
                print(f"failover, SQLite (kill -9, the one process restarted at once): "
                      f"median {statistics.median(lite):.2f} s, max {max(lite):.2f} s",
                      flush=True)
            if "latency" in only:
                sizes = [int(s) for s in args.sizes.split(",")]
                latencies: dict[tuple[str, int], list[float]] = {}
                targets = {}
                for size in sizes:
                    targets[("postgresql", size)] = server.new_database()
                    targets[("sqlite", size)] = tmp / f"lat-{size}" / "hangar.db"
                    for backend in ("postgresql", "sqlite"):
                        store = Store(targets[(backend, size)])
                        seed(store, size, installation_id=1)
                        store.close()
                for _ in range(args.rounds):
                    for key, target in targets.items():
                        latencies.setdefault(key, []).extend(
                            event_latency(tmp / f"run-{key[0]}-{key[1]}", target, size=key[1],
                                          events=args.events))
                for backend in ("sqlite", "postgresql"):
                    for size in sizes:
                        values = latencies[(backend, size)]
                        print(f"event latency, {backend:10s} {size:6d} past jobs: p50 "
                              f"{statistics.median(values) * 1000:7.1f} ms "
                              f"({len(values)} events)", flush=True)
                    small, large = min(sizes), max(sizes)
                    ratio = (statistics.median(latencies[(backend, large)])
                             / statistics.median(latencies[(backend, small)]))
                    print(f"event latency ratio, {backend}, {large} vs {small} past jobs: "
                          f"{ratio:.2f}x (goal <= 1.5x)", flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
