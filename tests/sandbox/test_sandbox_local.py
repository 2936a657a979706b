"""What only the local provider does: refusing without bubblewrap, isolation: none, the
loopback relay to the push proxy, and picking up detached processes after a restart."""

from __future__ import annotations

import asyncio
import logging
import shutil
import socket
import time

import pytest
from sandbox_helpers import wait_for

from sandbox.envspec import EnvSpec
from sandbox.provider import SandboxError
from sandbox.providers import get_provider
from sandbox.providers import local as local_module
from sandbox.providers._etc import SharedEtc
from sandbox.providers.local import BWRAP_MISSING, LocalProvider
from sandbox.safe_read import NotARegularFile

pytestmark = pytest.mark.skipif(not shutil.which("bwrap"), reason="bubblewrap is not installed")


def test_get_provider_by_name(tmp_path):
    assert isinstance(get_provider("local", root=tmp_path), LocalProvider)
    with pytest.raises(ValueError, match="unknown sandbox provider 'lxc'; use one of local"):
        get_provider("lxc")


async def test_refuses_without_bubblewrap_unless_isolation_none(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(local_module.shutil, "which", lambda name: None)
    provider = LocalProvider(root=tmp_path / "sb")
    with pytest.raises(SandboxError) as raised:
        await provider.create(EnvSpec(name="d"), {})
    assert str(raised.value) == BWRAP_MISSING
    assert "apt-get install bubblewrap" in BWRAP_MISSING
    with caplog.at_level(logging.WARNING, logger="sandbox.providers.local"):
        sb = await provider.create(EnvSpec(name="d", isolation="none"), {})
    assert "WITHOUT isolation" in caplog.text and sb.id in caplog.text


async def test_isolation_none_runs_plain_processes_in_the_sandbox_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "ghs_must_not_leak")
    provider = LocalProvider(root=tmp_path / "sb")
    sb = await provider.create(EnvSpec(name="d", isolation="none"), {})
    await provider.copy_in(sb, {"/workspace/repo/agent.sh": b"echo $HOME; exit 4\n"})
    result = await provider.run(sb, ["sh", "-c", "pwd; env"], cwd="/workspace/repo")
    assert result.output.splitlines()[0].endswith(f"{sb.id}/workspace/repo")
    assert "ghs_must_not_leak" not in result.output
    pid = await provider.start(sb, ["sh", "/workspace/repo/agent.sh"])

    async def exited() -> bool:
        return (await provider.observe(sb, pid)).state == "exited"

    assert await wait_for(exited)
    assert (await provider.observe(sb, pid)).exit_code == 4
    log = await provider.copy_out(sb, "/workspace/.hangar/agent.log")
    assert log.decode().strip().endswith(f"{sb.id}/workspace/home")
    await provider.destroy(sb)


async def test_detached_process_outlives_the_provider_object(tmp_path):
    first = LocalProvider(root=tmp_path / "sb")
    sb = await first.create(EnvSpec(name="d"), {"job": "1"})
    pid = await first.start(sb, ["sh", "-c", "until [ -e go ]; do sleep 0.05; done; exit 5"],
                            cwd="/workspace")
    del first  # hangar restarts: a new provider, the stored Sandbox record and the id
    second = LocalProvider(root=tmp_path / "sb")
    stored = type(sb).model_validate_json(sb.model_dump_json())
    assert (await second.observe(stored, pid)).state == "running"
    await second.copy_in(stored, {"/workspace/go": b""})

    async def exited() -> bool:
        return (await second.observe(stored, pid)).state == "exited"

    assert await wait_for(exited)
    assert (await second.observe(stored, pid)).exit_code == 5
    assert [s.id for s in await second.list({"job": "1"})] == [sb.id]
    await second.destroy(stored)


