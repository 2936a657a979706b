"""hangar's own image builds offline from a local base, runs as non-root with git and
bubblewrap, and serves (the setup page, as nothing is configured yet)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

# One build for the module: its tests run on one worker (scripts/test.sh: --dist loadgroup).
pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.xdist_group("image")]

ROOT = Path(__file__).resolve().parents[2]
# Tags of this run only (tests may run side by side), removed afterwards.
IMAGE = f"hangar:test-{os.getpid()}"
# The documented default: scripts/image.sh with no base builds FROM the project's own
# base, made offline by scripts/base-image.sh when missing (kept: it is a cache).
BASE = "hangar-image-base:1"
CACHE = "hangar:test-cache"


def docker(*args: str, timeout: float = 300, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout,
                          **kwargs)


@pytest.fixture(scope="module")
def image() -> Iterator[str]:
    if shutil.which("docker") is None or docker("info").returncode != 0:
        pytest.skip("no Docker engine")
    try:
        # exactly what docs/operating.md says, with only the tag of this run
        made = subprocess.run([str(ROOT / "scripts" / "image.sh"), IMAGE], cwd=ROOT,
                              capture_output=True, text=True, timeout=900)
        assert made.returncode == 0, made.stdout + made.stderr
        log = (ROOT / "build" / "image.log").read_text()
        assert "apt-get" not in log or "Reading package lists" not in log, log[-2000:]
        yield IMAGE
    finally:
        keep_as_cache(IMAGE)


def keep_as_cache(image: str) -> None:
    """Untag this run's image, keeping its layers as the next build's cache under CACHE:
    the dependencies' layer is then built again only when they change. The build kept
    before it goes, but for the layers the two share."""
    before = docker("image", "inspect", "--format", "{{.Id}}", CACHE).stdout.strip()
    docker("tag", image, CACHE)
    docker("rmi", image)
    if before and before != docker("image", "inspect", "--format", "{{.Id}}",
                                   CACHE).stdout.strip():
        docker("rmi", before)


def run(image: str, *argv: str, entrypoint: str | None = None) -> subprocess.CompletedProcess:
    args = ["run", "--rm", "--network", "none"]
    if entrypoint:
        args += ["--entrypoint", entrypoint]
    return docker(*args, image, *argv, timeout=120)


def test_the_image_runs_as_non_root_with_git_and_bubblewrap(image):
    user = docker("image", "inspect", "--format", "{{.Config.User}}", image).stdout.strip()
    assert user and not user.startswith(("0", "root"))
    probe = run(image, "-c", "id -u; git --version; bwrap --version; "
                "python -c 'import app.wiring, docker, kubernetes; print(\"imports ok\")'",
                entrypoint="sh")
    assert probe.returncode == 0, probe.stderr
    lines = probe.stdout.splitlines()
    assert lines[0] == "10001"
    assert lines[1].startswith("git version") and lines[2].startswith("bubblewrap")
    assert lines[3] == "imports ok"
    assert "usage: hangar" in run(image, "--help").stdout


def test_the_image_serves_the_setup_page_when_nothing_is_configured(image):
    from tests.e2e.conftest import free_port

    port = free_port()
    # hangar is not a sandbox: on the host network it listens on loopback only.
    started = docker("run", "-d", "--rm", "--network", "host", "-e", "HANGAR_HOST=127.0.0.1",
                     "-e", f"HANGAR_PORT={port}", image)
    assert started.returncode == 0, started.stderr
    container = started.stdout.strip()
    try:
        deadline = time.monotonic() + 30
        while True:
            logs = docker("logs", container)
            found = re.search(r"Open (http://\S+) in a browser", logs.stdout + logs.stderr)
            try:
                assert found, "no setup link yet"
                with urllib.request.urlopen(found.group(1), timeout=2) as r:
                    page = r.read().decode()
                break
            except (OSError, AssertionError):
                assert time.monotonic() < deadline, logs.stdout + logs.stderr
                time.sleep(0.3)
        assert "Register the GitHub App" in page
    finally:
        docker("rm", "-f", container)


def test_the_image_is_small(image):
    size = int(docker("image", "inspect", "--format", "{{.Size}}", image).stdout)
    base = int(docker("image", "inspect", "--format", "{{.Size}}", BASE).stdout)
    assert size - base < 250 * 2**20, f"hangar adds {(size - base) >> 20} MiB to its base"
