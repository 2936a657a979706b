#!/usr/bin/env bash
# Set up hangar on a fresh Debian machine (idempotent); each step says what it does.
#
#   scripts/setup.sh              what `hangar demo` needs: git, bubblewrap, a virtualenv
#                                 with hangar, a Docker engine and the sandbox base image
#   scripts/setup.sh --no-docker  the same without Docker (the demo runs on bubblewrap)
#   scripts/setup.sh --agents     also the pinned Claude Code and Codex CLIs, for
#                                 `hangar demo --agent claude|codex`
#   scripts/setup.sh --tests      everything the tests need besides: the above, the agent
#                                 CLIs, Chromium and its driver, GitHub's reference packages,
#                                 a local OCI registry (the test command runs this)
set -euo pipefail
cd "$(dirname "$0")/.."
want_docker=1 want_agents=0 want_tests=0
for arg in "$@"; do
  case "$arg" in
    --no-docker) want_docker=0 ;;
    --agents) want_agents=1 ;;
    --tests) want_tests=1 want_agents=1 ;;
    *) echo "setup: unknown option $arg (see the top of scripts/setup.sh)" >&2; exit 2 ;;
  esac
done
say() { echo "setup: $*"; }

need=()
for pair in git:git bwrap:bubblewrap; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || need+=("${pair#*:}")
done
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
if [ "$want_agents" = 1 ]; then
  for pair in node:nodejs npm:npm; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || need+=("${pair#*:}")
  done
fi
if [ "$want_tests" = 1 ]; then
  # chromium and its driver: the browser tests of the setup flow and hangar's pages.
  for pair in chromium:chromium chromedriver:chromium-driver; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || need+=("${pair#*:}")
  done
fi
if [ "$want_docker" = 1 ]; then
  command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
  command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
fi
if [ "$want_tests" = 1 ]; then
  # PostgreSQL's server: the tests start a cluster of their own for the store on
  # PostgreSQL (tests/postgres.py), unless HANGAR_DATABASE_URL names a server.
  compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || need+=(postgresql)
fi
if [ "${#need[@]}" -gt 0 ]; then
  say "installing Debian packages: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
else
  say "Debian packages: all present"
fi
# A real OCI registry on loopback for the kubernetes build push tests; they skip without it.
if [ "$want_tests" = 1 ] && ! command -v docker-registry >/dev/null 2>&1; then
  say "installing docker-registry (for the build push tests)"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -qq docker-registry; } >/dev/null 2>&1 \
    || echo "setup: docker-registry could not be installed; the registry tests will skip" >&2
fi

if [ ! -x .venv/bin/python ]; then
  say "making the virtualenv .venv"
  python3 -m venv .venv
fi
# The demo needs hangar; the tests need its test extra as well (one stamp per set).
extra=""; stamp=.venv/.hangar-installed
[ "$want_tests" = 1 ] && { extra="[test]"; stamp=.venv/.hangar-installed-test; }
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  say "installing hangar${extra:+ and its test packages} into .venv (pip, a minute or two)"
  if ! .venv/bin/pip install -q -e ".$extra" >.venv/pip.log 2>&1; then
    tail -n 30 .venv/pip.log >&2
    exit 1
  fi
  touch "$stamp"
else
  say "hangar${extra:+ and its test packages}: installed in .venv"
fi

if [ "$want_tests" = 1 ]; then
  ref=tests/reference
  if [ ! -d "$ref/node_modules/@octokit/openapi" ] || [ "$ref/package.json" -nt "$ref/node_modules" ]; then
    say "installing GitHub's reference packages (pinned, npm)"
    (cd "$ref" && npm install --no-audit --no-fund --loglevel=error >/dev/null)
    touch "$ref/node_modules"
  fi
fi

if [ "$want_agents" = 1 ]; then
  clis=tests/agents_cli
  if [ ! -d "$clis/node_modules/@openai/codex" ] || [ "$clis/package.json" -nt "$clis/node_modules" ]; then
    say "installing the pinned Claude Code and Codex CLIs (npm)"
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
fi

if [ "$want_docker" = 1 ]; then
  say "starting the Docker engine if it is not running"
  scripts/docker-engine.sh
  say "the sandbox base image hangar-base:1 (built from Debian packages when missing)"
  scripts/base-image.sh
fi
say "ready"
