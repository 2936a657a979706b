"""Shared fixtures. Each area keeps its own fixtures in its own conftest or plugin."""

import pytest

pytest_plugins = ["fakehub.pytest_plugin", "tests.postgres"]

# Where the suite's time goes, slowest first: end-to-end files with a test marked slow,
# then the other end-to-end and sandbox files, then the rest (milliseconds each).
_SLOW_FOLDERS = ("e2e", "sandbox")


def pytest_collection_modifyitems(config, items):
    """The slowest files first. pytest-xdist hands tests out in collection order (its
    groups ahead of them), so a slow test collected last starts when the other workers
    are nearly done and the run waits for it alone; the fast ones now fill the gaps at
    the end. A file's tests stay together, in their order."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}

    def rank(item) -> int:
        if item.path in slow_files:
            return 0
        return 1 if item.path.parent.name in _SLOW_FOLDERS else 2

    items.sort(key=rank)


def hangar_permissions() -> dict[str, str]:
    """What hangar's App manifest asks for: every test's App is granted exactly this."""
    import json
    from pathlib import Path

    manifest = Path(__file__).resolve().parents[1] / "manifests" / "github-app.json"
    return dict(json.loads(manifest.read_text())["default_permissions"])


@pytest.fixture(scope="session", autouse=True)
def nothing_left_running(tmp_path_factory):
    """The run fails when a sandbox, a server or a container a test started outlives it
    (each xdist worker checks its own temporary directory); what is found is then ended."""
    yield
    from tests.leaks import end, survivors

    leaked = survivors(tmp_path_factory.getbasetemp())
    end(leaked)
    assert not leaked, "left running by the tests (a test that starts it must end it):\n" + \
        "\n".join(f"  {leak}" for leak in leaked)


@pytest.fixture(autouse=True)
def secrets_of_this_test_only():
    """The secrets a test's hangars remember (each its own App key, webhook secret, API
    token) are forgotten after it: in one process the registry would otherwise grow test
    by test, and with it the time each later hangar takes to start and to log. So are
    the places they remember (each its own data directory)."""
    from app.redact import KNOWN, PLACES

    before, places = KNOWN.known(), PLACES.known()
    yield
    KNOWN.keep_only(before)
    PLACES.keep_only(places)
