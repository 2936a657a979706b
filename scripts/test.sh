#!/usr/bin/env bash
# The README's test command: set everything up, lint, then run the whole suite.
# The suite mostly waits (on sandboxes, GitHub's stand-in, timers), so it runs on four
# pytest-xdist workers unless the arguments choose (-n N, or -p no:xdist for one process):
# on two cores, four took 6 min 10 s where three took 7 min 18 s.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --tests
.venv/bin/ruff check .
.venv/bin/python scripts/typecheck.py  # mypy, held to scripts/mypy-baseline.txt
# hangar's own modules compiled ahead: the suite starts hangar in a process of its own
# many times, and where PYTHONDONTWRITEBYTECODE is set each start would compile them all
# again (a quarter of a second of CPU each time). Only what changed is compiled.
.venv/bin/python -m compileall -q app handlers sandbox proxy fakehub >/dev/null
workers=(-n 4 --dist loadgroup)
for arg in "$@"; do
  case "$arg" in -n|-n*|--numprocesses*|no:xdist) workers=() ;; esac
done
# The slowest tests are named at the end: where the suite's time goes, run after run.
exec .venv/bin/python -m pytest "${workers[@]}" --durations=15 "$@"
