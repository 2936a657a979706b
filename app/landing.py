"""Landing hangar's pull requests once a human approves the exact head.

(Work in progress: this module currently holds the pieces the run pipeline needs.)
"""

from __future__ import annotations

import fnmatch
from typing import TYPE_CHECKING

from app.models import Intent

if TYPE_CHECKING:
    from app.engine import Engine
    from app.ghops import RepoOps
    from app.payloads import PullRequestEvent, PullRequestReviewEvent


def sensitive_files(compare: dict | None, patterns: list[str]) -> list[str]:
    """Changed files that match the policy's sensitive paths (`**` crosses directories)."""
    if not compare:
        return []
    names = [f["filename"] for f in compare.get("files", [])]
    return [n for n in names if any(_matches(n, p) for p in patterns)]


def _matches(path: str, pattern: str) -> bool:
    if pattern.endswith("/**"):
        return path.startswith(pattern[:-2])
    if "/" not in pattern:
        return fnmatch.fnmatchcase(path.rsplit("/", 1)[-1], pattern)
    return fnmatch.fnmatchcase(path, pattern)


def poll(engine: Engine) -> None:
    return None


def record_review(engine: Engine, event: PullRequestReviewEvent) -> None:
    return None


def record_pull_request(engine: Engine, event: PullRequestEvent) -> None:
    return None


def record_ci(engine: Engine, repo: str, head_sha: str) -> None:
    return None


async def handle_command(engine: Engine, ops: RepoOps, intent: Intent) -> str:
    from app.intents import reply

    await reply(ops, intent, f"`/hangar {intent.command}` is not available yet.")
    return "not available"
