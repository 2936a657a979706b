"""The mypy baseline only shrinks: a file that gains an error fails, and so does a
baseline that still allows errors that are gone."""

from __future__ import annotations

import importlib.util
from collections import Counter
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "typecheck.py"
spec = importlib.util.spec_from_file_location("typecheck", SCRIPT)
typecheck = importlib.util.module_from_spec(spec)
spec.loader.exec_module(typecheck)

OUTPUT = """\
app/engine.py:12: error: "BaseModel" has no attribute "id"  [attr-defined]
app/engine.py:30:5: error: Incompatible types in assignment  [assignment]
app/engine.py:31: note: See https://mypy.readthedocs.io
app/store.py:7: error: Item "None" of "Row | None" has no attribute "x"  [union-attr]
Found 3 errors in 2 files (checked 2 source files)
"""


def test_errors_are_counted_per_file_and_notes_are_not_errors():
    assert typecheck.errors_per_file(OUTPUT) == Counter({"app/engine.py": 2, "app/store.py": 1})


def test_the_baseline_reads_back_what_it_wrote():
    found = Counter({"app/engine.py": 2, "app/store.py": 1})
    assert typecheck.read_baseline(typecheck.write_baseline(found)) == found


def test_a_file_that_gains_an_error_fails():
    problems = typecheck.compare(Counter({"app/engine.py": 3}), Counter({"app/engine.py": 2}))
    assert problems and "app/engine.py: 3 mypy errors" in problems[0]


def test_a_new_file_with_an_error_fails():
    assert typecheck.compare(Counter({"app/new.py": 1}), Counter()) != []


def test_a_baseline_that_allows_more_than_remain_fails():
    problems = typecheck.compare(Counter({"app/engine.py": 1}), Counter({"app/engine.py": 2}))
    assert problems and "take them off" in problems[0]
    assert typecheck.compare(Counter(), Counter({"app/store.py": 1})) != []


def test_the_same_errors_pass():
    same = Counter({"app/engine.py": 2})
    assert typecheck.compare(same, Counter(same)) == []


def test_the_committed_baseline_reads():
    allowed = typecheck.read_baseline((SCRIPT.parent / "mypy-baseline.txt").read_text())
    assert allowed and all(count > 0 for count in allowed.values())
