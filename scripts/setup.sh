#!/usr/bin/env bash
# Set up everything hangar and its tests need on a fresh Debian machine (idempotent):
# system packages, a virtualenv with hangar installed, GitHub's reference packages for the
# contract tests, a running Docker engine and the sandbox base image.
# Usage: scripts/setup.sh [--no-docker]
set -euo pipefail
cd "$(dirname "$0")/.."
want_docker=1
[ "${1:-}" = "--no-docker" ] && want_docker=0

need=()
for pair in git:git bwrap:bubblewrap node:nodejs npm:npm; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || need+=("${pair#*:}")
done
if [ "$want_docker" = 1 ]; then
  command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
  command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
fi
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
if [ "${#need[@]}" -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=.venv/.hangar-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "setup: installing hangar into .venv"
  if ! .venv/bin/pip install -q -e '.[test]' >.venv/pip.log 2>&1; then
    tail -n 30 .venv/pip.log >&2
    exit 1
  fi
  touch "$stamp"
fi

ref=tests/reference
if [ ! -d "$ref/node_modules/@octokit/openapi" ] || [ "$ref/package.json" -nt "$ref/node_modules" ]; then
  echo "setup: installing GitHub's reference packages (pinned)"
  (cd "$ref" && npm install --no-audit --no-fund --loglevel=error >/dev/null)
  touch "$ref/node_modules"
fi

if [ "$want_docker" = 1 ]; then
  scripts/docker-engine.sh
  scripts/base-image.sh
fi
echo "setup: ready"
