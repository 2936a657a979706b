"""The sandbox provider interface and the records it hands to the engine.

A provider turns an environment spec into an isolated place to run an agent: it runs
commands to completion, starts the agent detached so it outlives hangar, observes it by
id after a restart, copies files in and out, and throws the place away. Records are
pydantic models so the engine can store them and act on them after a restart.
"""

from __future__ import annotations

import abc
import builtins
import os
import secrets
import time
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, Field

from sandbox.envspec import EnvSpec

WORKSPACE = "/workspace"
REPO_DIR = "/workspace/repo"
HOME_DIR = "/workspace/home"
HANGAR_DIR = "/workspace/.hangar"
DEFAULT_LOG_PATH = "/workspace/.hangar/agent.log"
OUTPUT_TAIL_BYTES = 1024 * 1024
# The only environment a sandboxed process gets besides what the caller passes.
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SANDBOX_LABEL = "hangar.sandbox"
# An environment build's image (docker): named hangar-build:<build id>, labelled with it.
BUILD_IMAGE_REPO = "hangar-build"
BUILD_LABEL = "hangar.build"
# A dropped build's image that a sandbox still used: hangar-build:dropped-<build id>.
DROPPED_PREFIX = "dropped-"

OutputCallback = Callable[[bytes], None]


class SandboxError(RuntimeError):
    """A sandbox could not be created or acted on; the message says why and what to do."""


class Sandbox(BaseModel):
    id: str
    provider: str
    labels: dict[str, str] = Field(default_factory=dict)
    # Provider-specific handle: host directory, container id, pod name and namespace...
    ref: dict[str, Any] = Field(default_factory=dict)
    created_at: float = Field(default_factory=time.time)


class ExecResult(BaseModel):
    exit_code: int | None  # None when the command was killed for its timeout
    output: str  # stdout and stderr combined, the last ~1 MiB
    timed_out: bool = False
    duration_s: float = 0.0


class ProcessStatus(BaseModel):
    state: Literal["running", "exited", "gone"]
    exit_code: int | None = None


def new_sandbox_id() -> str:
    return f"sb-{secrets.token_hex(6)}"


def new_process_id() -> str:
    return f"p-{secrets.token_hex(6)}"


