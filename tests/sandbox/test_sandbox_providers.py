"""Behaviour every provider must show, run against real isolation (local: bubblewrap;
docker: a real engine, no network). The `provider` fixture runs each test per provider."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time

import pytest
from sandbox_helpers import wait_for

from sandbox.provider import ProcessStatus, SandboxError
from sandbox.watch import RunState, RunWatch

TICK = 0.2  # a watch tick, shortened for tests


async def test_create_gives_workspace_home_and_hangar_dir(provider, make_sandbox):
    sb = await make_sandbox()
    assert sb.id.startswith("sb-") and len(sb.id) == 15
    result = await provider.run(
        sb, ["sh", "-c", 'test -d /workspace/home && test -d /workspace/.hangar && echo "$HOME"']
    )
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "/workspace/home"
    # The record survives a round trip through the engine's store.
    assert type(sb).model_validate_json(sb.model_dump_json()) == sb


async def test_run_streams_output_and_reports_exit_code(provider, make_sandbox):
    sb = await make_sandbox()
    chunks: list[bytes] = []
    result = await provider.run(
        sb, ["sh", "-c", "echo out; echo err >&2; exit 3"], on_output=chunks.append
    )
    assert result.exit_code == 3
    assert not result.timed_out
    assert "out" in result.output and "err" in result.output
    assert b"out" in b"".join(chunks)


async def test_run_timeout_kills_the_command(provider, make_sandbox):
    sb = await make_sandbox()
    started = time.monotonic()
    result = await provider.run(sb, ["sh", "-c", "echo started; sleep 30"], timeout=1)
    assert result.timed_out
    assert result.exit_code is None
    assert time.monotonic() - started < 8
    assert "started" in result.output
    # Nothing of it is left running: the next command sees no sleep.
    listing = "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done 2>/dev/null"
    probe = await provider.run(sb, ["sh", "-c", listing])
    assert "cmdline" in probe.output  # the probe saw itself
    assert "sleep 30" not in probe.output


async def test_run_uses_given_env_and_cwd(provider, make_sandbox):
    sb = await make_sandbox()
    await provider.copy_in(sb, {"/workspace/repo/marker": b"here"})
    result = await provider.run(
        sb, ["sh", "-c", 'echo "$GREETING"; pwd; cat marker'], env={"GREETING": "hi"},
        cwd="/workspace/repo",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.output.split() == ["hi", "/workspace/repo", "here"]


async def test_env_holds_nothing_of_the_host(provider, make_sandbox, monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "ghs_fake_token_that_must_not_leak")
    monkeypatch.setenv("HANGAR_WEBHOOK_SECRET", "not-for-sandboxes")
    sb = await make_sandbox()
    result = await provider.run(sb, ["env"], env={"ONLY_THIS": "1"})
    assert result.exit_code == 0, result.output
    assert "ghs_fake_token_that_must_not_leak" not in result.output
    assert "GITHUB_TOKEN" not in result.output
    assert "HANGAR_WEBHOOK_SECRET" not in result.output
    names = {line.split("=", 1)[0] for line in result.output.splitlines() if "=" in line}
    assert "ONLY_THIS" in names
    # Only the basics, what the caller passed, and what the shell itself sets.
    assert names <= {"ONLY_THIS", "PATH", "HOME", "LANG", "LC_ALL", "PWD", "OLDPWD", "SHLVL",
                     "HOSTNAME", "_"}  # fmt: skip


async def test_detached_process_exits_with_its_code(provider, make_sandbox):
    sb = await make_sandbox()
    # It runs until the test says go: however slow the machine, it is seen running first.
    script = b"echo working; while [ ! -e /workspace/go ]; do sleep 0.05; done; exit 7\n"
    await provider.copy_in(sb, {"/workspace/repo/agent.sh": script})
    pid = await provider.start(sb, ["sh", "agent.sh"], env={"X": "1"})
    assert (await provider.observe(sb, pid)).state == "running"
    await provider.copy_in(sb, {"/workspace/go": b""})

    async def exited() -> bool:
        return (await provider.observe(sb, pid)).state == "exited"

    assert await wait_for(exited)
    assert await provider.observe(sb, pid) == ProcessStatus(state="exited", exit_code=7)
    log = await provider.copy_out(sb, "/workspace/.hangar/agent.log")
    assert b"working" in log


async def test_killed_from_outside_is_lost_within_two_ticks(provider, make_sandbox):
    sb = await make_sandbox()
    pid = await provider.start(sb, ["sleep", "60"], cwd="/workspace")
    watch = RunWatch(started_at=time.time(), max_minutes=60)

    async def has_agent() -> bool:
        return len(provider.host_pids(sb, pid)) >= 2

    assert await wait_for(has_agent)
    assert watch.observe(await provider.observe(sb, pid), time.time()) is None
    # As an OOM killer or a crash would: SIGKILL from the host, outermost first.
    for host_pid in provider.host_pids(sb, pid):
        with contextlib.suppress(ProcessLookupError):  # gone with its parent already
            os.kill(host_pid, signal.SIGKILL)

    async def not_running() -> bool:
        return (await provider.observe(sb, pid)).state != "running"

    assert await wait_for(not_running)
    ticks = []
    for _ in range(2):
        ticks.append(watch.observe(await provider.observe(sb, pid), time.time()))
        await asyncio.sleep(TICK)
    assert ticks == [None, RunState.LOST]
    assert watch.exit_code == -1


async def test_past_max_minutes_is_timed_out_and_stopped(provider, make_sandbox):
    sb = await make_sandbox()
    pid = await provider.start(sb, ["sleep", "60"], cwd="/workspace")
    watch = RunWatch(started_at=time.time(), max_minutes=0.5 / 60)  # half a second
    state = None
    deadline = time.monotonic() + 10
    while state is None and time.monotonic() < deadline:
        state = watch.observe(await provider.observe(sb, pid), time.time())
        await asyncio.sleep(TICK)
    assert state is RunState.TIMED_OUT
    assert watch.needs_stop
    await provider.stop(sb, pid, grace_s=2)
    assert (await provider.observe(sb, pid)).state != "running"
    assert provider.host_pids(sb, pid) == []


def commands(pids: list[int]) -> list[str]:
    """What each host process runs (its `comm`); one gone meanwhile is left out."""
    names = []
    for pid in pids:
        with contextlib.suppress(OSError):
            names.append(open(f"/proc/{pid}/comm").read().strip())
    return names


async def test_stop_cancels_with_sigterm_first(provider, make_sandbox):
    sb = await make_sandbox()
    script = b"trap 'echo terminated > /workspace/term; exit 0' TERM\nsleep 60 & wait\n"
    await provider.copy_in(sb, {"/workspace/agent.sh": script})
    pid = await provider.start(sb, ["sh", "/workspace/agent.sh"], cwd="/workspace")
    watch = RunWatch(started_at=time.time(), max_minutes=60)

    async def trap_set() -> bool:
        # sleep runs only once sh has read the trap above it: three pids (the sandbox's
        # anchor, the wrapper, sh) come before sh has run its first line.
        return "sleep" in commands(provider.host_pids(sb, pid))

    assert await wait_for(trap_set)
    assert watch.cancel(time.time()) is RunState.CANCELLED
    started = time.monotonic()
    await provider.stop(sb, pid, grace_s=30)  # a loaded machine is slow to end processes
    assert time.monotonic() - started < 30  # it obeyed SIGTERM; no need for SIGKILL
    # The agent got SIGTERM and exited 0 by its trap; the wrapper lived to record that.
    assert await provider.observe(sb, pid) == ProcessStatus(state="exited", exit_code=0)
    assert await provider.copy_out(sb, "/workspace/term") == b"terminated\n"
    await provider.stop(sb, pid)  # idempotent


async def test_copy_in_and_out(provider, make_sandbox):
    sb = await make_sandbox()
    payload = bytes(range(256)) * 100
    await provider.copy_in(sb, {"/workspace/a/b/data.bin": payload})
    await provider.copy_in(sb, {"/workspace/tool.sh": b"#!/bin/sh\necho tool ran\n"}, mode=0o755)
    assert await provider.copy_out(sb, "/workspace/a/b/data.bin") == payload
    result = await provider.run(sb, ["/workspace/tool.sh"])
    assert result.exit_code == 0 and "tool ran" in result.output
    with pytest.raises(FileNotFoundError):
        await provider.copy_out(sb, "/workspace/missing")


async def test_destroy_kills_everything_and_is_idempotent(provider, make_sandbox):
    sb = await make_sandbox({"job": "destroy-me"})
    pid = await provider.start(sb, ["sleep", "60"], cwd="/workspace")

    async def has_agent() -> bool:
        return len(provider.host_pids(sb, pid)) >= 2

    assert await wait_for(has_agent)
    host_pids = provider.host_pids(sb, pid)
    await provider.destroy(sb)
    await provider.destroy(sb)
    assert await provider.list({"job": "destroy-me"}) == []

    def alive(p: int) -> bool:
        try:
            with open(f"/proc/{p}/stat") as stat:
                return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
        except FileNotFoundError:
            return False

    assert not any(alive(p) for p in host_pids)
    with pytest.raises(SandboxError):
        await provider.run(sb, ["true"])


async def test_list_by_label(provider, make_sandbox):
    a = await make_sandbox({"job": "j-1", "role": "agent"})
    b = await make_sandbox({"job": "j-1", "role": "verify"})
    c = await make_sandbox({"job": "j-2", "role": "agent"})
    assert {s.id for s in await provider.list({"job": "j-1"})} == {a.id, b.id}
    assert [s.id for s in await provider.list({"job": "j-1", "role": "verify"})] == [b.id]
    listed = await provider.list({"hangar.test": "1"})
    assert {a.id, b.id, c.id} <= {s.id for s in listed}
    found = next(s for s in listed if s.id == c.id)
    assert found.labels["role"] == "agent"


async def test_cannot_write_outside_workspace(provider, make_sandbox, tmp_path):
    sb = await make_sandbox()
    outside = tmp_path / "host-file"
    script = " ; ".join(
        f"(echo x > {path}) 2>/dev/null && echo WROTE:{path}"
        for path in ["/usr/evil", "/etc/evil", "/evil", "/root/evil", "/bin/evil"]
    )
    # A host path: at most it lands in the sandbox's private /tmp, never on the host.
    script += f" ; mkdir -p {outside.parent} 2>/dev/null; echo x > {outside} 2>/dev/null"
    result = await provider.run(sb, ["sh", "-c", script + " ; echo ok > /workspace/fine"])
    assert "WROTE" not in result.output
    assert not outside.exists()
    assert await provider.copy_out(sb, "/workspace/fine") == b"ok\n"


async def test_cannot_read_hangar_data_dir(provider, make_sandbox, data_dir):
    sb = await make_sandbox()
    key = data_dir / "app-key.pem"
    result = await provider.run(
        sb, ["sh", "-c", f"cat {key} 2>/dev/null; ls {data_dir} 2>/dev/null"]
    )
    assert "secret" not in result.output
    assert "app-key.pem" not in result.output
    assert result.exit_code != 0


async def test_python3_runs_inside(provider, make_sandbox):
    sb = await make_sandbox()
    result = await provider.run(sb, ["python3", "-c", "import sys; print(sys.version_info[0])"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "3"


async def test_git_works_in_the_workspace(provider, make_sandbox):
    # The engine clones, commits and pushes inside sandboxes: git must work as the
    # sandbox's user with whatever capabilities the provider leaves.
    sb = await make_sandbox()
    script = (
        "set -e; git init -q -b main /workspace/repo; cd /workspace/repo; "
        "echo hi > a.txt; git add a.txt; "
        "git -c user.name=t -c user.email=t@example.invalid commit -q -m first; "
        "git rev-list --count HEAD; git status --porcelain | wc -l"
    )
    result = await provider.run(sb, ["sh", "-c", script])
    assert result.exit_code == 0, result.output
    assert result.output.split() == ["1", "0"]
