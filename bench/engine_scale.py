"""The engine as history grows: one event's latency with 10, 1,000 and 10,000 past jobs.

For each history size, hangar (in this process, against a fresh fakehub over loopback)
starts on a store that already holds that many finished jobs, each with a finished run
that opened a PR; rounds alternate between the sizes. Then, one at a time, a maintainer
comments `/hangar status` on a new issue; the time measured runs from the comment to its
step done (the intent recorded as done: the webhook was stored and dispatched, the
engine looked for the job behind the thread, and hangar replied on GitHub). Prints p50
and p99 per size, of the whole latency and of hangar's own part of it (bench/timesplit.py:
the rest is the write spacing GitHub asks for and GitHub answering), and the ratio of the
10,000-job figures to the 10-job ones (goal: at most 1.5, for hangar's own part).

    .venv/bin/python bench/engine_scale.py [--events 10] [--rounds 3] [--sizes 10,1000,10000]
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.models import Intent, Job, JobState, Run, RunStage, RunState, Thread
from app.service import ServiceThread
from app.settings import Settings
from app.store import Store
from bench.timesplit import TimeSplit, line, summarize
from fakehub.testing import running_fakehub
from tests.e2e.conftest import REPO_FILES, free_port

REPO = "acme/widgets"


def seed(store: Store, jobs: int, installation_id: int) -> None:
    """`jobs` finished jobs, each with one finished run and its PR, as a busy repo has."""
    for n in range(jobs):
        job = Job(thread=Thread(repo=REPO, number=100_000 + n, installation_id=installation_id),
                  requested_by="mona", prompt=f"fix bug {n}", title=f"bug {n}",
                  body="add() subtracts " * 20, clone_url="", base_branch="main",
                  state=JobState.DONE, status_comments={100_000 + n: 10_000_000 + n})
        store.put("job", job.id, job, active=False)
        run = Run(job_id=job.id, branch=f"hangar/{100_000 + n}-{secrets.token_hex(2)}",
                  base_branch="main", base_sha=secrets.token_hex(20),
                  head_sha=secrets.token_hex(20), pr_number=200_000 + n,
                  state=RunState.EXITED, stage=RunStage.DONE, outcome="pr", exit_code=0,
                  agent={"summary": "Fixed add() to add. " * 10, "turns": 3})
        store.put("run", run.id, run, active=False)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def world(hub) -> tuple[object, int]:
    """The App, installed on acme/widgets, where mona may write."""
    app = hub.create_app(name="hangar")
    hub.create_user("acme")
    hub.create_user("mona")
    hub.create_repo("acme", "widgets", dict(REPO_FILES))
    hub.grant(REPO, "mona", "write")
    return app, hub.install(app.id, "acme", [REPO])


def one_round(tmp: Path, data: Path, events: int, split: TimeSplit) -> list[dict[str, float]]:
    """A fresh fakehub and a hangar on `data`; for each of `events` comments, where its
    latency went (split's parts; "total" is the latency)."""
    envs = tmp / "envs"
    envs.mkdir(exist_ok=True)
    (envs / "default.yaml").write_text(
        "name: default\nprovider: local\nharness: script\nagent_script: 'true'\n")
    latencies = []
    with tempfile.TemporaryDirectory(dir=tmp) as hub_dir, running_fakehub(Path(hub_dir)) as hub:
        app, _ = world(hub)
        port = free_port()
        hub.set_webhook_url(app.id, f"http://127.0.0.1:{port}/webhook")
        settings = Settings(app_id=app.id, private_key_file=app.private_key_path,
                            webhook_secret=app.webhook_secret, data_dir=data,
                            github_url=hub.api_url, port=port, envs_dir=envs,
                            log_level="WARNING")
        store = Store(data / "hangar.db")
        with ServiceThread(settings):
            for n in range(events + 2):
                issue = hub.create_issue(REPO, f"question {n}", "", as_user="mona")
                begun = time.monotonic()
                comment = hub.comment(REPO, issue, "/hangar status", as_user="mona")
                intent_id = f"comment-{comment}-0"
                while True:
                    intent = store.get("intent", intent_id, Intent)
                    if intent is not None and intent.state == "done":
                        break
                    if time.monotonic() - begun > 300:
                        raise SystemExit(f"no answer to {intent_id} in 300 s")
                    time.sleep(0.002)
                if n >= 2:  # the first two warm the caches (token, permission)
                    latencies.append(split.parts(begun, time.monotonic()))
        store.close()
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=10, help="per size and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", default="10,1000,10000")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    splits: dict[int, list[dict[str, float]]] = {size: [] for size in sizes}
    split = TimeSplit.install()  # before hangar starts
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for size in sizes:
            store = Store(tmp / f"hangar-{size}" / "hangar.db")
            started = time.perf_counter()
            seed(store, size, installation_id=1)
            store.close()
            print(f"seeded {size} past jobs in {time.perf_counter() - started:.1f} s", flush=True)
        # Rounds alternate between the sizes, so that a noisy machine hurts all alike.
        for _ in range(args.rounds):
            for size in sizes:
                splits[size] += one_round(tmp, tmp / f"hangar-{size}", args.events, split)
    # The whole latency, and hangar's own part of it: the write spacing GitHub asks for
    # (a second before the reply) would hide any engine cost under it.
    figures: dict[str, dict[int, tuple[float, float]]] = {"total": {}, "hangar": {}}
    for size in sizes:
        for part, figure in figures.items():
            values = [s[part] for s in splits[size]]
            figure[size] = (statistics.median(values), percentile(values, 0.99))
        total, own = figures["total"][size], figures["hangar"][size]
        print(f"{size:6d} past jobs: comment → step done p50 {total[0] * 1000:7.1f} ms"
              f"  p99 {total[1] * 1000:7.1f} ms; hangar's own p50 {own[0] * 1000:6.1f} ms"
              f"  p99 {own[1] * 1000:6.1f} ms  ({len(splits[size])} events)")
        print(f"{'':6s}   where it went (median of each part): "
              f"{line(summarize(splits[size]))}")
    small, large = min(sizes), max(sizes)
    if small != large:
        for part, what in (("total", "the whole latency"), ("hangar", "hangar's own part")):
            p50 = figures[part][large][0] / figures[part][small][0]
            p99 = figures[part][large][1] / figures[part][small][1]
            print(f"ratio {large} vs {small} past jobs, {what}: p50 {p50:.2f}x  p99 {p99:.2f}x "
                  "(goal <= 1.5x)")

if __name__ == "__main__":
    main()
