"""Helpers shared by the sandbox tests (a module name no other test directory uses)."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import hashlib
import io
import json
import shutil
import socket
import subprocess
import tarfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from sandbox import registry as oci
from sandbox.envspec import EnvSpec
from tests.e2e.conftest import free_port

BASE_IMAGE = "hangar-base:1"


def docker_unavailable_reason() -> str | None:
    if not shutil.which("docker"):
        return "the docker CLI is not installed (scripts/setup.sh installs docker.io)"
    probe = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        return "`docker info` failed: no Docker engine answers (scripts/docker-engine.sh)"
    image = subprocess.run(["docker", "image", "inspect", BASE_IMAGE], capture_output=True)
    if image.returncode != 0:
        return f"image {BASE_IMAGE} is missing: run scripts/base-image.sh"
    return None


_DOCKER_REASON: list[str | None] = []


def docker_reason() -> str | None:
    if not _DOCKER_REASON:
        _DOCKER_REASON.append(docker_unavailable_reason())
    return _DOCKER_REASON[0]


def spec_for(provider: str, **fields) -> EnvSpec:
    base: dict = {"name": f"test-{provider}", "provider": provider}
    if provider == "docker":
        base |= {"image": BASE_IMAGE, "network": "loopback"}
    return EnvSpec(**(base | fields))


async def wait_for(predicate: Callable[[], Awaitable[bool]], timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await predicate():
            return True
        await asyncio.sleep(0.05)
    return False


# ---- a registry for kubernetes builds ----------------------------------------------

REGISTRY_USER, REGISTRY_PASSWORD = "hangar", "push-secret"


async def image_removed(client, image_id: str, since: float, timeout: float = 60) -> bool:
    """Whether the docker image is gone, or goes within `timeout`. Every hangar on the
    engine removes dropped builds' images, so another test's may be removing this one as
    this one's hangar looks: its delete is waited for as docker reports it (the events
    since `since` are replayed, so none is missed), not polled."""
    import docker.errors

    def look() -> bool:
        try:
            client.images.get(image_id)
        except docker.errors.ImageNotFound:
            return True
        events = client.events(since=int(since) - 1, until=int(time.time() + timeout) + 1,
                               filters={"type": "image", "event": "delete"}, decode=True)
        try:
            for event in events:
                if event.get("id") == image_id:
                    return True
        finally:
            events.close()
        return False

    return await asyncio.to_thread(look)


@contextlib.contextmanager
def running_registry(root: Path, auth: str) -> Iterator[str]:
    """Debian's docker-registry on a free loopback port, storing under root, with the
    given `auth:` section (YAML flow style); yields host:port."""
    binary = shutil.which("docker-registry")
    if not binary:
        pytest.skip("Debian's docker-registry is not installed (apt-get install docker-registry)")
    port = free_port()
    (root / "config.yml").write_text(
        "version: 0.1\nlog: {level: error}\n"
        f"storage: {{filesystem: {{rootdirectory: {root / 'data'}}}, delete: {{enabled: true}}}}\n"
        f"http: {{addr: '127.0.0.1:{port}', secret: test-only}}\n"
        f"auth: {auth}\n")
    server = subprocess.Popen([binary, "serve", str(root / "config.yml")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    server.kill()
                    pytest.fail(f"docker-registry did not start: {server.stderr.read()[-500:]!r}")
                time.sleep(0.05)
        yield f"127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(10)


def tar_bytes(files: dict[str, bytes]) -> bytes:
    """A tar archive of regular files."""
    plain = io.BytesIO()
    with tarfile.open(fileobj=plain, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return plain.getvalue()


def _gz_layer(files: dict[str, bytes]) -> tuple[bytes, str]:
    raw = tar_bytes(files)
    return gzip.compress(raw, mtime=0), _digest(raw)


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


async def seed_base_image(client: oci.Registry, base: oci.ImageRef, *,
                          marker: bytes = b"base\n") -> dict:
    """An environment image of two layers whose own history has RUN steps."""
    layers = [_gz_layer({"etc/environment-image": marker}),
              _gz_layer({"usr/bin/tool": b"#!/bin/sh\n"})]
    descriptors = []
    for blob, _ in layers:
        await client.upload(base, _digest(blob), lambda blob=blob: blob)
        descriptors.append({"mediaType": oci.OCI_LAYER, "digest": _digest(blob),
                            "size": len(blob)})
    config = json.dumps({
        "architecture": "amd64", "os": "linux", "config": {"User": "1000"},
        "rootfs": {"type": "layers", "diff_ids": [diff for _, diff in layers]},
        "history": [{"created_by": "RUN apt-get install -y tool"}, {"created_by": "COPY x"}],
    }).encode()
    await client.upload(base, _digest(config), lambda: config)
    manifest = {"schemaVersion": 2, "mediaType": oci.OCI_MANIFEST,
                "config": {"mediaType": oci.OCI_CONFIG, "digest": _digest(config),
                           "size": len(config)},
                "layers": descriptors}
    await client.put_manifest(base, json.dumps(manifest).encode(), oci.OCI_MANIFEST)
    return manifest
