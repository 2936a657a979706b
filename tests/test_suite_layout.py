"""The suite's own shape: pytest imports test files by basename (the folders have no
__init__.py), so two files with one name in two folders stop the whole run at collection."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).parent


def test_every_test_file_has_a_basename_of_its_own():
    places: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        if "__pycache__" in path.parts:
            continue
        places[path.name].append(str(path.relative_to(TESTS)))
    shared = {name: sorted(where) for name, where in places.items() if len(where) > 1}
    assert shared == {}, f"rename one of each: {shared}"
