"""hangar's own bare copy of a repository, for what only git can answer: whether two
commits merge, and in which files they conflict (`git merge-tree --write-tree`, the merge
GitHub itself makes), and whether a head is exactly a clean update of another.

The copy is fetched with the installation's token (read-only, this repository only) and
never checked out: no hook, filter or merge driver of the repository runs, and nothing of
its content is executed on the control plane. Work that runs the repository's own tools
happens in a sandbox (the land worker, app/landing/worker.py).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.landing.context import LandingContext

GIT_TIMEOUT_S = 300
# Every git call: no hooks, no fsmonitor, no credential prompt, no system or user config.
SAFE = ["-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false",
        "-c", "protocol.file.allow=never"]


class MirrorError(Exception):
    """git could not fetch or answer (the message is git's, for operators)."""


@dataclass(frozen=True)
class Merge:
    """What `git merge-tree --write-tree` says of merging two commits."""

    clean: bool
    tree: str | None
    conflicts: tuple[str, ...] = ()  # files with conflicts, each once, in git's order


def mirror_path(data_dir: Path, repo: str) -> Path:
    owner, name = repo.split("/", 1)
    return Path(data_dir) / "mirrors" / owner / f"{name}.git"


async def _git(path: Path, *args: str, env: dict[str, str] | None = None,
               ok: tuple[int, ...] = (0,)) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        "git", *SAFE, *args, cwd=path, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env={**_base_env(), **(env or {})})
    try:
        async with asyncio.timeout(GIT_TIMEOUT_S):
            out, err = await proc.communicate()
    except BaseException as exc:  # a timeout, or the step cancelled: no git left behind
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        if isinstance(exc, GeneratorExit):  # closed unfinished, its loop gone: no wait
            raise
        await proc.wait()
        if isinstance(exc, TimeoutError):
            raise MirrorError(f"git {args[0]} took longer than {GIT_TIMEOUT_S} s") from None
        raise
    if proc.returncode not in ok:
        raise MirrorError(f"git {args[0]} failed ({proc.returncode}): "
                          f"{err.decode(errors='replace')[-500:]}")
    return proc.returncode, out.decode(errors="replace")


def _base_env() -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_TERMINAL_PROMPT": "0",
            "GIT_CONFIG_NOSYSTEM": "1", "HOME": "/nonexistent", "LC_ALL": "C"}


async def fetched(engine: LandingContext, *, repo: str, clone_url: str, installation_id: int,
                  refs: list[str]) -> Path:
    """The mirror of `repo` with `refs` (branch names) fetched as they are on GitHub now;
    one fetch at a time per repository."""
    path = mirror_path(engine.settings.data_dir, repo)
    async with engine.lock(f"mirror:{repo}"):
        if not (path / "HEAD").exists():
            path.mkdir(parents=True, exist_ok=True)
            await _git(path, "init", "-q", "--bare")
        token = await engine.github.installation_token(
            installation_id, repository=repo, permissions={"contents": "read"})
        basic = base64.b64encode(f"x-access-token:{token.token}".encode()).decode()
        # The token goes in the environment, never on a command line others can read.
        env = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "http.extraHeader",
               "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}"}
        specs = [f"+refs/heads/{ref}:refs/heads/{ref}" for ref in dict.fromkeys(refs)]
        await _git(path, "fetch", "-q", "--no-tags", "--no-write-fetch-head",
                   "--no-auto-gc", clone_url, *specs, env=env)
    return path


async def merge(path: Path, ours: str, theirs: str) -> Merge:
    """Merge `theirs` into `ours` as GitHub would (merge-ort), in memory."""
    code, out = await _git(path, "merge-tree", "--write-tree", "--name-only", "--no-messages",
                           ours, theirs, ok=(0, 1))
    lines = out.splitlines()
    tree = lines[0].strip() if lines else None
    if code == 0:
        return Merge(True, tree)
    files = [line for line in lines[1:] if line.strip()]
    return Merge(False, tree, tuple(dict.fromkeys(files)))


async def commit_tree(path: Path, tree: str, *, parent: str) -> str:
    """A commit of `tree` on `parent` in the mirror (what a squash merge would make), to
    merge against; it is never pushed anywhere."""
    who = {"GIT_AUTHOR_NAME": "hangar", "GIT_AUTHOR_EMAIL": "land@hangar.invalid",
           "GIT_COMMITTER_NAME": "hangar", "GIT_COMMITTER_EMAIL": "land@hangar.invalid"}
    _, out = await _git(path, "commit-tree", tree, "-p", parent, "-m", "prediction", env=who)
    return out.strip()


async def tree_of(path: Path, commit: str) -> str:
    _, out = await _git(path, "rev-parse", f"{commit}^{{tree}}")
    return out.strip()


async def parents_of(path: Path, commit: str) -> list[str]:
    _, out = await _git(path, "rev-list", "--parents", "-n", "1", commit)
    return out.split()[1:]


async def is_ancestor(path: Path, older: str, newer: str) -> bool:
    code, _ = await _git(path, "merge-base", "--is-ancestor", older, newer, ok=(0, 1))
    return code == 0


async def clean_update_of(path: Path, head: str, old: str, base: str) -> bool:
    """Whether `head` is exactly GitHub's clean update of `old` from `base` (branch name):
    a merge commit of `old` and a commit of the base whose tree is git's clean merge of
    the two, and nothing else (an edit hidden in a merge commit is not an update)."""
    parents = await parents_of(path, head)
    if len(parents) != 2 or parents[0] != old:
        return False
    if not await is_ancestor(path, parents[1], base):
        return False
    merged = await merge(path, old, parents[1])
    return merged.clean and merged.tree == await tree_of(path, head)
