"""Bubblewraps started ahead (sandbox/providers/_warm.py): a command run in one is answered
exactly as a cold start answers it, nothing carries over from one command to the next, and
nothing started ahead outlives the provider or a sandbox's directory."""

from __future__ import annotations

import asyncio
import os
import shutil

import pytest
from sandbox_helpers import wait_for

from sandbox.envspec import EnvSpec
from sandbox.providers import _procs
from sandbox.providers import _warm as warm_module
from sandbox.providers.local import SPARE, LocalProvider
from tests.e2e.conftest import free_port

pytestmark = pytest.mark.skipif(not shutil.which("bwrap"), reason="bubblewrap is not installed")

SPEC = EnvSpec(name="w", network="loopback")


@pytest.fixture(params=["plain", "relay"])
def providers(request, tmp_path):
    """A warm and a cold provider alike: both behind a relay, or neither."""
    extra = {"proxy_port": free_port()} if request.param == "relay" else {}
    return (LocalProvider(tmp_path / "warm", warm=True, **extra),
            LocalProvider(tmp_path / "cold", **extra))


async def started_ahead(provider: LocalProvider, sb) -> None:
    async def ready() -> bool:
        return provider.started_ahead(sb)

    assert await wait_for(ready, timeout=10)


COMMANDS = [
    pytest.param(["sh", "-c", 'printf "%s|%s|%s" "$A" "$B" "$HOME:$LANG"'],
                 {"A": "it's \"quoted\" $HOME `id` \\", "B": "é ü"}, "/workspace", id="env"),
    pytest.param(["no-such-command", "x"], {}, "/workspace", id="not-found"),
    pytest.param(["pwd"], {}, "/workspace/no/such/dir", id="missing-cwd"),
    pytest.param(["sh", "-c", "pwd; exit 7"], {}, "/workspace/home", id="exit-code"),
    pytest.param(["sh", "-c", "cat; echo read-all"], {}, "/workspace", id="stdin"),
    pytest.param(["sh", "-c", "ls /proc/self/fd | wc -l; echo $$"], {}, "/workspace",
                 id="fds-and-pid"),
    pytest.param(["sh", "-c", "env | sort"], {"NOT-A-NAME": "1", "OK": "2"}, "/workspace",
                 id="unsettable-name"),
    pytest.param(["printf", "%s", "two\nlines"], {}, "/workspace", id="newline-argv"),
]


@pytest.mark.parametrize(("argv", "env", "cwd"), COMMANDS)
async def test_a_command_started_ahead_is_answered_as_a_cold_start(providers, argv, env,
                                                                    cwd, monkeypatch):
    warm, cold = providers
    begun = []
    real_begin = warm_module.Started.begin

    async def begin(self, line):
        begun.append(line)
        await real_begin(self, line)

    monkeypatch.setattr(warm_module.Started, "begin", begin)
    try:
        answers = []
        for provider in (warm, cold):
            sb = await provider.create(SPEC, {})
            await provider.run(sb, ["true"])
            if provider is warm:
                await started_ahead(warm, sb)
                begun.clear()
            result = await provider.run(sb, argv, env=env, cwd=cwd, timeout=30)
            answers.append((result.exit_code, result.output, result.timed_out))
            await provider.destroy(sb)
        assert answers[0] == answers[1]
        expressible = "-" not in "".join(env) and "\n" not in "".join(argv)
        assert bool(begun) is expressible  # it really ran warm, or really could not
    finally:
        await warm.close()


async def test_a_timeout_ends_a_command_started_ahead(providers):
    warm, cold = providers
    try:
        for provider in (warm, cold):
            sb = await provider.create(SPEC, {})
            await provider.run(sb, ["true"])
            if provider is warm:
                await started_ahead(warm, sb)
            result = await provider.run(sb, ["sleep", "30"], timeout=0.3)
            assert (result.timed_out, result.exit_code) == (True, None)
            await provider.destroy(sb)
            assert _procs.holding(provider.root / sb.id) == []
    finally:
        await warm.close()


async def test_nothing_carries_over_from_one_command_to_the_next(tmp_path):
    provider = LocalProvider(tmp_path / "sb", warm=True)
    try:
        sb = await provider.create(SPEC, {})
        await provider.run(sb, ["true"])
        await started_ahead(provider, sb)
        # The shell counts the processes it can see by a glob, which forks nothing:
        # a pipeline would race its own forks (ls can read /proc before grep exists).
        count = "set -- /proc/[0-9]*; echo $#"
        first = await provider.run(
            sb, ["sh", "-c", f"echo left > /tmp/left; sleep 60 & {count}"])
        await started_ahead(provider, sb)
        second = await provider.run(sb, ["sh", "-c", f"cat /tmp/left; {count}"])
        assert "No such file" in second.output
        # The first saw the init, itself and its sleep; the second no sleep.
        assert int(second.output.split()[-1]) == int(first.output.split()[-1]) - 1
        await provider.destroy(sb)
    finally:
        await provider.close()


