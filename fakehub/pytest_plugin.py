"""pytest fixture `fakehub`: a running fakehub per test, driven synchronously.

Enable with `pytest_plugins = ["fakehub.pytest_plugin"]` in a conftest.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fakehub.driver import Driver
from fakehub.testing import running_fakehub


@pytest.fixture
def fakehub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Driver]:
    with running_fakehub(tmp_path_factory.mktemp("fakehub")) as driver:
        yield driver
