"""Helpers shared by the sandbox tests (a module name no other test directory uses)."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections.abc import Awaitable, Callable

from sandbox.envspec import EnvSpec

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
        base |= {"image": BASE_IMAGE, "network": "host"}
    return EnvSpec(**(base | fields))


async def wait_for(predicate: Callable[[], Awaitable[bool]], timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await predicate():
            return True
        await asyncio.sleep(0.05)
    return False
