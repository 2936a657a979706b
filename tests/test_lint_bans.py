"""What ruff refuses in hangar's own code, checked on a sample: a ban that quietly went
missing from pyproject.toml would fail nothing until someone used the banned call."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
USES_WAIT_FOR = "import asyncio\n\n\nasync def f(c):\n    await asyncio.wait_for(c, 1)\n"


def lint(source: str, as_path: str) -> str:
    """ruff's findings on `source`, linted as if it were the file at `as_path`."""
    found = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise",
         "--stdin-filename", as_path, "-"],
        input=source, capture_output=True, text=True, cwd=ROOT, timeout=60)
    return found.stdout


def test_asyncio_wait_for_is_refused_in_hangars_code_and_allowed_in_tests():
    """Python 3.11's wait_for drops a cancel that comes as its awaitable finishes
    (pyproject.toml says why); hangar waits with `async with asyncio.timeout(...)`."""
    for package in ("app", "sandbox", "proxy", "fakehub", "handlers"):
        assert "TID251" in lint(USES_WAIT_FOR, f"{package}/sample.py"), package
    assert "TID251" not in lint(USES_WAIT_FOR, "tests/sample.py")
