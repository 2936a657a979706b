"""CODEOWNERS as GitHub reads it: the first of `.github/`, the root and `docs/` that has
one, gitignore-style patterns, the last matching line decides a file's owners."""

from __future__ import annotations

import re
from pathlib import Path

from fakehub import gitrepo

PLACES = (".github/CODEOWNERS", "CODEOWNERS", "docs/CODEOWNERS")


def read(repo_path: Path, rev: str) -> list[tuple[re.Pattern[str], list[str]]] | None:
    """The CODEOWNERS rules at `rev`, or None when there is no CODEOWNERS file."""
    for place in PLACES:
        found = gitrepo.read_blob(repo_path, rev, place)
        if found is not None:
            return parse(found[0].decode("utf-8", "replace"))
    return None


def parse(text: str) -> list[tuple[re.Pattern[str], list[str]]]:
    rules = []
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if line and not line.startswith("#"):
            pattern, *owners = line.split()
            rules.append((_regex(pattern), owners))
    return rules


def _regex(pattern: str) -> re.Pattern[str]:
    anchored = pattern.startswith("/") or "/" in pattern.rstrip("/")
    text = re.escape(pattern.strip("/"))
    text = (text.replace(r"\*\*/", "(?:.*/)?").replace(r"/\*\*", "/.*")
            .replace(r"\*\*", ".*").replace(r"\*", "[^/]*").replace(r"\?", "[^/]"))
    tail = "/.*" if pattern.endswith("/") else "(?:/.*)?"
    return re.compile(("^" if anchored else "^(?:.*/)?") + text + tail + "$")


def owners(rules: list[tuple[re.Pattern[str], list[str]]], path: str) -> list[str]:
    for regex, named in reversed(rules):
        if regex.match(path):
            return named
    return []