async def test_destroy_kills_commands_it_has_no_record_of(tmp_path):
    """A command started by an earlier hangar (killed while it ran, so nothing recorded
    it) dies with the sandbox when the next hangar destroys it."""
    from sandbox.providers import _procs

    first = LocalProvider(root=tmp_path / "sb")
    sb = await first.create(EnvSpec(name="d"), {"job": "1"})
    running = asyncio.ensure_future(first.run(sb, ["sleep", "300"]))
    directory = tmp_path / "sb" / sb.id

    async def started() -> bool:
        return bool(_procs.holding(directory))

    assert await wait_for(started)
    held = _procs.holding(directory)
    sleeping = [p for pid in held for p in _procs.descendants(pid)]
    second = LocalProvider(root=tmp_path / "sb")  # the restarted hangar
    await second.destroy(type(sb).model_validate_json(sb.model_dump_json()))
    assert not any(_procs.is_alive(pid) for pid in [*held, *sleeping])
    assert not directory.exists()
    result = await asyncio.wait_for(running, 10)
    assert result.exit_code != 0  # killed, not finished


def _serve_once(reply: bytes) -> tuple[socket.socket, int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    return server, server.getsockname()[1]


async def _answer(server: socket.socket, reply: bytes) -> None:
    loop = asyncio.get_running_loop()
    server.setblocking(False)
    while True:
        conn, _ = await loop.sock_accept(server)
        data = await loop.sock_recv(conn, 1024)
        await loop.sock_sendall(conn, reply + data)
        conn.close()


async def test_loopback_reaches_the_proxy_port_and_nothing_else(tmp_path):
    proxy, proxy_port = _serve_once(b"proxy:")
    other, other_port = _serve_once(b"other:")
    tasks = [asyncio.create_task(_answer(proxy, b"proxy:")),
             asyncio.create_task(_answer(other, b"other:"))]  # fmt: skip
    provider = LocalProvider(root=tmp_path / "sb", proxy_port=proxy_port)
    try:
        sb = await provider.create(EnvSpec(name="d", network="loopback"), {})
        client = (
            "import socket, sys\n"
            "port = int(sys.argv[1])\n"
            "try:\n"
            "    s = socket.create_connection(('127.0.0.1', port), timeout=3)\n"
            "    s.sendall(b'ping'); print(s.recv(100).decode())\n"
            "except OSError as e:\n"
            "    print('refused', type(e).__name__)\n"
        )
        started = time.monotonic()
        result = await provider.run(sb, ["python3", "-c", client, str(proxy_port)])
        assert result.output.strip() == "proxy:ping", result.output
        assert time.monotonic() - started < 5
        result = await provider.run(sb, ["python3", "-c", client, str(other_port)])
        assert result.output.strip().startswith("refused"), result.output
        # A detached agent reaches the proxy too.
        pid = await provider.start(sb, ["python3", "-c", client, str(proxy_port)], cwd="/workspace")

        async def exited() -> bool:
            return (await provider.observe(sb, pid)).state == "exited"

        assert await wait_for(exited)
        assert b"proxy:ping" in await provider.copy_out(sb, "/workspace/.hangar/agent.log")
        # network: none reaches nothing, not even the proxy.
        closed = await provider.create(EnvSpec(name="d", network="none"), {})
        result = await provider.run(closed, ["python3", "-c", client, str(proxy_port)])
        assert result.output.strip().startswith("refused"), result.output
    finally:
        for task in tasks:
            task.cancel()
        proxy.close()
        other.close()
        for sb in await provider.list({}):
            await provider.destroy(sb)


async def test_copy_refuses_paths_outside_workspace_and_symlink_escapes(tmp_path):
    provider = LocalProvider(root=tmp_path / "sb")
    sb = await provider.create(EnvSpec(name="d"), {})
    secret = tmp_path / "host-secret"
    secret.write_text("host only")
    with pytest.raises(ValueError, match="only paths under /workspace"):
        await provider.copy_in(sb, {"/etc/passwd": b"x"})
    with pytest.raises(ValueError, match="only paths under /workspace"):
        await provider.copy_out(sb, "/workspace/../etc/passwd")
    # The agent plants a symlink to a host path; hangar must not follow it.
    await provider.run(sb, ["ln", "-s", str(secret), "/workspace/link"])
    with pytest.raises(NotARegularFile, match="symlink"):
        await provider.copy_out(sb, "/workspace/link")
    with pytest.raises(ValueError, match="through a symlink"):
        await provider.copy_in(sb, {"/workspace/link": b"overwritten"})
    assert secret.read_text() == "host only"
    await provider.destroy(sb)


async def test_default_env_demo_agent_runs_and_commits(tmp_path):
    from sandbox.envspec import default_envs_dir, load_envs
    from sandbox.harness import harness_for

    spec = load_envs(default_envs_dir())["default"]
    provider = LocalProvider(root=tmp_path / "sb")
    sb = await provider.create(spec, {})
    setup = await provider.run(sb, ["sh", "-c", (
        "set -e; git init -q -b main /workspace/repo; cd /workspace/repo; "
        "git -c user.name=t -c user.email=t@example.invalid commit -q --allow-empty -m base"
    )])  # fmt: skip
    assert setup.exit_code == 0, setup.output
    harness = harness_for(spec)
    await provider.copy_in(sb, harness.files(), mode=0o755)
    argv, env = harness.command("fix the flaky test", turn=1)
    pid = await provider.start(sb, argv, env=env)

    async def exited() -> bool:
        return (await provider.observe(sb, pid)).state == "exited"

    assert await wait_for(exited)
    assert (await provider.observe(sb, pid)).exit_code == 0
    log = (await provider.copy_out(sb, "/workspace/.hangar/agent.log")).decode()
    assert "demo agent" in harness.parse(log).summary
    demo = await provider.copy_out(sb, "/workspace/repo/HANGAR_DEMO.md")
    assert b"fix the flaky test" in demo
    count = await provider.run(sb, ["git", "rev-list", "--count", "HEAD"], cwd="/workspace/repo")
    assert count.output.strip() == "2"
    await provider.destroy(sb)


async def test_host_secrets_in_etc_stay_hidden(tmp_path):
    provider = LocalProvider(root=tmp_path / "sb")
    sb = await provider.create(EnvSpec(name="d"), {})
    script = (
        "ls /etc/ssl/private /etc/shadow /etc/sudoers 2>/dev/null; "
        "test -r /etc/ssl/certs/ca-certificates.crt -o ! -e /etc/ssl/certs && echo certs-ok"
    )
    result = await provider.run(sb, ["sh", "-c", script])
    assert result.output.strip() == "certs-ok"
    await provider.destroy(sb)


async def test_etc_is_a_copy_that_follows_the_host(tmp_path):
    """/etc is one mount of hangar's copy: what the host changes shows at the next command
    (a directory within a second or so), an owner-only file never, links stay links."""
    host = tmp_path / "host-etc"
    (host / "ssl" / "certs").mkdir(parents=True)
    (host / "hosts").write_text("127.0.0.1 first\n")
    (host / "secret").write_text("owner only\n")
    (host / "secret").chmod(0o600)
    (host / "ssl" / "certs" / "a.pem").write_text("cert a\n")
    (host / "ssl" / "certs" / "b.0").symlink_to("a.pem")
    provider = LocalProvider(root=tmp_path / "sb")
    provider._etc = SharedEtc(provider.root / ".etc", ("hosts", "secret", "ssl/certs"),
                              {"passwd": "hangar:x:1000:1000::/workspace/home:/bin/sh\n"},
                              host_etc=host)  # fmt: skip
    sb = await provider.create(EnvSpec(name="d"), {})
    look = ("cat /etc/hosts; test -e /etc/secret && echo secret-seen; "
            "readlink /etc/ssl/certs/b.0; cat /etc/ssl/certs/b.0 /etc/ssl/certs/c.pem 2>&1; "
            "id -un; touch /etc/hosts 2>/dev/null || echo read-only")  # fmt: skip
    first = await provider.run(sb, ["sh", "-c", look])
    assert first.output.splitlines() == [
        "127.0.0.1 first", "a.pem", "cert a",
        "cat: /etc/ssl/certs/c.pem: No such file or directory", "hangar", "read-only"]  # fmt: skip

    (host / "hosts").write_text("127.0.0.1 second and longer\n")
    (host / "ssl" / "certs" / "c.pem").write_text("cert c\n")
    second = await provider.run(sb, ["sh", "-c", "cat /etc/hosts"])
    assert second.output == "127.0.0.1 second and longer\n"

    async def new_cert_seen() -> bool:
        return (await provider.run(sb, ["cat", "/etc/ssl/certs/c.pem"])).output == "cert c\n"

    assert await wait_for(new_cert_seen, timeout=30)
    await provider.destroy(sb)


async def _ended(provider: LocalProvider, sb, process_id: str) -> bool:
    """Nothing of the sandbox runs any more: its init is gone, no process names it."""
    from sandbox.providers import _procs

    record = provider._record(sb, process_id)
    anchor_alive = record and _procs.is_alive(record["pid"], record.get("started"))
    return not anchor_alive and not await asyncio.to_thread(_procs.holding,
                                                            provider._dir(sb))


async def test_a_sandbox_ends_with_its_agent_relay_and_leftovers_included(tmp_path):
    """The agent left a process running and the relay to the gate serves it: once the
    agent's exit is recorded, nothing of the sandbox runs on."""
    provider = LocalProvider(root=tmp_path / "sb", proxy_port=_free_port())
    sb = await provider.create(EnvSpec(name="d"), {})
    try:
        pid = await provider.start(sb, ["sh", "-c", "sleep 600 & echo left it; exit 3"],
                                   cwd="/workspace")
        assert await wait_for(lambda: _exited(provider, sb, pid), 30)
        assert await wait_for(lambda: _ended(provider, sb, pid), 30)
        assert (await provider.observe(sb, pid)).exit_code == 3
    finally:
        await provider.destroy(sb)
        await provider._relay.close()


async def test_the_next_start_ends_sandboxes_whose_hangar_is_gone(tmp_path):
    """A hangar stopped, its data directory removed, its agent still running: the next
    hangar on the host ends it."""
    gone = LocalProvider(root=tmp_path / "gone" / "sandboxes")
    sb = await gone.create(EnvSpec(name="d"), {})
    pid = await gone.start(sb, ["sh", "-c", "echo up; exec sleep 600"], cwd="/workspace")
    anchor = gone._record(sb, pid)["pid"]
    log = gone._dir(sb) / "workspace" / ".hangar" / "agent.log"

    async def up() -> bool:  # the agent runs (before that, its log could not be written)
        return await asyncio.to_thread(lambda: log.exists() and b"up" in log.read_bytes())

    assert await wait_for(up, 30)
    await asyncio.to_thread(shutil.rmtree, tmp_path / "gone")
    kept = LocalProvider(root=tmp_path / "kept" / "sandboxes")
    alive = await kept.create(EnvSpec(name="d"), {})  # a live hangar's: never touched
    alive_pid = await kept.start(alive, ["sleep", "600"], cwd="/workspace")
    try:
        assert await wait_for(lambda: _running(kept, alive, alive_pid), 30)
        assert sb.id in await LocalProvider(root=tmp_path / "next").end_abandoned()
        from sandbox.providers import _procs

        async def anchor_gone() -> bool:
            return not _procs.is_alive(anchor)

        assert await wait_for(anchor_gone, 30)
        assert (await kept.observe(alive, alive_pid)).state == "running"
    finally:
        await kept.destroy(alive)


async def _exited(provider, sb, pid) -> bool:
    return (await provider.observe(sb, pid)).state == "exited"


async def _running(provider, sb, pid) -> bool:
    return (await provider.observe(sb, pid)).state == "running"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_cancelled_run_ends_and_reaps_its_process(tmp_path):
    """A step cancelled while its command runs (hangar stopping) kills the command and
    reaps it before the cancellation goes on: nothing is left for a closed event loop to
    clean up at garbage collection."""
    import gc
    import sys

    unraisable: list[object] = []
    previous, sys.unraisablehook = sys.unraisablehook, unraisable.append

    provider = LocalProvider(root=tmp_path / "sb")
    sb = asyncio.run(provider.create(EnvSpec(name="d"), {}))

    async def cancelled_midway() -> None:  # and its loop closed at once
        run = asyncio.ensure_future(provider.run(sb, ["sh", "-c", "echo up; exec sleep 60"]))

        async def started() -> bool:
            return bool(provider._running.get(sb.id))

        assert await wait_for(started)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run

    try:
        asyncio.run(cancelled_midway())
        gc.collect()
    finally:
        sys.unraisablehook = previous
        asyncio.run(provider.destroy(sb))
    assert unraisable == []
