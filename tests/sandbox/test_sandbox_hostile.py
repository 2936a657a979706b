"""What an agent leaves behind never stalls or swells hangar: a FIFO exit file, a FIFO log,
a huge sparse log, a device, a symlink out. Each case runs on every provider here (local
with real bubblewrap, docker with a real engine); the agent's moves are made from inside
the sandbox, except the device node, which only the host can make (no sandbox may mknod).
"""

from __future__ import annotations

import asyncio
import os
import stat
import threading
from pathlib import Path

import pytest
from sandbox_helpers import wait_for

from sandbox.provider import Provider, Sandbox
from sandbox.safe_read import LOG_TAIL_BYTES, NotARegularFile

LOG = "/workspace/.hangar/agent.log"


def within(seconds: float, coro):
    """Run coro on a loop of its own in a daemon thread: a call that blocks its loop (the
    failure these tests look for) fails the test instead of freezing it."""
    box: dict = {}

    def run() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise AssertionError(f"still blocked after {seconds} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


async def blocking_free(seconds: float, coro):
    return await asyncio.to_thread(within, seconds, coro)


def host_workspace(provider: Provider, sb: Sandbox) -> Path:
    if provider.name == "local":
        return provider.root / sb.id / "workspace"
    volume = provider.client.volumes.get(sb.ref["volume"])
    return Path(volume.attrs["Mountpoint"])


def exit_name(process_id: str) -> str:
    return process_id.split(":")[0]


async def test_a_fifo_exit_file_never_blocks_observe(provider, make_sandbox):
    sb = await make_sandbox()
    pid = await provider.start(sb, ["sleep", "30"], cwd="/workspace")
    fifo = f"/workspace/.hangar/{exit_name(pid)}.exit"
    made = await provider.run(sb, ["mkfifo", fifo])
    assert made.exit_code == 0, made.output
    status = await blocking_free(10, provider.observe(sb, pid))
    assert status.state == "running"
    with pytest.raises(NotARegularFile):
        await blocking_free(10, provider.copy_out(sb, fifo))
    await provider.stop(sb, pid, grace_s=1)


async def test_a_fifo_log_is_refused_and_the_next_turn_still_runs(provider, make_sandbox):
    sb = await make_sandbox()
    script = f"rm -f {LOG}; mkfifo {LOG}; exit 3"
    pid = await provider.start(sb, ["sh", "-c", script], cwd="/workspace")

    async def exited(process_id: str) -> bool:
        return (await provider.observe(sb, process_id)).state == "exited"

    assert await wait_for(lambda: exited(pid), 20)
    assert (await provider.observe(sb, pid)).exit_code == 3
    with pytest.raises(NotARegularFile):
        await blocking_free(10, provider.copy_out(sb, LOG))
    # The next turn appends to the same log path: it must start, not wait on the FIFO.
    again = await provider.start(sb, ["sh", "-c", "echo turn two; exit 0"], cwd="/workspace")
    assert await wait_for(lambda: exited(again), 20), "the second turn never ran"
    assert b"turn two" in await blocking_free(10, provider.copy_out(sb, LOG))


async def test_a_huge_sparse_log_costs_at_most_its_tail(provider, make_sandbox):
    sb = await make_sandbox()
    script = f"truncate -s 256M {LOG} && printf THE-END >> {LOG}"
    made = await provider.run(sb, ["sh", "-c", script])
    assert made.exit_code == 0, made.output
    tail = await blocking_free(30, provider.copy_out(sb, LOG))
    assert len(tail) == LOG_TAIL_BYTES
    assert tail.endswith(b"THE-END")


async def test_a_device_node_is_never_opened(provider, make_sandbox):
    sb = await make_sandbox()
    ws = host_workspace(provider, sb)
    # /dev/zero: read as a file it never ends.
    os.mknod(ws / "zero", stat.S_IFCHR | 0o666, os.makedev(1, 5))
    with pytest.raises(NotARegularFile):
        await blocking_free(10, provider.copy_out(sb, "/workspace/zero"))


async def test_a_symlink_out_of_the_workspace_is_refused(provider, make_sandbox, tmp_path):
    sb = await make_sandbox()
    secret = tmp_path / "host-secret"
    secret.write_text("host only")
    script = (f"ln -s {secret} /workspace/link; ln -s /etc /workspace/etc; "
              "mkdir -p /workspace/d; ln -s /etc/hostname /workspace/d/inner")
    made = await provider.run(sb, ["sh", "-c", script])
    assert made.exit_code == 0, made.output
    for path in ("/workspace/link", "/workspace/etc/hostname", "/workspace/d/inner"):
        with pytest.raises(NotARegularFile):
            await blocking_free(10, provider.copy_out(sb, path))
