#!/usr/bin/env bash
# The README's test command: set everything up, lint, then run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
.venv/bin/ruff check .
exec .venv/bin/python -m pytest "$@"
