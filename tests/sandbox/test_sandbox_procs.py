"""Host process facts the local provider relies on: a zombie is gone, a reused pid is
someone else."""

from __future__ import annotations

import subprocess
import time

from sandbox.providers import _procs


def test_zombie_counts_as_gone_and_start_time_names_the_process():
    sleeper = subprocess.Popen(["sleep", "30"])
    zombie = subprocess.Popen(["true"])
    try:
        started = _procs.start_time(sleeper.pid)
        assert _procs.is_alive(sleeper.pid, started)
        assert not _procs.is_alive(sleeper.pid, started + 1)  # same pid, other process
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # not reaped: it stays a zombie
            with open(f"/proc/{zombie.pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
            time.sleep(0.01)
        assert not _procs.is_alive(zombie.pid)
        assert _procs.descendants(sleeper.pid) == []
    finally:
        sleeper.kill()
        sleeper.wait()
        zombie.wait()
    assert not _procs.is_alive(sleeper.pid, started)
