"""The session-end check (tests/conftest.py, tests/leaks.py) sees what a test left running:
a detached sandbox, a server, a container, and nothing of another run."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import time

import pytest

from tests.leaks import containers, end, hangar_instance, instance_label, processes


def test_a_detached_sandbox_and_a_server_left_behind_are_found_and_ended(tmp_path):
    if not shutil.which("bwrap"):
        pytest.skip("bubblewrap is not installed")
    from sandbox.envspec import EnvSpec
    from sandbox.providers.local import LocalProvider

    provider = LocalProvider(root=tmp_path / "sandboxes")
    sb = asyncio.run(provider.create(EnvSpec(name="left"), {}))
    asyncio.run(provider.start(sb, ["sleep", "300"], cwd="/workspace"))
    server = subprocess.Popen([sys.executable, "-m", "http.server", "-d", str(tmp_path), "0"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    other = tmp_path.parent / f"{tmp_path.name}-other"
    other.mkdir()
    elsewhere = subprocess.Popen(["sleep", "300"], cwd=other)  # not under this root
    try:
        found = processes(tmp_path)
        commands = " ".join(leak.what for leak in found)
        assert "bwrap" in commands and "http.server" in commands
        assert str(elsewhere.pid) not in {leak.ident for leak in found}
        end(found)
        server.wait(10)
        deadline = time.monotonic() + 10
        while processes(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert processes(tmp_path) == []
    finally:
        for proc in (elsewhere, server):
            proc.kill()
            proc.wait()
        asyncio.run(provider.destroy(sb))


def test_the_label_of_a_test_hangars_sandboxes_is_the_one_hangar_gives(tmp_path):
    from app.engine import Engine
    from app.metrics import Metrics
    from app.settings import Settings
    from app.store import Store
    from proxy.tokens import TokenRegistry

    settings = Settings(data_dir=tmp_path / "hangar")
    settings.data_dir.mkdir()
    store = Store(settings.db_path)
    engine = Engine(settings=settings, store=store, auth=None, metrics=Metrics(),
                    tokens=TokenRegistry(settings.db_path))
    assert engine.instance_id == hangar_instance(tmp_path / "hangar")
    store.close()


@pytest.mark.docker
def test_containers_of_a_test_hangar_and_of_a_test_provider_are_found(tmp_path):
    if not shutil.which("docker") or subprocess.run(
            ["docker", "image", "inspect", "hangar-base:1"], capture_output=True).returncode:
        pytest.skip("no Docker engine with hangar-base:1")
    from sandbox.envspec import EnvSpec
    from sandbox.providers.docker import DockerProvider

    data_dir = tmp_path / "hangar"
    data_dir.mkdir()
    (data_dir / "hangar.id").write_text("x")
    spec = EnvSpec(name="left", provider="docker", image="hangar-base:1", network="none")
    providers = [DockerProvider(instance=hangar_instance(data_dir)),  # a test's hangar's
                 DockerProvider(instance=instance_label()),  # a test's own
                 DockerProvider(instance="someone-else")]  # another run's
    made = [asyncio.run(p.create(spec, {})) for p in providers]
    try:
        found = {leak.what.split(" ")[0] for leak in containers(tmp_path)}
        assert found == {f"hangar-{made[0].id}", f"hangar-{made[1].id}"}
    finally:
        for provider, sb in zip(providers, made, strict=True):
            asyncio.run(provider.destroy(sb))
    assert containers(tmp_path) == []
