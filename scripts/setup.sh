#!/usr/bin/env bash
# Set up everything hangar and its tests need on a fresh Debian machine (idempotent):
# system packages, a virtualenv with hangar installed, GitHub's reference packages for the
# contract tests, the pinned agent CLIs (Claude Code, Codex) for the agent tests, a running
# Docker engine and the sandbox base image.
# Usage: scripts/setup.sh [--no-docker]
set -euo pipefail
cd "$(dirname "$0")/.."
want_docker=1
[ "${1:-}" = "--no-docker" ] && want_docker=0

need=()
# chromium and its driver: the browser tests of the setup flow and the fleet page.
for pair in git:git bwrap:bubblewrap node:nodejs npm:npm chromium:chromium \
    chromedriver:chromium-driver; do
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
# A real OCI registry on loopback for the kubernetes build push tests; they skip without it.
if ! command -v docker-registry >/dev/null 2>&1; then
  echo "setup: installing docker-registry"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -qq docker-registry; } >/dev/null 2>&1 \
    || echo "setup: docker-registry could not be installed; the registry tests will skip" >&2
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

clis=tests/agents_cli
if [ ! -d "$clis/node_modules/@openai/codex" ] || [ "$clis/package.json" -nt "$clis/node_modules" ]; then
  echo "setup: installing the agent CLIs the tests run (pinned)"
  (cd "$clis" && npm install --no-audit --no-fund --loglevel=error >/dev/null)
  touch "$clis/node_modules"
fi
# Sandboxes see the host's /usr read-only and nothing of this checkout: the native
# binaries go where a sandbox can run them (hard links where the filesystem allows).
agent_bin=/usr/local/lib/hangar-agent-clis
mkdir -p "$agent_bin"
codex_bin=$(ls -d "$clis"/node_modules/@openai/codex-linux-*/vendor/*/bin 2>/dev/null | head -n1)
for pair in claude:"$clis/node_modules/@anthropic-ai/claude-code/bin/claude.exe" \
            codex:"$codex_bin/codex" codex-code-mode-host:"$codex_bin/codex-code-mode-host"; do
  name=${pair%%:*} src=${pair#*:}
  if [ -f "$src" ] && ! [ "$src" -ef "$agent_bin/$name" ]; then
    ln -f "$src" "$agent_bin/$name" 2>/dev/null || cp -f "$src" "$agent_bin/$name"
  fi
done

if [ "$want_docker" = 1 ]; then
  scripts/docker-engine.sh
  scripts/base-image.sh
fi
echo "setup: ready"
