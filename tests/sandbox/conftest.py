"""Fixtures for the sandbox tests: the same behaviour tests run against every provider
that can run here (local with real bubblewrap; docker against a real engine)."""

from __future__ import annotations

import shutil
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from sandbox_helpers import (
    REGISTRY_PASSWORD,
    REGISTRY_USER,
    docker_reason,
    running_registry,
    spec_for,
)

from sandbox.provider import Provider, Sandbox
from tests.leaks import instance_label


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """Stands in for hangar's data dir: keys and the database live here."""
    path = tmp_path / "hangar-data"
    path.mkdir()
    (path / "app-key.pem").write_text("-----BEGIN FAKE KEY-----\nsecret\n")
    return path


@pytest.fixture(
    params=[
        pytest.param("local", marks=pytest.mark.bwrap),
        pytest.param("docker", marks=pytest.mark.docker),
    ]
)
async def provider(request, tmp_path: Path, data_dir: Path) -> AsyncIterator[Provider]:
    name = request.param
    if name == "local":
        if not shutil.which("bwrap"):
            pytest.skip("bubblewrap is not installed (apt-get install bubblewrap)")
        from sandbox.providers.local import LocalProvider

        made: Provider = LocalProvider(root=tmp_path / "sandboxes", hidden_paths=[data_dir])
    else:
        reason = docker_reason()
        if reason:
            pytest.skip(reason)
        from sandbox.providers.docker import DockerProvider

        made = DockerProvider(instance=instance_label())
    yield made
    for sb in await made.list({"hangar.test": "1"}):
        await made.destroy(sb)


@pytest.fixture
def make_sandbox(provider: Provider) -> Callable[..., Awaitable[Sandbox]]:
    async def make(labels: dict[str, str] | None = None, **fields) -> Sandbox:
        spec = spec_for(provider.name, **fields)
        return await provider.create(spec, {"hangar.test": "1", **(labels or {})})

    return make


@pytest.fixture(scope="session")
def registry_host(tmp_path_factory):
    """A registry that asks for a password (htpasswd, Basic)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt
    root = tmp_path_factory.mktemp("registry")
    hashed = crypt.crypt(REGISTRY_PASSWORD, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16))
    (root / "htpasswd").write_text(f"{REGISTRY_USER}:{hashed}\n")
    auth = f"{{htpasswd: {{realm: hangar-test, path: {root / 'htpasswd'}}}}}"
    with running_registry(root, auth) as host:
        yield host
