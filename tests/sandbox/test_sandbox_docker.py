"""What only the docker provider does: how its containers are locked down, its networks,
and its errors. Against a real engine, like the shared behaviour tests."""

from __future__ import annotations

import secrets
import socket

import pytest
from sandbox_helpers import docker_reason, spec_for

from sandbox.provider import SandboxError
from tests.leaks import instance_label

# One worker for the file: its tests share the label `hangar.test=docker-only`, and those
# that check nothing is left would see another's sandbox made at the same time.
pytestmark = [pytest.mark.docker, pytest.mark.xdist_group("docker-only")]


@pytest.fixture
async def docker_provider():
    reason = docker_reason()
    if reason:
        pytest.skip(reason)
    from sandbox.providers.docker import DockerProvider

    provider = DockerProvider(instance=instance_label())
    yield provider
    for sb in await provider.list({"hangar.test": "docker-only"}):
        await provider.destroy(sb)


async def test_container_is_locked_down_and_labelled(docker_provider):
    spec = spec_for("docker", resources={"cpus": 1, "memory_mb": 256, "pids": 64})
    sb = await docker_provider.create(spec, {"hangar.test": "docker-only", "job": "j-9"})
    container = docker_provider.client.containers.get(sb.ref["container"])
    host = container.attrs["HostConfig"]
    assert host["Privileged"] is False
    assert host["CapDrop"] == ["ALL"] and not host.get("CapAdd")
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert host["ReadonlyRootfs"] is True
    assert host["PidsLimit"] == 64
    assert host["Memory"] == 256 * 1024 * 1024
    assert host["NanoCpus"] == 1_000_000_000
    assert host["NetworkMode"] == "none"
    assert container.labels["hangar.sandbox"] == sb.id
    assert container.labels["job"] == "j-9"
    assert container.labels["hangar.instance"] == docker_provider.instance
    # Another hangar on the same engine does not see this sandbox.
    from sandbox.providers.docker import DockerProvider

    assert await DockerProvider(instance="someone-else").list({"job": "j-9"}) == []
    assert [s.id for s in await docker_provider.list({"job": "j-9"})] == [sb.id]
    result = await docker_provider.run(sb, ["sh", "-c", "id -u; grep CapEff /proc/self/status"])
    caps = result.output.split("\n")[1]
    assert caps.split()[1] == "0000000000000000"  # no capabilities at all, even as root


async def test_network_none_and_loopback_reach_no_service_on_the_hosts_loopback(docker_provider):
    """loopback without a gate is none: the gate is the one thing it adds (test_sandbox_reach)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    port = server.getsockname()[1]
    probe = [
        "python3", "-c",
        "import socket, sys\n"
        "try:\n"
        "    socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=3)\n"
        "    print('reached')\n"
        "except OSError:\n"
        "    print('unreachable')",
        str(port),
    ]  # fmt: skip
    try:
        loopback = await docker_provider.create(
            spec_for("docker", network="loopback"), {"hangar.test": "docker-only"}
        )
        closed = await docker_provider.create(
            spec_for("docker", network="none"), {"hangar.test": "docker-only"}
        )
        for sb in (loopback, closed):
            assert (await docker_provider.run(sb, probe)).output.strip() == "unreachable"
            inspect = docker_provider.client.containers.get(sb.ref["container"]).attrs
            assert inspect["HostConfig"]["NetworkMode"] == "none"
    finally:
        server.close()


async def test_missing_image_says_how_to_build_it(docker_provider):
    spec = spec_for("docker", image="hangar-base:does-not-exist")
    with pytest.raises(SandboxError, match="is not present in the Docker engine"):
        await docker_provider.create(spec, {"hangar.test": "docker-only"})
    # Nothing is left behind: no container, no volume.
    assert await docker_provider.list({"hangar.test": "docker-only"}) == []
    assert docker_provider.client.volumes.list(filters={"label": "hangar.test=docker-only"}) == []


async def test_a_container_that_stops_before_it_is_ready_is_an_error_and_leaves_nothing(
        docker_provider, tmp_path):
    """pid 1 never says it is ready (here the relay cannot bind its port and exits): the
    create fails with what the container said, and no container or volume is left."""
    from sandbox.providers.docker import DockerProvider

    broken = DockerProvider(instance=docker_provider.instance, proxy_port=70000,
                            gate_dir=tmp_path)  # fmt: skip
    with pytest.raises(SandboxError, match="stopped at once") as raised:
        await broken.create(spec_for("docker"), {"hangar.test": "docker-only"})
    assert "port must be 0-65535" in str(raised.value)
    assert await docker_provider.list({"hangar.test": "docker-only"}) == []
    assert docker_provider.client.volumes.list(filters={"label": "hangar.test=docker-only"}) == []


async def test_the_next_start_ends_containers_whose_hangar_is_gone(docker_provider, tmp_path):
    """A container binds its hangar's gate directory; once that hangar's data directory is
    removed for good, the next hangar's start removes the container and its volume."""
    import docker.errors

    from sandbox.providers.docker import DockerProvider

    gate = tmp_path / "gone" / "sandbox-gate"
    gate.mkdir(parents=True)
    gone = DockerProvider(instance=f"test-gone-{secrets.token_hex(4)}", proxy_port=9,
                          gate_dir=gate)
    sb = await gone.create(spec_for("docker"), {"hangar.test": "docker-only"})
    live_gate = tmp_path / "live" / "sandbox-gate"
    live_gate.mkdir(parents=True)
    alive = DockerProvider(instance=docker_provider.instance, proxy_port=9, gate_dir=live_gate)
    live = await alive.create(spec_for("docker"), {"hangar.test": "docker-only"})
    try:
        gate.rmdir()
        ended = await DockerProvider(instance="test-next").end_abandoned()
        assert sb.id in ended and live.id not in ended
        with pytest.raises(docker.errors.NotFound):
            gone.client.containers.get(sb.ref["container"])
        with pytest.raises(docker.errors.NotFound):
            gone.client.volumes.get(sb.ref["volume"])
        assert docker_provider.client.containers.get(live.ref["container"]).status == "running"
    finally:
        await gone.destroy(sb)


async def test_a_container_removed_as_the_sandboxes_are_listed_is_left_out(
        docker_provider, monkeypatch):
    """The engine lists, then looks at each container: one a destroy beside the listing
    removed in between is not there, not an error for the whole list (the reaper's)."""
    sb = await docker_provider.create(spec_for("docker"), {"hangar.test": "docker-only"})
    listed = docker_provider.client.api.containers
    monkeypatch.setattr(docker_provider.client.api, "containers", lambda *args, **kwargs: [
        {"Id": secrets.token_hex(32)}, *listed(*args, **kwargs)])
    assert [s.id for s in await docker_provider.list({"hangar.test": "docker-only"})] == [sb.id]