def sandbox_env(extra: dict[str, str] | None, *, path: str = BASE_PATH) -> dict[str, str]:
    """The whole environment of a sandboxed process: basics plus what the caller passes.

    hangar's own os.environ is never inherited.
    """
    env = {"PATH": path, "HOME": HOME_DIR, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    for key, value in (extra or {}).items():
        env[str(key)] = str(value)
    return env


def workspace_relative(path: str) -> str:
    """`path` (absolute, under /workspace) relative to /workspace; ValueError otherwise."""
    if not path.startswith("/"):
        raise ValueError(f"sandbox paths are absolute, e.g. {WORKSPACE}/file; got {path!r}")
    norm = os.path.normpath(path)
    if not norm.startswith(WORKSPACE + "/"):
        raise ValueError(f"{path}: only paths under {WORKSPACE} can be copied in or out")
    return norm[len(WORKSPACE) + 1 :]


def exit_file(process_id: str) -> str:
    return f"{HANGAR_DIR}/{process_id}.exit"


def detached_wrapper(argv: list[str], *, cwd: str, log_path: str, process_id: str,
                     end_namespace: bool = False) -> list[str]:
    """argv for a shell that runs the agent, logs its output and records its exit code.

    The exit code goes to a temporary file renamed into place, so an observer never reads a
    half-written code. No exit file and no process means the run was lost.

    `end_namespace`, when the wrapper runs in a pid namespace of the sandbox's own (local,
    under bubblewrap): once the code is recorded, every process left in the namespace (the
    relay, anything the agent left running) is killed, so the namespace ends with its work.
    """
    final = exit_file(process_id)
    script = (
        'cd "$1" || exit 127; log="$2"; final="$3"; shift 3; '
        'mkdir -p "$(dirname "$log")" "$(dirname "$final")"; '
        # A log left as a FIFO (or a link, a device) by an earlier turn would block the
        # redirection below for good: only a regular file is appended to.
        '{ [ -L "$log" ] || { [ -e "$log" ] && [ ! -f "$log" ]; }; } && rm -f "$log"; '
        '"$@" >>"$log" 2>&1 </dev/null; code=$?; '
        'echo "$code" >"$final.tmp" && mv -f "$final.tmp" "$final"'
        # kill -1 signals every process of the namespace but its init and this shell.
        + ('; kill -KILL -1 2>/dev/null; exit "$code"' if end_namespace else "")
    )
    return ["/bin/sh", "-c", script, "hangar-agent", cwd, log_path, final, *argv]


class OutputTail:
    """Keeps the last `limit` bytes of a stream of chunks."""

    def __init__(self, limit: int = OUTPUT_TAIL_BYTES) -> None:
        self.limit = limit
        self._chunks: list[bytes] = []
        self._size = 0
        self.truncated = False

    def add(self, chunk: bytes) -> None:
        self._chunks.append(chunk)
        self._size += len(chunk)
        while self._size > self.limit and self._chunks:
            extra = self._size - self.limit
            head = self._chunks[0]
            if len(head) <= extra:
                self._chunks.pop(0)
                self._size -= len(head)
            else:
                self._chunks[0] = head[extra:]
                self._size -= extra
            self.truncated = True

    def data(self) -> bytes:
        return b"".join(self._chunks)

    def text(self) -> str:
        return self.data().decode("utf-8", errors="replace")


class Provider(abc.ABC):
    """One way of making sandboxes. All methods are coroutines; none blocks the loop."""

    name: str

    async def close(self) -> None:  # noqa: B027 - most providers keep nothing
        """Let go of what the provider keeps between calls; its sandboxes stay."""

    @abc.abstractmethod
    async def create(self, spec: EnvSpec, labels: dict[str, str]) -> Sandbox:
        """A fresh sandbox with /workspace, /workspace/home and /workspace/.hangar."""

    @abc.abstractmethod
    async def run(
        self,
        sb: Sandbox,
        argv: list[str],
        *,
        timeout: float | None = None,
        env: dict[str, str] | None = None,
        cwd: str = WORKSPACE,
        on_output: OutputCallback | None = None,
        offline: bool = False,
    ) -> ExecResult:
        """Run argv to completion (or until timeout, then kill it and all it started).

        `offline`: the command needs no network (hangar's own git status, checkout, ...):
        a provider whose way out is made per command (local: the in-sandbox relay to the
        gate) may leave it out. Others ignore it; it never widens what a command reaches.
        """

    @abc.abstractmethod
    async def start(
        self,
        sb: Sandbox,
        argv: list[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str = REPO_DIR,
        log_path: str = DEFAULT_LOG_PATH,
    ) -> str:
        """Start argv detached, output to log_path; returns an id that `observe` accepts.

        The process survives hangar's restart; its exit code is written to
        /workspace/.hangar/<id>.exit when it ends.
        """

    @abc.abstractmethod
    async def observe(self, sb: Sandbox, process_id: str) -> ProcessStatus:
        """running, exited (with its code) or gone (no process, no exit code; zombies too)."""

    @abc.abstractmethod
    async def stop(self, sb: Sandbox, process_id: str, grace_s: float = 5) -> None:
        """SIGTERM the process and all it started, SIGKILL after grace_s. Idempotent."""

    @abc.abstractmethod
    async def copy_in(self, sb: Sandbox, files: dict[str, bytes], mode: int = 0o644) -> None:
        """Write files at absolute sandbox paths under /workspace, creating directories."""

    @abc.abstractmethod
    async def copy_out(self, sb: Sandbox, path: str, max_bytes: int = OUTPUT_TAIL_BYTES) -> bytes:
        """The last `max_bytes` bytes of one regular file at an absolute sandbox path.

        FileNotFoundError if absent; `sandbox.safe_read.NotARegularFile` (an OSError) for
        a FIFO, socket, device, directory or a path through a symlink. Never blocks.
        """

    @abc.abstractmethod
    async def destroy(self, sb: Sandbox) -> None:
        """Kill everything in the sandbox and remove it. Idempotent."""

    @abc.abstractmethod
    async def list(self, labels: dict[str, str]) -> list[Sandbox]:
        """Sandboxes of this provider carrying all the given labels (the reaper's view)."""

    async def end_abandoned(self) -> builtins.list[str]:  # `list` is a method here
        """End the sandboxes of any hangar on this host that is gone for good (its data
        directory removed) and that are still running; what was ended, for the log."""
        return []
