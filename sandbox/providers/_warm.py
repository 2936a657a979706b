"""Local sandboxes' bubblewraps started before their command is known.

A cold command pays for bubblewrap's namespaces and mounts (~6 ms here) and, behind the
relay, for the relay's Python start (~13 ms) before the command itself starts. A warm
provider starts that part ahead: once a command of a sandbox has ended, the bubblewrap for
its next command; and one spare sandbox of each network kind, its first command's
bubblewrap started, for the next `create`.

A started bubblewrap is exactly what a cold start would run (the same argv: namespaces,
mounts, `--die-with-parent`; behind the relay, the relay already listening), except that
its command is a shell that reads one line from a pipe only hangar holds and `eval`s it.
The line makes stdin /dev/null, changes to the working directory (or exits 127), exports
the command's environment and `exec`s the command. One bubblewrap serves one command, as a
cold start does: nothing one command leaves running, or writes to /tmp, reaches the next.

A command starts cold when its bubblewrap's argv, environment or mounted directories
differ from what the started one has (that one is ended), when its line could not be one
line a shell reads, or when it runs offline.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shlex
import signal
import subprocess
import threading
from pathlib import Path

# The line a started bubblewrap's shell evaluates: short enough to read at once.
MAX_LINE = 16 * 1024
WAITING_COMMAND = ["/bin/sh", "-c", 'read -r line && eval "$line"', "hangar-run"]
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def command_line(cwd: str, env: dict[str, str], started_env: dict[str, str],
                 argv: list[str]) -> bytes | None:
    """The line that runs argv in cwd with env, in a shell started with started_env; None
    when no such line exists (a name a shell cannot set, a newline, too long)."""
    words = [cwd, *argv, *env.values()]
    if any("\n" in w or "\0" in w for w in words) or not all(map(_NAME.fullmatch, env)):
        return None
    if any(name not in env for name in started_env):
        return None
    exports = [f"{name}={shlex.quote(value)}" for name, value in env.items()
               if started_env.get(name) != value]
    line = "exec </dev/null; cd " + shlex.quote(cwd) + " || exit 127; "
    if exports:
        line += "export " + " ".join(exports) + "; "
    line += "exec " + " ".join(map(shlex.quote, argv)) + "\n"
    encoded = line.encode()
    return encoded if len(encoded) <= MAX_LINE else None


def sources(paths: list[Path]) -> tuple[tuple[int, int] | None, ...]:
    """What each mounted directory is: a directory replaced since is another one."""
    found: list[tuple[int, int] | None] = []
    for path in paths:
        try:
            st = os.stat(path)
            found.append((st.st_dev, st.st_ino))
        except OSError:
            found.append(None)
    return tuple(found)


class Waiting:
    """One bubblewrap started ahead, waiting for its line."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str,
                 mounted: tuple[tuple[int, int] | None, ...]):
        self.argv = argv
        self.env = env
        self.mounted = mounted
        # From the loop's thread: --die-with-parent ties bubblewrap to the thread that
        # started it, and the loop's thread lives as long as hangar serves.
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            env=env, cwd=cwd, start_new_session=True)

    def fits(self, argv: list[str], env: dict[str, str],
             mounted: tuple[tuple[int, int] | None, ...]) -> bool:
        return (self.proc.poll() is None and argv == self.argv and env == self.env
                and mounted == self.mounted)

    def end(self) -> None:
        """Kill it and everything in it; reaped on a thread."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        threading.Thread(target=self.proc.wait, name="hangar-warm-reap", daemon=True).start()


class Started:
    """A waiting bubblewrap given its line: read and waited for on the running loop, with
    what `run` uses of an asyncio subprocess (pid, stdout, wait, returncode)."""

    def __init__(self, waiting: Waiting):
        self._proc = waiting.proc
        self.pid = waiting.proc.pid
        self.stdout = asyncio.StreamReader()
        self._exited: asyncio.Future[int] | None = None

    async def begin(self, line: bytes) -> None:
        """Hand it its line; OSError (nothing written) when it cannot be watched."""
        loop = asyncio.get_running_loop()
        assert self._proc.stdout is not None and self._proc.stdin is not None
        pidfd = os.pidfd_open(self.pid)
        try:
            await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(self.stdout), self._proc.stdout)
        except BaseException:
            os.close(pidfd)
            raise
        self._exited = loop.create_future()

        def exited() -> None:
            loop.remove_reader(pidfd)
            os.close(pidfd)
            assert self._exited is not None
            if not self._exited.done():
                self._exited.set_result(self._proc.wait())

        loop.add_reader(pidfd, exited)
        try:
            # A line shorter than the pipe holds: written at once, never blocking the loop.
            os.write(self._proc.stdin.fileno(), line)
        except OSError:
            pass  # it died meanwhile: its exit says so
        finally:
            self._proc.stdin.close()

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode

    async def wait(self) -> int:
        assert self._exited is not None
        return await asyncio.shield(self._exited)
