"""A running agent's progress, end to end: the `hangar / agent` check run and the status
comment show its latest steps while it works, read from its output at most once an
interval; the check run keeps them when the turn ends; `hangar / verify` says how long
each of its steps took; `hangar env build-repo --wait` prints install's output as it
comes. Through fakehub over real HTTP,
real git and a bubblewrap sandbox; the agent waits for the test's word, never a clock."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import urllib.request

import pytest

from app.models import Job
from app.web.keys import STORE
from tests.e2e.conftest import ROOT, VERIFY, wait_until

pytestmark = pytest.mark.slow

INTERVAL_S = 4
TOKEN = "progress-token-0123456789"
# Fixes add() in steps, waits for the test's word (a file in its workspace), then prints a
# burst of steps quicker than the interval, with the times it began and ended.
STEPPING_AGENT = """\
echo "reading calc.py"
sed -i 's/return a - b/return a + b/' calc.py
echo "edited calc.py"
n=0
until [ -e /workspace/.hangar/go ]; do n=$((n+1)); [ $n -lt 3000 ] || exit 7; sleep 0.2; done
echo "burst from $(date +%s.%N)"
for i in $(seq 1 20); do echo "step $i"; sleep 0.3; done
echo "burst to $(date +%s.%N)"
git commit -qam "Fix add()"
echo "committed"
"""


def agent_check(world) -> dict | None:
    return world.checks(world.hub.ref_sha(world.repo, "main")).get("hangar / agent")


def job_page(world, issue: int) -> str:
    """hangar's page of the issue's job, as an operator's token reads it."""
    job = next(j for j in world.hangar.app[STORE].all("job", Job) if j.thread.number == issue)
    request = urllib.request.Request(f"{world.hangar.url}/jobs/{job.id}",
                                     headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return answer.read().decode()


def test_the_agents_latest_steps_show_while_it_works_and_stay_when_it_ends(world):
    world.api_token = TOKEN
    world.start_hangar(STEPPING_AGENT, settings={"status_edit_interval_seconds": INTERVAL_S},
                       verify=f"sleep 1 && {VERIFY}")
    issue, _ = world.ask("/hangar fix the failing test")
    working = wait_until(lambda: (c := agent_check(world)) and "edited calc.py" in (
        c["output"].get("text") or "") and c, 60, "the agent's steps in its check run")
    assert working["status"] == "in_progress"
    assert working["output"]["title"] == "The agent is working"
    summary, text = working["output"]["summary"], working["output"]["text"]
    assert "- turn 1, working since" in summary and "calc.py" not in summary  # facts only
    assert "<summary>The agent's latest steps (unverified)</summary>" in text
    assert "printed reading calc.py\nprinted edited calc.py\n" in text
    status = wait_until(lambda: "printed edited calc.py" in world.status(issue)
                        and world.status(issue), 60, "the steps in the status comment")
    assert "**Now:** 🛠️ the agent is working in a sandbox" in status
    assert "The agent's latest steps (unverified)" in status
    page = job_page(world, issue)
    assert "The agent&#x27;s latest steps (unverified" in page  # escaped as HTML
    assert "printed edited calc.py" in page

    # The agent prints twenty steps quicker than the interval: the check run is edited
    # about once an interval, not once a step.
    [log] = wait_until(lambda: list((world.tmp / "hangar").glob(
        "**/workspace/.hangar/agent.log")), 30, "the agent's log")
    check_id = working["id"]
    world.hub.reset_api_calls()
    (log.parent / "go").touch()
    done = wait_until(lambda: (c := agent_check(world)) and c["status"] == "completed" and c,
                      90, "the agent's check run completed")
    edits = [call for call in world.hub.api_calls(world.app.id)
             if call[:2] == ("PATCH", f"/repos/{world.repo}/check-runs/{check_id}")]
    steps, tail = done["output"]["text"], done["output"]["text"]
    assert "<summary>The agent's latest steps (unverified)</summary>" in steps
    assert "printed step 20\nprinted burst to" in steps and "printed committed" in steps
    assert "printed committed" in job_page(world, issue)
    # The burst's times, from the agent's last lines of output (the text shows them too).
    began = float(tail.split("burst from ")[1].split()[0])
    ended = float(tail.split("burst to ")[1].split()[0])
    # One edit an interval while it worked (and one on either side), and the completion.
    assert 2 <= len(edits) <= (ended - began) / INTERVAL_S + 3, (edits, ended - began)

    # Verification says each step it took and how long it took, as facts.
    pr = wait_until(lambda: world.verified(issue), 120, "the verified PR")
    verify = world.checks(pr["head"]["sha"])["hangar / verify"]
    assert verify["conclusion"] == "success"
    steps = verify["output"]["summary"].split("**Steps, in order:**\n")[1].splitlines()
    assert [line.rpartition(": ")[0] for line in steps] == [
        "- clean sandbox started, head checked out", f"- `sleep 1 && {VERIFY}` (attempt 1)"
    ], steps
    seconds = [float(line.rpartition(": ")[2].removesuffix("s")) for line in steps]
    assert seconds[0] > 0 and seconds[1] >= 1.0  # the command sleeps a second
    assert sum(seconds) <= float(verify["output"]["summary"].split("- duration: ")[1]
                                 .split("s")[0]) + 0.2


# Prints a line, waits for the test's word (a file beside its log), prints another.
STEPPING_INSTALL = """\
echo "fetching widgets-dep"
n=0
until [ -e /workspace/.hangar/go ]; do n=$((n+1)); [ $n -lt 3000 ] || exit 7; sleep 0.2; done
echo "widgets-dep installed"
"""


def test_build_repo_wait_prints_install_output_as_it_comes(world):
    world.api_token = TOKEN
    world.start_hangar(env={"install": STEPPING_INSTALL})
    env = {**os.environ, "HANGAR_API_URL": world.hangar.url, "HANGAR_API_TOKEN": TOKEN,
           "PYTHONPATH": str(ROOT)}
    asked = subprocess.Popen([sys.executable, "-m", "app.cli", "env", "build-repo", world.repo,
                              "--wait", "--timeout", "300"], env=env, cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    printed: list[str] = []
    reader = threading.Thread(target=lambda: printed.extend(iter(asked.stdout.readline, "")),
                              daemon=True)
    reader.start()
    try:
        # The first line shows while install still waits: it came as it was written.
        wait_until(lambda: "fetching widgets-dep\n" in printed, 60, "install's first line")
        [log] = list((world.tmp / "hangar").glob("**/workspace/.hangar/install.log"))
        assert "widgets-dep installed\n" not in printed
        (log.parent / "go").touch()
        assert asked.wait(timeout=180) == 0, asked.stderr.read()
    finally:
        if asked.poll() is None:
            asked.kill()
    reader.join(timeout=30)
    assert printed[0].endswith("queued\n")
    assert printed[1:3] == ["fetching widgets-dep\n", "widgets-dep installed\n"], printed
    assert "succeeded" in printed[-1] and len(printed) == 4  # each line once
