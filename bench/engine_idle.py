"""The engine at rest: what 1,000 waiting rows cost while nothing happens.

An engine with the real row kinds (app/wiring.py; no chores, no start-up work, no
GitHub) holds N active rows that all wait: intents deferred for an hour, runs between
looks at their agents, jobs with a folded status edit, land requests and auto-fix rows
waiting for their slow poll. After its first look it is left alone for --seconds; the
figures are the process's CPU time (time.process_time), the steps it ran and the times
it looked over its rows, with N rows and, as the baseline measured in the same run, with
none. It also times one look over the N rows, to say what a loop that looked every
second, as the engine once did, would spend on them in the same period.

    .venv/bin/python bench/engine_idle.py [--rows 1000] [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.autofix import AutofixRow, autofix_row_id
from app.engine import Engine
from app.landing import LandRequest, land_id
from app.metrics import Metrics
from app.models import Intent, Job, Run, RunState, Thread
from app.settings import Settings
from app.store import Store
from app.wiring import register_concerns

REPO = "acme/widgets"


def seed(engine: Engine, rows: int) -> None:
    """`rows` active rows, a fifth of each kind, none due within the hour."""
    later = time.time() + 3600
    for n in range(rows // 5):
        thread = Thread(repo=REPO, number=1000 + n, installation_id=1)
        job = engine.save_job(Job(thread=thread, requested_by="mona", prompt=f"fix bug {n}",
                                  title=f"bug {n}", body="add() subtracts " * 20,
                                  clone_url="", base_branch="main", status_due_at=later))
        engine.save_run(Run(job_id=job.id, branch=f"hangar/{1000 + n}", base_branch="main",
                            state=RunState.RUNNING, pr_number=5000 + n, retry_at=later))
        engine.save_intent(Intent(id=f"comment-{n}-0", thread=thread, comment_id=n,
                                  author="mona", command="run", args={"prompt": "again"},
                                  waiting=True, retry_at=later))
        engine.store.put("land", land_id(REPO, 5000 + n), LandRequest(
            id=land_id(REPO, 5000 + n), job_id=job.id, repo=REPO, installation_id=1,
            pr_number=5000 + n, base="main", branch=f"hangar/{1000 + n}",
            requested_by="mona", due_at=later), active=True)
        engine.store.put("autofix", autofix_row_id(REPO, 5000 + n), AutofixRow(
            id=autofix_row_id(REPO, 5000 + n), job_id=job.id, repo=REPO,
            pr_number=5000 + n, due_at=later), active=True)


def steps(engine: Engine) -> int:
    return int(sum(engine.metrics.engine_steps._values.values()))


async def idle(tmp: Path, rows: int, seconds: float) -> dict[str, float]:
    settings = Settings(data_dir=tmp / f"data-{rows}", log_level="WARNING")
    settings.data_dir.mkdir(parents=True)
    engine = Engine(settings=settings, store=Store(settings.db_path), auth=None,
                    metrics=Metrics(), tokens=None)
    register_concerns(engine)
    engine.chores.clear()  # the rebuild and catching up on webhooks ask GitHub
    engine._at_start.clear()  # reaping sandboxes, builds at start
    engine.rebuilding = False
    seed(engine, rows)
    engine.start()
    await asyncio.sleep(1.0)  # the first look
    steps_before, looks_before = steps(engine), engine.metrics.engine_looks.value()
    cpu = time.process_time()
    await asyncio.sleep(seconds)
    cpu = time.process_time() - cpu
    figures = {"cpu_s": cpu, "steps": steps(engine) - steps_before,
               "looks": engine.metrics.engine_looks.value() - looks_before}
    await engine.stop()
    engine._loop_task.cancel()
    # One look over the rows, timed by itself: what a loop on a 1 s timer paid each second.
    began = time.process_time()
    for _ in range(5):
        engine._schedule_due()
    figures["look_s"] = (time.process_time() - began) / 5
    engine.store.close()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        base = asyncio.run(idle(tmp, 0, args.seconds))
        busy = asyncio.run(idle(tmp, args.rows, args.seconds))
    for rows, f in ((0, base), (args.rows, busy)):
        print(f"{rows:5d} waiting rows, {args.seconds:g} s idle: CPU {f['cpu_s'] * 1000:7.1f} ms"
              f"  steps {f['steps']:.0f}  looks {f['looks']:.0f}"
              f"  (one look over the rows: {f['look_s'] * 1000:.2f} ms)")
    ratio = busy["cpu_s"] / base["cpu_s"] if base["cpu_s"] else float("inf")
    print(f"CPU with {args.rows} rows vs none: {ratio:.2f}x")
    ticking = busy["look_s"] * args.seconds
    print(f"a loop looking every second would have spent {ticking * 1000:.1f} ms on the "
          f"{args.rows} rows in {args.seconds:g} s: {ticking / max(busy['cpu_s'], 1e-6):.0f}x "
          "what this engine spent")


if __name__ == "__main__":
    main()
