"""What a test run left running: its processes and its Docker sandboxes.

A process is this run's when its command line, working directory or environment names a
path under the run's temporary directory (each pytest-xdist worker has its own): a
bubblewrap sandbox binds its directory, `hangar serve` gets its data directory, fakehub
its repositories. A container is this run's when it mounts a path from there (a sandbox of
a test's hangar mounts the gate's socket), when a test's hangar made it (its instance
label is the one hangar derives from a data directory under the run's directory), or when
a test's own provider did (`instance_label()`).

    leaked = survivors(tmp_root)        # after a grace period: what did not end
    end(leaked)                         # kill and remove them, once reported
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

TEST_INSTANCE_PREFIX = f"test-{os.getpid()}-"


def instance_label() -> str:
    """The `hangar.instance` label for a test's own DockerProvider: this run's, findable."""
    return TEST_INSTANCE_PREFIX + secrets.token_hex(4)


def hangar_instance(data_dir: Path) -> str:
    """The instance label hangar gives the sandboxes of the hangar serving `data_dir`
    (as app.engine derives it; tests/test_leaks.py holds the two together)."""
    return hashlib.sha256(str(Path(data_dir).resolve()).encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Leak:
    kind: str  # "process" or "container"
    ident: str  # a pid, or a container id
    what: str  # its command line, or its name and image

    def __str__(self) -> str:
        return f"{self.kind} {self.ident}: {self.what[:300]}"


def processes(root: Path) -> list[Leak]:
    """Live processes (not zombies) that name `root` in their command line, working
    directory or environment; never this process."""
    inside = os.fsencode(Path(root).resolve())
    names = (inside + b"/", inside + b"\0")
    mine = _ancestors()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) in mine:
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
            if stat[stat.rfind(")") + 2:][:1] in ("Z", "X"):
                continue
            argv = Path(entry.path, "cmdline").read_bytes()
            cwd = os.fsencode(os.readlink(Path(entry.path, "cwd")))
            environ = Path(entry.path, "environ").read_bytes()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        texts = (cwd + b"\0", argv + b"\0", environ + b"\0")
        named = [t for t in texts for n in names if n in t]
        if named:
            command = argv.replace(b"\0", b" ").decode(errors="replace").strip()
            found.append(Leak("process", entry.name, f"{command} [{_test_dir(named[0], inside)}]"))
    return found


def _test_dir(text: bytes, inside: bytes) -> str:
    """The directory under root that text names: a test's own (`test_name0`) says whose."""
    after = text[text.index(inside) + len(inside):].lstrip(b"/")
    return after.split(b"/")[0].split(b"\0")[0].decode(errors="replace") or "."


def _ancestors() -> set[int]:
    """This process and those that started it (pytest's own command line may name root)."""
    found, pid = set(), os.getpid()
    while pid > 1 and pid not in found:
        found.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat[stat.rfind(")") + 2:].split()[1])
    return found


def _data_dirs(root: Path, depth: int = 4) -> list[Path]:
    """Directories under root that hold (or held) a hangar database."""
    found = []
    todo = [(Path(root), 0)]
    while todo:
        here, level = todo.pop()
        try:
            entries = list(os.scandir(here))
        except OSError:
            continue
        names = {e.name for e in entries}
        if "hangar.db" in names or "hangar.id" in names:
            found.append(here)
        if level < depth:
            todo += [(Path(e.path), level + 1) for e in entries
                     if e.is_dir(follow_symlinks=False) and e.name not in (".git", "sandboxes")]
    return found


def containers(root: Path) -> list[Leak]:
    """Containers with a hangar sandbox label that this run made (see the module's doc)."""
    try:
        listed = subprocess.run(
            ["docker", "ps", "-aq", "--no-trunc", "--filter", "label=hangar.sandbox"],
            capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return []  # no Docker here: nothing of it can be left
    ids = listed.stdout.split()
    if listed.returncode != 0 or not ids:
        return []
    inspected = subprocess.run(["docker", "inspect", *ids], capture_output=True, text=True,
                               timeout=60)
    if inspected.returncode != 0 and not inspected.stdout.strip():
        return []  # removed between the two calls
    inside = str(Path(root).resolve()) + "/"
    instances = {hangar_instance(d) for d in _data_dirs(root)}
    found = []
    for container in json.loads(inspected.stdout or "[]"):
        labels = container.get("Config", {}).get("Labels") or {}
        instance = labels.get("hangar.instance", "")
        mounts = [m.get("Source", "") + "/" for m in container.get("Mounts", [])]
        if (instance in instances or instance.startswith(TEST_INSTANCE_PREFIX)
                or any(m.startswith(inside) for m in mounts)):
            name = container.get("Name", "").lstrip("/")
            found.append(Leak("container", container["Id"][:12],
                              f"{name} ({container.get('Config', {}).get('Image')}, "
                              f"{container.get('State', {}).get('Status')})"))
    return found


def survivors(root: Path, grace_s: float = 10) -> list[Leak]:
    """What of this run still runs after `grace_s` (a SIGKILL is not instant, and a
    container is removed in the background)."""
    deadline = time.monotonic() + grace_s
    while True:
        found = processes(root)
        if not found or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    while True:
        left = containers(root)
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    return found + left


def end(leaks: list[Leak]) -> None:
    """Kill the processes and remove the containers, so one leak does not outlive the run."""
    for leak in leaks:
        if leak.kind == "process":
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(leak.ident), signal.SIGKILL)
        else:
            subprocess.run(["docker", "rm", "-fv", leak.ident], capture_output=True, timeout=60)
