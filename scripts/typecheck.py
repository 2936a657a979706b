#!/usr/bin/env python3
"""mypy over app/ and handlers/ (pyproject's [tool.mypy]), held to a baseline that only
shrinks.

scripts/mypy-baseline.txt lists, per file, how many errors mypy still reports there. This
fails when a file has more errors than the baseline allows (new code is typed), and when
the baseline allows more than remain (a fix takes its count off, so the list only
shrinks, as the import-graph test's KNOWN list does). `--update` writes the baseline from
today's errors; use it only to record a fix.

    .venv/bin/python scripts/typecheck.py [--update]
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "scripts" / "mypy-baseline.txt"
ERROR = re.compile(r"^(?P<path>[^:\s]+\.py):\d+(?::\d+)?: error: ")


def errors_per_file(mypy_output: str) -> Counter[str]:
    """How many errors mypy reported in each file."""
    found: Counter[str] = Counter()
    for line in mypy_output.splitlines():
        if match := ERROR.match(line):
            found[match["path"]] += 1
    return found


def read_baseline(text: str) -> Counter[str]:
    allowed: Counter[str] = Counter()
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            count, path = line.split(maxsplit=1)
            allowed[path] = int(count)
    return allowed


def write_baseline(found: Counter[str]) -> str:
    lines = ["# mypy errors per file that remain; scripts/typecheck.py lets this only shrink."]
    lines += [f"{found[path]} {path}" for path in sorted(found)]
    return "\n".join(lines) + "\n"


def compare(found: Counter[str], allowed: Counter[str]) -> list[str]:
    """What is wrong: a file with more errors than allowed, or an allowance not used up."""
    problems = []
    for path in sorted(set(found) | set(allowed)):
        if found[path] > allowed[path]:
            problems.append(f"{path}: {found[path]} mypy errors, the baseline allows "
                            f"{allowed[path]}: type the new code")
        elif found[path] < allowed[path]:
            problems.append(f"{path}: {found[path]} mypy errors left, the baseline still "
                            f"allows {allowed[path]}: take them off (--update)")
    return problems


def main(argv: list[str]) -> int:
    run = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True,
                         text=True)
    if run.returncode not in (0, 1):  # 2: mypy itself failed (a syntax error, bad config)
        sys.stderr.write(run.stdout + run.stderr)
        return 2
    found = errors_per_file(run.stdout)
    if "--update" in argv:
        BASELINE.write_text(write_baseline(found))
        print(f"baseline: {sum(found.values())} errors in {len(found)} files")
        return 0
    allowed = read_baseline(BASELINE.read_text()) if BASELINE.exists() else Counter()
    problems = compare(found, allowed)
    if problems:
        gained = {path for path in found if found[path] > allowed[path]}
        sys.stdout.write("".join(line + "\n" for line in run.stdout.splitlines()
                                 if (m := ERROR.match(line)) and m["path"] in gained))
        print("\n".join(problems))
        return 1
    print(f"mypy: {sum(found.values())} known errors in {len(found)} files, none new")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
