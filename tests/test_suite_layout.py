"""The suite's own shape: pytest imports test files by basename (the folders have no
__init__.py), so two files with one name in two folders stop the whole run at collection."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

TESTS = Path(__file__).parent


def test_every_test_file_has_a_basename_of_its_own():
    places: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        if "__pycache__" in path.parts:
            continue
        places[path.name].append(str(path.relative_to(TESTS)))
    shared = {name: sorted(where) for name, where in places.items() if len(where) > 1}
    assert shared == {}, f"rename one of each: {shared}"


@pytest.mark.xdist_group("probe")
def test_a_group_runs_on_one_worker(request):
    """Under `--dist loadgroup` (scripts/test.sh), pytest-xdist names each test marked
    `xdist_group` with its group and sends the group to one worker: the image tests build
    hangar's image once so. A pytest that ignores the renaming (9.2 with xdist 3.8) spreads
    the group, and every worker built the image at the same time."""
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not run under --dist loadgroup")
    assert request.node.nodeid.endswith("@probe"), (
        "pytest-xdist could not name the group: this pytest and pytest-xdist do not work "
        "together (pyproject.toml pins pytest for it)")
