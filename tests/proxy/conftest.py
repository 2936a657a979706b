"""Fixtures for the proxy tests: one fakehub and one proxy per module, real git."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from proxy_harness import FakehubUpstream, ProxyThread, World

from proxy import TokenRegistry


@pytest.fixture(scope="module")
def _fakehub_module(tmp_path_factory) -> Iterator[object]:
    fakehub_testing = pytest.importorskip("fakehub.testing")
    with fakehub_testing.running_fakehub(tmp_path_factory.mktemp("fakehub")) as hub:
        yield hub


@pytest.fixture(scope="module")
def world(_fakehub_module, tmp_path_factory) -> Iterator[World]:
    """One fakehub, one App installed on octo/widgets, the proxy in front of it (cap 1 MiB)."""
    hub = _fakehub_module
    app = hub.create_app("hangar")
    hub.create_user("octo")
    hub.create_repo("octo", "widgets")
    installation_id = hub.install(app.id, "octo")
    tmp = tmp_path_factory.mktemp("proxy-e2e")
    registry = TokenRegistry(tmp / "hangar.db")
    upstream = FakehubUpstream(hub.base_url, hub.api_url, app.id, app.private_key_pem)
    with ProxyThread(registry, upstream, max_push_bytes=2**20) as proxy:
        yield World(hub, registry, proxy, "octo/widgets", installation_id, tmp, upstream)
