"""The instructions every prompt of a repository carries besides its request: the
operator's own (the environment's `instructions:`) and the repository's
(`.github/hangar.yml` `instructions:`, a short text or the path of a file in it). Each is
recorded on the run, so the job's view shows what the agent was told."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from app.github.ops import RepoOps
from app.repoconfig import parse_repo_config

if TYPE_CHECKING:
    from app.runs.context import RunsContext

FILE_MAX_CHARS = 8_000
# A value that is one path-like token ending in .md or .txt names a file in the repository.
_PATH = re.compile(r"^[\w./-]+\.(md|txt)$")


def is_path(value: str) -> bool:
    return bool(_PATH.match(value.strip())) and ".." not in value


async def read_instructions(engine: RunsContext, ops: RepoOps, base: str,
                            base_sha: str | None, spec: Any) -> dict[str, str]:
    """{"environment": …, "repository": …}, each only when there is one."""
    found: dict[str, str] = {}
    if spec.instructions and spec.instructions.strip():
        found["environment"] = spec.instructions.strip()
    config, _ = parse_repo_config(await engine.github.config_text(ops, base, base_sha))
    value = (config.instructions or "").strip()
    if value and is_path(value):
        text = await engine.github.config_text(ops, base, base_sha, path=value.lstrip("/"))
        value = (text or "").strip()[:FILE_MAX_CHARS]
    if value:
        found["repository"] = value
    return found


def instructions_prompt(instructions: dict[str, str]) -> str:
    parts = []
    if "environment" in instructions:
        parts += ["Instructions from hangar's operator for this environment:",
                  instructions["environment"], ""]
    if "repository" in instructions:
        parts += ["Instructions from the repository (.github/hangar.yml):",
                  instructions["repository"], ""]
    return "\n".join(parts)
