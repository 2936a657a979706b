"""Host process facts read from /proc: liveness (zombies count as dead) and process trees."""

from __future__ import annotations

import os
import signal
from pathlib import Path


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # "pid (comm) state ppid ..." and comm may hold spaces or parentheses.
    return raw[raw.rfind(")") + 2 :].split()


def start_time(pid: int) -> int | None:
    """Start time in clock ticks since boot: with the pid, a name no other process can reuse."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


def is_alive(pid: int, started: int | None = None) -> bool:
    fields = _stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X", "x"):
        return False
    return started is None or int(fields[19]) == started


def children_map() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields:
            tree.setdefault(int(fields[1]), []).append(int(entry.name))
    return tree


def descendants(pid: int) -> list[int]:
    """All processes below pid, parents before children."""
    tree = children_map()
    out: list[int] = []
    todo = list(tree.get(pid, []))
    while todo:
        child = todo.pop(0)
        out.append(child)
        todo.extend(tree.get(child, []))
    return out


def signal_pids(pids: list[int], sig: int = signal.SIGKILL) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def holding(directory: Path) -> list[int]:
    """Processes whose command line names a path inside `directory`, or whose working
    directory is inside it: a sandbox's processes, found without any record of them."""
    inside = os.fsencode(directory) + b"/"
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = Path(entry.path, "cmdline").read_bytes().split(b"\0")
            cwd = os.fsencode(os.readlink(Path(entry.path, "cwd"))) + b"/"
        except OSError:
            continue
        if cwd.startswith(inside) or any(arg.startswith(inside) for arg in argv):
            found.append(int(entry.name))
    return found


def bwrap_workspaces() -> list[tuple[int, Path]]:
    """(pid, host directory bound at /workspace) of every bubblewrap process: a local
    sandbox's, found by its command line (its init keeps bwrap's)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            argv = Path(entry.path, "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not argv or os.path.basename(argv[0]) != b"bwrap":
            continue
        for i in range(len(argv) - 2):
            if argv[i] == b"--bind" and argv[i + 2] == b"/workspace":
                found.append((int(entry.name), Path(os.fsdecode(argv[i + 1]))))
                break
    return found
