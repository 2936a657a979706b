"""How a run ends, end to end: each way says its cause and the next step in the status
comment, and completes the `hangar / agent` check run that was in progress from the
agent's start. Through fakehub over real HTTP, real git and bubblewrap sandboxes.

(The model's failures, through the real CLIs and hangar's gateway, are in
test_real_agents.py; a deleted environment build in test_environment_builds.py.)
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from collections import Counter

import pytest

from tests.e2e.conftest import FIX_AGENT, own_sleep, pids_with, wait_until

pytestmark = pytest.mark.slow


def agent_check(world, sha: str) -> dict | None:
    return world.checks(sha).get("hangar / agent")


def main_sha(world) -> str:
    return world.hub.ref_sha(world.repo, "main")


def ended(world, issue: int, words: str) -> str:
    return wait_until(lambda: words in world.status(issue) and world.status(issue), 90,
                      f"the status comment to say {words!r}")


def test_a_crashing_agent_is_said_with_its_exit_code_and_its_last_lines(world):
    world.start_hangar("echo 'reading calc.py'\necho 'cannot parse the test' >&2\nexit 3\n")
    issue, _ = world.ask("/hangar fix the failing test")
    status = ended(world, issue, "the agent exited with code 3 before it finished")
    assert "**Now:** ❌ the agent exited with code 3 before it finished" in status
    assert "`/hangar retry` starts the turn again" in status
    assert "reading calc.py" in status and "cannot parse the test" in status  # last lines
    assert "rephrase" not in status and "made no commits" not in status
    check = wait_until(lambda: (c := agent_check(world, main_sha(world)))
                       and c["status"] == "completed" and c, 30, "the agent's check run")
    assert check["conclusion"] == "neutral"
    assert check["output"]["title"] == "The agent exited with code 3 before it finished"
    assert "cannot parse the test" in check["output"]["text"]
    assert world.hangar_prs() == []


def test_a_killed_agent_is_said_killed_by_its_signal(world):
    asleep = own_sleep(3023)
    world.start_hangar(f"echo started\nexec {asleep}\n")
    issue, _ = world.ask("/hangar fix the failing test")
    [pid] = wait_until(lambda: pids_with(asleep), 30, "the agent's process")
    # From its start the turn has its check run, in progress, on the commit it started from.
    check = wait_until(lambda: agent_check(world, main_sha(world)), 30, "the check run")
    assert check["status"] == "in_progress" and check["output"]["title"] == (
        "The agent is working")
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)  # not hangar's doing: the kernel's, an operator's
    status = ended(world, issue, "killed by signal 9 (SIGKILL); hangar did not stop it")
    assert "`/hangar retry` starts the turn again" in status and "rephrase" not in status
    check = wait_until(lambda: (c := agent_check(world, main_sha(world)))
                       and c["status"] == "completed" and c, 30, "the completed check run")
    assert check["conclusion"] == "neutral"
    assert check["output"]["title"].startswith("The agent's process was killed by signal 9")


def test_a_retry_after_a_crash_starts_the_turn_again(world):
    # The agent crashes until the repository's main branch says it may go on.
    world.start_hangar("git fetch -q origin main\n"
                       "git show origin/main:READY >/dev/null 2>&1 || { echo 'not yet'; "
                       "exit 4; }\n" + FIX_AGENT)
    issue, _ = world.ask("/hangar fix the failing test")
    ended(world, issue, "the agent exited with code 4")
    world.hub.push_files(world.repo, "main", {"READY": "yes\n"}, "Unblock the agent",
                         as_user="acme", bypass_rules=True)
    world.hub.comment(world.repo, issue, "/hangar retry", as_user=world.maintainer)
    pr = wait_until(lambda: world.verified(issue), 90, "the retried turn's PR")
    assert world.checks(pr["head"]["sha"])["hangar / verify"]["conclusion"] == "success"
    status = wait_until(lambda: "✅ done" in world.status(issue) and world.status(issue), 30,
                        "the final status")
    assert "Started again once: `/hangar retry` started the turn again" in status


def step_failures(log: str) -> Counter[str]:
    """How many times each kind of row's step failed, by hangar's log."""
    return Counter(re.findall(r'"msg": "(\w+) step failed"', log))


def test_a_full_disk_holds_steps_back_and_the_run_ends_once_there_is_room(world, tmp_path):
    """hangar's database on a small filesystem, filled when the agent ends: hangar's
    writes fail, its steps wait (two, four, eight seconds…) instead of spinning, and no
    task's exception goes unretrieved; once there is room the turn ends as it should.
    (The sandboxes stay on the ordinary disk: the agent's own writes are not the test.)"""
    import time

    data = tmp_path / "hangar"
    data.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(data)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small filesystem here: {mounted.stderr.strip()}")
    outside = tmp_path / "sandboxes"
    outside.mkdir()
    (data / "sandboxes").mkdir()
    subprocess.run(["mount", "--bind", str(outside), str(data / "sandboxes")], check=True)
    try:
        world.start_hangar(FIX_AGENT + "touch /workspace/.hangar/committed\n"
                           "while [ ! -f /workspace/.hangar/go ]; do sleep 0.2; done\n",
                           process=True)
        issue, _ = world.ask("/hangar fix the failing test")
        committed = wait_until(lambda: list(outside.glob("*/workspace/.hangar/committed")),
                               60, "the agent's commit")[0]
        filler = data / "filler"
        subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=1M", "count=64"],
                       capture_output=True)  # until the filesystem is full
        log = world.tmp / "hangar.log"
        before = step_failures(log.read_text())
        (committed.parent / "go").touch()  # the agent ends: hangar must write its rows now
        # Which steps fail depends on which writes still fit (SQLite reuses its WAL's
        # pages): the run's own may go through, and the job's, the review ask's… fail.
        wait_until(lambda: step_failures(log.read_text()) - before, 60,
                   "a step failing on the full disk")
        failing_since = step_failures(log.read_text())
        time.sleep(6)  # six seconds of a full disk: a held-back step tries two or three times
        tries = step_failures(log.read_text()) - failing_since
        assert all(n <= 4 for n in tries.values()), f"{tries} in six seconds: a step spins"
        filler.unlink()  # room again
        pr = wait_until(lambda: world.verified(issue), 120, "the PR once there is room")
        assert agent_check(world, pr["head"]["sha"])["conclusion"] == "success"
        status = wait_until(lambda: "✅ done" in world.status(issue) and world.status(issue),
                            60, "the final status")
        assert "passed" in status
        assert "Task exception was never retrieved" not in log.read_text()
    finally:
        world.hangar.stop()
        subprocess.run(["umount", "-l", str(data / "sandboxes")], capture_output=True)
        subprocess.run(["umount", "-l", str(data)], capture_output=True)


