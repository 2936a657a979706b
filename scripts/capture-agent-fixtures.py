#!/usr/bin/env python3
"""Capture what the pinned Claude Code and Codex CLIs print, as test fixtures.

Runs each CLI (from tests/agents_cli, installed by scripts/setup.sh) against hangar's
scripted model server on loopback, through the harness's own command line, in a scratch
git checkout of the demo repository, and writes the combined output (stdout and stderr,
as the sandbox's agent log holds it) to tests/sandbox/fixtures/agents/<cli>-<case>.log:

  ok, ok-turn2   a turn that reads, edits, tests and commits; then a resumed follow-up
  rate-limit     the model answers 429 with retry-after
  refused-key    the model answers 401
  unreachable    nothing listens at the model's address
  resume-failed  a follow-up whose session store is gone
  subscription   a turn on a subscription whose 7-day window is at 91% (Claude Code runs
                 as a subscriber: its stream carries rate_limit_event)
  usage-limit    the subscription's 7-day window is used up: the model answers 429

Usage: scripts/capture-agent-fixtures.py [claude|codex ...]
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.demo import SAMPLE_REPO  # noqa: E402
from fakehub.model import Fault, ModelServer, ModelThread, fix_calc_script  # noqa: E402
from sandbox.harness import ClaudeHarness, CodexHarness, ModelRoute  # noqa: E402
from sandbox.provider import WORKSPACE  # noqa: E402

CLIS = ROOT / "tests" / "agents_cli" / "node_modules" / ".bin"
OUT = ROOT / "tests" / "sandbox" / "fixtures" / "agents"
KEY = "sk-scripted-key"
TIMEOUT_S = int(os.environ.get("CAPTURE_TIMEOUT_S", "120"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def checkout(scratch: Path) -> Path:
    repo = scratch / "workspace" / "repo"
    repo.mkdir(parents=True)
    for name, text in SAMPLE_REPO.items():
        (repo / name).write_text(text)
    git = ["git", "-c", "user.name=capture", "-c", "user.email=capture@hangar.invalid"]
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
    subprocess.run([*git, "add", "."], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "init"], cwd=repo, check=True)
    (scratch / "workspace" / "home").mkdir()
    (scratch / "workspace" / ".hangar").mkdir()
    return repo


def run_turn(harness, scratch: Path, route: ModelRoute, prompt: str, *, turn: int,
             session_id: str | None) -> str:
    """One turn as hangar starts it, with the sandbox's /workspace moved to scratch."""
    ws = str(scratch / "workspace")
    argv, env = harness.command(prompt, turn=turn, session_id=session_id, model=route)
    for path, data in harness.files(route).items():
        target = Path(path.replace(WORKSPACE, ws, 1))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    full_env = {"PATH": os.environ["PATH"], "HOME": f"{ws}/home", "LANG": "C.UTF-8",
                "GIT_AUTHOR_NAME": "agent", "GIT_AUTHOR_EMAIL": "agent@hangar.invalid",
                "GIT_COMMITTER_NAME": "agent", "GIT_COMMITTER_EMAIL": "agent@hangar.invalid",
                **{k: v.replace(WORKSPACE, ws) for k, v in env.items()}}
    argv = [a.replace(WORKSPACE, ws) for a in argv]
    with subprocess.Popen(argv, cwd=f"{ws}/repo", env=full_env, stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          start_new_session=True) as process:
        try:
            output, _ = process.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            # A CLI that never gives up is a finding too: keep what it printed.
            os.killpg(process.pid, signal.SIGKILL)  # the node wrapper and the CLI under it
            output, _ = process.communicate()
            print(f"  (stopped after {TIMEOUT_S}s)", file=sys.stderr)
    return output.decode("utf-8", "replace").replace(ws, WORKSPACE)


def session_of(harness, log: str) -> str | None:
    return harness.parse(log).session_id


def capture(name: str) -> dict[str, str]:
    program = str(CLIS / name)
    harness = ClaudeHarness(command=program) if name == "claude" else CodexHarness(
        command=program)
    logs: dict[str, str] = {}
    prompt = "hangar Request: fix the failing test"
    follow = "hangar Request for turn 2 (on the open PR): document add()"

    model = ModelServer(fix_calc_script(api_key=KEY))
    with ModelThread(model) as served:
        route = ModelRoute(served.url, KEY)
        with tempfile.TemporaryDirectory() as tmp:
            scratch = Path(tmp)
            checkout(scratch)
            logs["ok"] = run_turn(harness, scratch, route, prompt, turn=1, session_id=None)
            logs["ok-turn2"] = run_turn(harness, scratch, route, follow, turn=2,
                                        session_id=session_of(harness, logs["ok"]))
            shutil.rmtree(scratch / "workspace" / "home")
            (scratch / "workspace" / "home").mkdir()
            logs["resume-failed"] = run_turn(harness, scratch, route, follow, turn=2,
                                             session_id=session_of(harness, logs["ok"]))
        plan = ModelRoute(route.base_url, KEY, subscription=True)
        cases = {
            "rate-limit": (route, Fault(429, "This request would exceed your rate limit.",
                                        retry_after_s=1), None),
            "refused-key": (ModelRoute(route.base_url, "sk-wrong-key"), None, None),
            "unreachable": (ModelRoute(f"http://127.0.0.1:{free_port()}", KEY), None, None),
            "subscription": (plan, None, {"5h": 0.34, "7d": 0.91}),
            "usage-limit": (plan, Fault(429, "You have reached your usage limit.",
                                        retry_after_s=3600), {"5h": 0.34, "7d": 1.0}),
        }
        for case, (case_route, fault, subscription) in cases.items():
            model.script.fault = fault
            model.script.subscription = subscription
            with tempfile.TemporaryDirectory() as tmp:
                scratch = Path(tmp)
                checkout(scratch)
                logs[case] = run_turn(harness, scratch, case_route, prompt, turn=1, session_id=None)
    return logs


def scrub(text: str) -> str:
    """Ports and machine-specific paths out, so that fixtures do not churn."""
    text = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:8787", text)
    # Claude Code names its project directory after the scratch checkout's path.
    text = re.sub(r"-[\w-]*?-workspace-repo/", "-workspace-repo/", text)
    return text.replace(str(Path.home()), "/root")


def main(argv: list[str]) -> int:
    names = argv or ["claude", "codex"]
    OUT.mkdir(parents=True, exist_ok=True)
    for name in names:
        if not (CLIS / name).exists():
            print(f"{name}: not installed; run scripts/setup.sh", file=sys.stderr)
            return 1
        version = subprocess.run([str(CLIS / name), "--version"], capture_output=True,
                                 text=True, timeout=60).stdout.strip()
        for case, log in capture(name).items():
            (OUT / f"{name}-{case}.log").write_text(scrub(log))
            print(f"{name} {version}: {case}: {len(log.splitlines())} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
