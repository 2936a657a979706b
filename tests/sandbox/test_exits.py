"""A detached process's end is heard as it happens (sandbox.exits), on every provider
that can run here, and what the engine's look then finds is that end, with its code."""

from __future__ import annotations

import asyncio

from sandbox.exits import ExitWaits, process_ended
from sandbox.provider import ProcessStatus

WAITS_FOR_GO = ["sh", "-c", "while [ ! -f /workspace/go ]; do sleep 0.05; done; exit 3"]


async def running(provider, sb, pid) -> None:
    for _ in range(400):
        if (await provider.observe(sb, pid)).state == "running" and \
                await asyncio.to_thread(provider.host_pids, sb, pid):
            return
        await asyncio.sleep(0.025)
    raise AssertionError("the process never ran")


async def test_the_end_is_heard_and_the_look_then_finds_the_exit_code(provider, make_sandbox):
    sb = await make_sandbox()
    pid = await provider.start(sb, WAITS_FOR_GO, cwd="/workspace")
    await running(provider, sb, pid)
    ended = asyncio.ensure_future(process_ended(provider, sb, pid))
    done, _ = await asyncio.wait([ended], timeout=0.3)
    assert not done, "the waiter returned while the process still ran"
    await provider.copy_in(sb, {"/workspace/go": b""})
    assert await asyncio.wait_for(ended, 20) is True
    # The exit file is written before the process ends: the look the end asks for finds it.
    assert await provider.observe(sb, pid) == ProcessStatus(state="exited", exit_code=3)


async def test_a_process_already_gone_or_without_a_host_pid_is_left_to_the_look(
        provider, make_sandbox):
    sb = await make_sandbox()
    pid = await provider.start(sb, ["true"], cwd="/workspace")
    # The exit file is written before the process is gone: "exited" may come a moment
    # before the host has no pid of it left. Waited for is its end, on its pidfd.
    pids = await asyncio.to_thread(provider.host_pids, sb, pid)
    if pids:
        await asyncio.wait_for(process_ended(provider, sb, pid), 20)
    for _ in range(800):
        if (await provider.observe(sb, pid)).state == "exited" and \
                not await asyncio.to_thread(provider.host_pids, sb, pid):
            break
        await asyncio.sleep(0.025)
    else:
        raise AssertionError("the process was still seen 20 s after it ended")
    assert await asyncio.wait_for(process_ended(provider, sb, pid), 10) is False

    class NoHostPids:
        def host_pids(self, sb, process_id):
            return []

    assert await process_ended(NoHostPids(), sb, pid) is False


async def test_one_waiter_per_process_each_calls_back_once_and_close_cancels_the_rest(
        provider, make_sandbox):
    sb = await make_sandbox()
    quick = await provider.start(sb, WAITS_FOR_GO, cwd="/workspace")
    slow = await provider.start(sb, ["sleep", "60"], cwd="/workspace")
    await running(provider, sb, quick)
    await running(provider, sb, slow)
    heard: list[str] = []
    waits = ExitWaits()
    for _ in range(2):  # asked twice while it waits: one waiter
        waits.watch("quick", provider, sb, quick, lambda: heard.append("quick"))
    waits.watch("slow", provider, sb, slow, lambda: heard.append("slow"))
    assert sorted(waits.waiting()) == ["quick", "slow"]
    await provider.copy_in(sb, {"/workspace/go": b""})
    for _ in range(800):
        if heard:
            break
        await asyncio.sleep(0.025)
    assert heard == ["quick"]
    assert waits.waiting() == ["slow"]
    await waits.close()
    assert waits.waiting() == [] and heard == ["quick"]
    await provider.stop(sb, slow, grace_s=1)
