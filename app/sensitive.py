"""Which changed files are sensitive: the repository's `land.sensitive_paths` patterns
(gitignore-like) over a compare's or a pull request's file list. Pure; collecting a run
records them, and landing asks for an acknowledgement of them.
"""

from __future__ import annotations

from proxy.policy import sensitive_paths

COMPARE_FILES = 300  # GitHub's compare lists at most this many files
UNSEEN = "(files GitHub did not list)"  # stands for them where sensitive paths are named


def sensitive_files(compare: dict | None, patterns: list[str]) -> list[str]:
    """Changed files that match the policy's sensitive paths (gitignore-like patterns).
    A compare cut at GitHub's limit may hide more: UNSEEN says so."""
    if not compare:
        return []
    files = compare.get("files", [])
    return sensitive_names(files, patterns) + ([UNSEEN] if len(files) >= COMPARE_FILES else [])


def sensitive_names(files: list[dict], patterns: list[str]) -> list[str]:
    """The names (and a rename's old name) among files that match the patterns."""
    names = [n for f in files for n in (f.get("filename"), f.get("previous_filename")) if n]
    return sensitive_paths(list(dict.fromkeys(names)), [_gitignore_style(p) for p in patterns])


def _gitignore_style(pattern: str) -> str:
    """As in .gitignore: a pattern without a slash matches a name at any depth, a leading
    slash anchors it at the top, and a trailing slash means everything under a directory."""
    if "/" not in pattern.rstrip("/"):
        pattern = "**/" + pattern
    pattern = pattern.lstrip("/")
    if pattern.endswith("/"):
        pattern += "**"
    return pattern