async def test_spares_are_unseen_and_closing_leaves_no_process_and_no_spare(tmp_path):
    provider = LocalProvider(tmp_path / "sb", warm=True)
    sb = await provider.create(SPEC, {"job": "j"})
    await provider.run(sb, ["true"])
    await provider.destroy(sb)

    async def spare() -> bool:
        return any(provider.root.glob(f"sb-*/procs/{SPARE}"))

    assert await wait_for(spare, timeout=10)
    assert await provider.list({}) == []
    taken = await provider.create(SPEC, {"job": "k"})
    assert not (provider.root / taken.id / "procs" / SPARE).exists()
    assert [s.id for s in await provider.list({})] == [taken.id]
    assert provider.started_ahead(taken)  # the spare's first command's bubblewrap
    result = await provider.run(taken, ["hostname"])
    assert result.output.strip() == taken.id
    await provider.destroy(taken)
    await wait_for(spare, timeout=10)
    await provider.close()

    async def gone() -> bool:
        return not any(str(w).startswith(str(provider.root))
                       for _, w in _procs.bwrap_workspaces())

    assert await wait_for(gone, timeout=10)
    assert sorted(p.name for p in provider.root.glob("sb-*")) == []


async def test_a_started_bubblewrap_whose_mounts_changed_is_ended_not_used(tmp_path):
    provider = LocalProvider(tmp_path / "sb", warm=True)
    try:
        sb = await provider.create(SPEC, {})
        await provider.run(sb, ["true"])
        await started_ahead(provider, sb)
        stale = provider._waiting[sb.id].proc
        workspace = provider.root / sb.id / "workspace"
        os.rename(workspace, workspace.with_name("old"))
        shutil.copytree(workspace.with_name("old"), workspace)
        (workspace / "marker").write_text("new workspace")
        result = await provider.run(sb, ["cat", "/workspace/marker"])
        assert (result.exit_code, result.output) == (0, "new workspace")
        assert await wait_for(lambda: asyncio.sleep(0, stale.poll() is not None), timeout=10)
        # And a started one whose argv would differ now (a path hidden since) is not used.
        await started_ahead(provider, sb)
        stale = provider._waiting[sb.id].proc
        provider.hidden_paths.append(tmp_path / "secret")
        (tmp_path / "secret").mkdir()
        provider._host_view_bound.append(tmp_path)
        result = await provider.run(sb, ["true"])
        assert result.exit_code == 0
        assert await wait_for(lambda: asyncio.sleep(0, stale.poll() is not None), timeout=10)
        await provider.destroy(sb)
    finally:
        await provider.close()


def test_spares_a_killed_hangar_left_are_removed_and_a_live_ones_kept(tmp_path):
    root = tmp_path / "sb"
    for name, maker in (("sb-dead0000001", "999999999 1"),
                        ("sb-live0000001", f"{os.getpid()} {_procs.start_time(os.getpid())}")):
        (root / name / "procs").mkdir(parents=True)
        (root / name / "procs" / SPARE).write_text(maker)
    (root / "sb-made00000001" / "procs").mkdir(parents=True)  # a sandbox: not a spare
    LocalProvider(root, warm=True)
    assert sorted(p.name for p in root.glob("sb-*")) == ["sb-live0000001", "sb-made00000001"]


async def test_a_destroy_right_after_a_command_leaves_nothing_started(tmp_path):
    provider = LocalProvider(tmp_path / "sb", warm=True)
    try:
        sb = await provider.create(SPEC, {})
        await provider.run(sb, ["true"])
        await provider.destroy(sb)  # before the next command's bubblewrap was started
        for _ in range(5):
            await asyncio.sleep(0.01)
        assert not provider.started_ahead(sb)
        assert not (provider.root / sb.id).exists()
        assert _procs.holding(provider.root / sb.id) == []
    finally:
        await provider.close()


async def test_a_command_cancelled_as_it_is_handed_to_its_bubblewrap_leaves_no_process(
        tmp_path, monkeypatch):
    """A step cancelled (hangar stopping) while its command was being handed to the
    bubblewrap started for it: that bubblewrap is ended, not left waiting for ever."""
    provider = LocalProvider(tmp_path / "sb", warm=True)
    handing = asyncio.Event()

    async def stalled(self, line: bytes) -> None:
        handing.set()
        await asyncio.Event().wait()

    try:
        sb = await provider.create(SPEC, {})
        await provider.run(sb, ["true"])
        await started_ahead(provider, sb)
        monkeypatch.setattr(warm_module.Started, "begin", stalled)
        running = asyncio.ensure_future(provider.run(sb, ["true"]))
        await handing.wait()
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        await provider.destroy(sb)
        assert await wait_for(lambda: asyncio.sleep(0, not _procs.holding(provider.root / sb.id)),
                              timeout=10)
    finally:
        await provider.close()
