"""`hangar demo` as a person runs it: a subprocess, its JSON summary on the last line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.test_autofix import CI_TEST

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

# The first turn makes the visible test pass but breaks negatives, which only CI tests;
# the first auto-fix turn (HANGAR_TURN=2) fixes it.
AGENT = """\
set -e
if [ "$HANGAR_TURN" = 1 ]; then
  printf 'def add(a, b):\\n    return abs(a) + abs(b)\\n' > calc.py
  git commit -qam "Make add() add"
else
  printf 'def add(a, b):\\n    return a + b\\n' > calc.py
  git commit -qam "Fix add() for negative numbers"
fi
echo "turn $HANGAR_TURN done"
"""


def demo(*args: str, cwd: Path) -> dict:
    proc = subprocess.run([sys.executable, "-m", "app.cli", "demo", "--json", "--timeout",
                           "150", "--data-dir", str(cwd / "demo"), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # The terminal shows the timeline; hangar's and its libraries' routine lines stay out.
    assert "delivery stored" not in proc.stderr and "session manager" not in proc.stderr, \
        proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_demo_lands_the_fix(tmp_path):
    result = demo(cwd=tmp_path)
    assert result["landed"] is True and result["merge_sha"]
    assert result["verify"] == "passed"
    assert result["autofix_turns"] == 0
    assert result["gate_warnings"] == 0  # the demo's ruleset is one hangar's doctor finds whole
    whats = [entry["what"] for entry in result["timeline"]]
    assert any("opened PR" in w for w in whats) and any("landed PR" in w for w in whats)


def test_demo_with_ci_fixes_the_first_attempt_before_landing(tmp_path):
    from app.demo import SAMPLE_REPO

    repo = tmp_path / "repo"
    repo.mkdir()
    for name, text in {**SAMPLE_REPO, "ci_test.py": CI_TEST}.items():
        (repo / name).write_text(text)
    script = tmp_path / "agent.sh"
    script.write_text(AGENT)
    result = demo("--repo", str(repo), "--agent-script", str(script),
                  "--ci", "python3 -m unittest -q test_calc ci_test", cwd=tmp_path)
    assert result["landed"] is True
    assert result["autofix_turns"] == 1
    assert result["verify"] == "passed"
    whats = [entry["what"] for entry in result["timeline"]]
    started = [w for w in whats if w.startswith("hangar started auto-fix turn")]
    assert started == ["hangar started auto-fix turn 1 of 2: ci / test failed"]
    # the approval came after the fix and after hangar verified the fixed head
    head = result["head_sha"][:7]
    approved = next(i for i, w in enumerate(whats) if "approved" in w)
    assert whats[approved].endswith(f"at {head}")
    assert whats.index(started[0]) < approved
    assert whats.index(f"hangar / verify: success on {head}") < approved


@pytest.mark.parametrize("cli", ["claude", "codex"])
def test_demo_with_a_real_cli_lands_the_fix_without_a_key(tmp_path, cli):
    from sandbox.envimage import AGENT_CLIS_DIR

    if not (AGENT_CLIS_DIR / cli).exists():
        pytest.skip(f"the pinned {cli} CLI is not installed (scripts/setup.sh)")
    result = demo("--agent", cli, cwd=tmp_path)
    assert result["agent"] == cli
    assert result["landed"] is True and result["verify"] == "passed"
    # The scripted model answers only hangar's key: the CLI got there through the gateway.
    assert result["model_requests"] >= 3


def test_demo_says_how_to_install_a_missing_cli(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "app.cli", "demo", "--agent", "claude",
                           "--data-dir", str(tmp_path / "demo")], cwd=ROOT,
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "HANGAR_AGENT_CLIS_DIR": str(tmp_path / "none")})
    assert proc.returncode != 0
    assert "the pinned claude CLI is not installed" in proc.stderr
    assert "scripts/setup.sh --agents" in proc.stderr


CRASHING = """\
echo "turn $HANGAR_TURN: looking at the failing test"
echo "something broke" >&2
exit 3
"""


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_demo_with_a_crashing_script_says_the_exit_code_and_the_ending(tmp_path, as_json):
    script = tmp_path / "agent.sh"
    script.write_text(CRASHING)
    proc = subprocess.run([sys.executable, "-m", "app.cli", "demo", "--timeout", "150",
                           "--data-dir", str(tmp_path / "demo"), "--agent-script", str(script),
                           *(["--json"] if as_json else [])],
                          cwd=ROOT, capture_output=True, text=True, timeout=200)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    if as_json:
        result = json.loads(last)
        assert result["ending"] == "agent_failed" and result["pr"] is None
        assert "exited with code 3" in result["said"]
    else:
        assert last == ("hangar demo: FAILED — the agent exited with code 3 before it "
                        "finished (agent_failed)")
        assert "PR #None" not in proc.stdout
