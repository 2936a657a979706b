"""Every figure of the speed table in one run, each beside its goal.

Runs the benches one after another, each in its own process with the arguments below
(smaller than their defaults, so the whole table takes minutes), keeps what each prints
under its name, then prints the table: for each figure the line its bench printed, and
the goal. A bench that fails or prints no such line shows that instead of a figure.

    .venv/bin/python bench/all.py [--only intake,loop,...] [--quick]

Each bench measures its own baseline in the same run (the bare endpoint, the host, the
direct push, the smallest history), so each figure is a ratio that holds on a noisy
machine; the load average is printed with the table: say it with the figures.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Figure:
    name: str
    pattern: str  # the line of the bench's output that holds the figure
    goal: str


@dataclass(frozen=True)
class Bench:
    key: str
    args: list[str]
    quick: list[str]
    figures: list[Figure]


BENCHES = [
    Bench("intake", ["webhook_intake.py", "--deliveries", "3000", "--rounds", "5"],
          ["webhook_intake.py", "--deliveries", "1000", "--rounds", "3"], [
        Figure("webhook intake vs a bare verifying endpoint", r"^ratio hangar/bare throughput:",
               ">= 0.7x, p99 < 25 ms at 200/s"),
        Figure("  without the durable write", r"^ratio without the durable write",
               "(for reading)"),
        Figure("  CPU per delivery", r"^ratio bare/hangar CPU per delivery", "(for reading)"),
    ]),
    Bench("loop", ["loop.py", "--jobs", "5"], ["loop.py", "--jobs", "2"], [
        Figure("comment -> PR", r"^comment → pr", "floor + GitHub's waits + <= 1 s"),
        Figure("comment -> verified", r"^comment → verified", "floor + GitHub's waits + <= 1 s"),
        Figure("  where the time to verified goes", r"^  to verified", "(for reading)"),
        Figure("  hangar's own part to verified", r"^hangar's own part to verified", "<= 1 s"),
    ]),
    Bench("scale", ["engine_scale.py", "--events", "10", "--rounds", "2", "--sizes", "10,10000"],
          ["engine_scale.py", "--events", "5", "--rounds", "1", "--sizes", "10,10000"], [
        Figure("one /hangar status event, 10 vs 10,000 past jobs",
               r"^ratio \d+ vs \d+ past jobs, the whole", "(for reading: mostly spacing)"),
        Figure("  hangar's own part of it", r"^ratio \d+ vs \d+ past jobs, hangar's own",
               "<= 1.5x"),
    ]),
    Bench("sandbox", ["sandbox_start.py", "--rounds", "20"],
          ["sandbox_start.py", "--rounds", "5"], [
        Figure("sandbox create -> exec -> destroy, local", r"^local\s+\d", "<= 3x the host"),
        Figure("  local behind the relay", r"^local \+ relay\s+\d", "<= 3x the host"),
        Figure("sandbox create -> exec -> destroy, docker", r"^docker\s+\d", "<= 400 ms"),
    ]),
    Bench("proxy", ["proxy_push.py", "--size-mb", "100", "--runs", "5"],
          ["proxy_push.py", "--size-mb", "30", "--runs", "5"], [
        Figure("push through the proxy vs direct", r"^ratio ", ">= 0.9x median of 5"),
    ]),
    Bench("redact", ["log_line.py"], ["log_line.py", "--lines", "5000", "--rounds", "3"], [
        Figure("a log line vs one with no masking", r"^ratio hangar/plain log line",
               "(for reading)"),
        Figure("  a 5 KB comment's text masked", r"^a 5 KB comment", "(for reading)"),
    ]),
    Bench("budget", ["api_budget.py"], ["api_budget.py", "--window", "10"], [
        Figure("GitHub calls for one job", r"^1\. one job", "<= 25"),
        Figure("  per idle PR an hour", r"^2\. one idle PR", "<= 2"),
    ]),
]


def run(bench: Bench, quick: bool) -> tuple[str, float]:
    argv = [sys.executable, str(ROOT / "bench" / (bench.quick if quick else bench.args)[0]),
            *(bench.quick if quick else bench.args)[1:]]
    began = time.monotonic()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    output = done.stdout + (f"\n(exit {done.returncode})\n{done.stderr[-2000:]}"
                            if done.returncode else "")
    return output, time.monotonic() - began


def found(output: str, figure: Figure) -> str:
    for line in output.splitlines():
        if re.search(figure.pattern, line):
            return " ".join(line.split())
    return "not printed (see the bench's output above)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated: "
                        + ",".join(b.key for b in BENCHES))
    parser.add_argument("--quick", action="store_true", help="fewer rounds, for a look")
    args = parser.parse_args()
    chosen = [b for b in BENCHES if not args.only or b.key in args.only.split(",")]
    outputs = {}
    for bench in chosen:
        print(f"== {bench.key}: {' '.join(bench.quick if args.quick else bench.args)}",
              flush=True)
        output, took = run(bench, args.quick)
        outputs[bench.key] = output
        print(output.rstrip() + f"\n({took:.0f} s)\n", flush=True)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"== the table ({os.cpu_count()} cores; load average {load} at its end)")
    for bench in chosen:
        for figure in bench.figures:
            print(f"{figure.name}\n    now:  {found(outputs[bench.key], figure)}\n"
                  f"    goal: {figure.goal}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