def test_a_backup_restored_with_running_jobs_starts_each_turn_again_once(world, tmp_path):
    """Three agents run; a backup of the database is restored into a fresh data directory
    and hangar serves from it. The sandboxes the rows name are not there: nothing of their
    work reached GitHub, so each turn starts again, once, in a new sandbox, and says so."""
    import sqlite3
    import sys

    from tests.e2e.conftest import ROOT, HangarProcess

    world.start_hangar("sleep 5\n" + FIX_AGENT, process=True, max_agents=3)
    issues = [world.ask("/hangar fix the failing test", title=f"bug {i}")[0] for i in range(3)]

    def running() -> int:
        with sqlite3.connect(world.settings.db_path) as conn:
            return conn.execute(
                "SELECT COUNT(*) FROM rows WHERE kind = 'run' AND json_extract(data, "
                "'$.state') = 'running' AND json_extract(data, '$.process_id') IS NOT NULL"
            ).fetchone()[0]

    wait_until(lambda: running() == 3, 90, "three agents running")
    backups = tmp_path / "backups"
    backups.mkdir()
    done = subprocess.run([sys.executable, "-m", "app.cli", "backup", str(backups)],
                          env=world.hangar.environment(), cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    world.hangar.stop()
    [copy] = backups.glob("hangar-*.db")
    fresh = tmp_path / "restored"
    fresh.mkdir()
    copy.replace(fresh / "hangar.db")
    world.settings = world.settings.model_copy(update={"data_dir": fresh})
    world.hangar = HangarProcess(world.settings, world.tmp / "hangar.log").start()
    world.running.append(world.hangar)

    # (More jobs at once meet fakehub's limit of 80 content-creating calls a minute, as
    # GitHub's own: hangar then waits a minute. The waits allow for one such pause.)
    # The three agents make one commit on one base, often in the same second: their PRs may
    # share a head, and each run's `hangar / verify` is on it. Each must pass.
    def verifications(issue: int) -> list[dict] | None:
        pr = world.pr_for(issue)
        runs = [] if pr is None else [
            c for c in world.hub.check_runs(world.repo, pr["head"]["sha"])
            if c["name"] == "hangar / verify"]
        return runs if runs and all(c["status"] == "completed" for c in runs) else None

    for issue in issues:
        runs = wait_until(lambda issue=issue: verifications(issue), 300, f"the PR for #{issue}")
        assert [c["conclusion"] for c in runs] == ["success"] * len(runs)
    assert len(world.hangar_prs()) == 3
    for issue in issues:
        status = wait_until(lambda issue=issue: "✅ done" in world.status(issue)
                            and world.status(issue), 180, f"the final status of #{issue}")
        assert ("Started again once: its sandbox was lost before its work reached GitHub, so "
                "hangar started the turn again in a new sandbox") in status
        assert "made no commits" not in status
