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
# Bytecode is kept (in __pycache__, which git ignores) even where PYTHONDONTWRITEBYTECODE
# is set: otherwise each hangar the suite starts as a process compiles hangar's modules
# again (a quarter of a second of CPU each), and on every run each worker rewrites every
# test module's asserts again (a worker's collection takes 6 s, not 3, from the second
# run on). hangar's modules are compiled ahead, so that a fresh checkout's first
# processes, starting at once, do not each compile them.
unset PYTHONDONTWRITEBYTECODE
.venv/bin/python -m compileall -q app handlers sandbox proxy fakehub >/dev/null
workers=(-n 4 --dist loadgroup)
for arg in "$@"; do
  case "$arg" in -n|-n*|--numprocesses*|no:xdist) workers=() ;; esac
done
# The slowest tests are named at the end: where the suite's time goes, run after run.
exec .venv/bin/python -m pytest "${workers[@]}" --durations=15 "$@"
