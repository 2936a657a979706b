"""Environment builds, the pure part: keys, which build a sandbox starts from, when to rebuild.

A build is the environment's image, the default branch cloned, `install` run, and the
checkout kept. Whether a repository needs a new one is decided here from plain data (the
build history and the key of what the default branch asks for now), so the rules are
tested by tables; running a build is the engine's and the providers' business.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import PurePosixPath

# Lockfiles watched anywhere in the repository; a repository adds its own with `lockfiles:`.
LOCKFILE_NAMES = frozenset({
    "package-lock.json", "npm-shrinkwrap.json", "pnpm-lock.yaml", "yarn.lock", "bun.lock",
    "bun.lockb", "uv.lock", "poetry.lock", "Pipfile.lock", "pdm.lock", "Cargo.lock", "go.sum",
    "Gemfile.lock", "composer.lock", ".tool-versions", "mise.toml", "flake.lock",
})
LOCKFILE_PATTERNS = ("requirements*.txt", "constraints*.txt")

DEFAULT_KEEP = 5
DEFAULT_SNAPSHOT_MAX_MB = 512


class BuildState(StrEnum):
    queued = "queued"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    gone = "gone"  # it succeeded, but what it kept is no longer there: rebuilt


class Fallback(StrEnum):
    """Why a sandbox starts from the environment's bare image."""

    no_install = "the environment has no install step"
    none_yet = "no build has finished yet"
    latest_failed = "the only builds there are failed"
    build_gone = "the environment build was missing (it is being rebuilt)"


def is_lockfile(path: str, extra: Sequence[str] = ()) -> bool:
    """A path the build key watches: a common lockfile anywhere, or one of `extra`.

    `extra` entries are repository-relative paths or globs (`*` does not cross `/`).
    """
    name = PurePosixPath(path).name
    if name in LOCKFILE_NAMES or any(fnmatch.fnmatchcase(name, p) for p in LOCKFILE_PATTERNS):
        return True
    return any(_path_match(path, pattern) for pattern in extra)


def _path_match(path: str, pattern: str) -> bool:
    pattern = pattern.strip().lstrip("/")
    parts, pats = path.split("/"), pattern.split("/")
    return len(parts) == len(pats) and all(
        fnmatch.fnmatchcase(part, pat) for part, pat in zip(parts, pats, strict=True)
    )


def lockfile_grep(extra: Sequence[str] = ()) -> str:
    """An extended regex for `git ls-tree -r -z … | grep -zE` that keeps lockfile entries.

    A superset filter, so a big tree's listing stays small; `is_lockfile` decides.
    """
    names = [re.escape(n) for n in sorted(LOCKFILE_NAMES)]
    names += [_glob_ere(p) for p in LOCKFILE_PATTERNS]
    names += [_glob_ere(PurePosixPath(p.strip().lstrip("/")).name) for p in extra if p.strip()]
    return "\t(.*/)?(" + "|".join(names) + ")$"


def _glob_ere(pattern: str) -> str:
    return "".join("[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c)
                   for c in pattern)


def parse_ls_tree(text: str) -> list[tuple[str, str]]:
    """`git ls-tree -r -z HEAD` output as (path, blob id) pairs; other object types skipped."""
    pairs = []
    for entry in text.split("\0"):
        if not entry:
            continue
        meta, _, path = entry.partition("\t")
        fields = meta.split()
        if len(fields) == 3 and fields[1] == "blob":
            pairs.append((path, fields[2]))
    return pairs


def lockfile_ids(tree: Iterable[tuple[str, str]], extra: Sequence[str] = ()) -> dict[str, str]:
    """Path → git blob id of every lockfile in a tree listing, in path order."""
    return dict(sorted((path, oid) for path, oid in tree if is_lockfile(path, extra)))


def config_digest(install: str | None, build_secrets: Sequence[str],
                  lockfiles: Sequence[str]) -> str:
    """A digest of the build fields only: a changed verify or a comment does not rebuild."""
    canonical = json.dumps(
        {"install": install or "", "build_secrets": sorted(build_secrets),
         "lockfiles": sorted(lockfiles)},
        sort_keys=True, separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class BuildKey:
    """What a build depends on; two builds with equal digests hold the same checkout."""

    repo: str
    environment: str
    provider: str
    image_id: str
    config_digest: str
    lockfiles: tuple[tuple[str, str], ...] = ()

    @property
    def digest(self) -> str:
        canonical = json.dumps(
            [self.repo.lower(), self.environment, self.provider, self.image_id,
             self.config_digest, list(self.lockfiles)],
            separators=(",", ":"),
        )
        return hashlib.sha256(canonical.encode()).hexdigest()[:24]

    @property
    def lane(self) -> tuple[str, str, str]:
        """Builds are kept, listed and pinned per repository, environment and provider."""
        return (self.repo.lower(), self.environment, self.provider)


@dataclass(frozen=True)
class Build:
    """One build as the rules see it; the store's row carries the same fields and more."""

    id: str
    version: int
    key_digest: str
    state: BuildState
    lockfiles: tuple[tuple[str, str], ...] = ()
    image: str | None = None


@dataclass(frozen=True)
class StartPlan:
    """What a new sandbox starts from and what its agent is told."""

    build: Build | None
    fallback: Fallback | None = None
    stale: bool = False
    lockfiles_differ: tuple[str, ...] = field(default_factory=tuple)


def active_build(history: Sequence[Build], pinned_id: str | None = None) -> Build | None:
    """The pinned build while it is good; else the newest build that succeeded."""
    good = [b for b in history if b.state is BuildState.succeeded]
    if pinned_id is not None:
        pinned = next((b for b in good if b.id == pinned_id), None)
        if pinned is not None:
            return pinned
    return max(good, key=lambda b: b.version, default=None)


def rebuild_reason(history: Sequence[Build], key: BuildKey, *, asked: bool = False) -> str | None:
    """Why a build for `key` should start now, or None.

    Nothing starts while one for the same key is queued or running, nor when the active
    build already has this key. A failed build is not retried until its key changes or
    someone asks. A pin does not stop drift builds: they are kept, but the pin stays active.
    """
    digest = key.digest
    same = [b for b in history if b.key_digest == digest]
    if any(b.state in (BuildState.queued, BuildState.running) for b in same):
        return None
    if asked:
        return "asked"
    if any(b.state is BuildState.succeeded for b in same):
        return None
    if any(b.state is BuildState.failed for b in same):
        return None
    return "drift" if history else "first"


def start_plan(history: Sequence[Build], key: BuildKey | None, *, has_install: bool,
               pinned_id: str | None = None,
               branch_lockfiles: dict[str, str] | None = None) -> StartPlan:
    """The build a sandbox of this lane starts from, or the bare image and why.

    `key` is what the default branch asks for now (None when it is not known yet);
    `branch_lockfiles` are the lockfile ids of the branch the sandbox checks out.
    """
    if not has_install:
        return StartPlan(None, Fallback.no_install)
    build = active_build(history, pinned_id)
    if build is None:
        if any(b.state is BuildState.gone for b in history):
            return StartPlan(None, Fallback.build_gone)
        failed = history and all(b.state is BuildState.failed for b in history)
        return StartPlan(None, Fallback.latest_failed if failed else Fallback.none_yet)
    stale = key is not None and build.key_digest != key.digest
    differ: tuple[str, ...] = ()
    if branch_lockfiles is not None:
        built = dict(build.lockfiles)
        differ = tuple(sorted(
            path for path in set(built) | set(branch_lockfiles)
            if built.get(path) != branch_lockfiles.get(path)
        ))
    return StartPlan(build, None, stale, differ)


def builds_to_drop(history: Sequence[Build], *, keep: int = DEFAULT_KEEP,
                   pinned_id: str | None = None) -> list[str]:
    """Ids of finished builds past the newest `keep`; the active and pinned ones stay."""
    active = active_build(history, pinned_id)
    protected = {pinned_id, active.id if active else None}
    finished = sorted(
        (b for b in history if b.state in (BuildState.succeeded, BuildState.failed,
                                           BuildState.gone)),
        key=lambda b: b.version, reverse=True,
    )
    return [b.id for b in finished[keep:] if b.id not in protected]


ENVIRONMENT_SKILL = "hangar-environment"
# What decides when the agent reads the skill; no angle brackets (the CLIs refuse them).
ENVIRONMENT_SKILL_DESCRIPTION = (
    "What this sandbox started from: the environment build, whether the repository's "
    "dependencies are installed, the install command to run when they are not, and that "
    "hangar pushes and opens the pull request. Read it before installing dependencies, "
    "running the tests or pushing.")


def agent_environment_skill(section: str) -> str:
    """The `hangar-environment` skill's SKILL.md: the section's own text (one source for
    both) under the frontmatter a harness lists skills by."""
    return (f"---\nname: {ENVIRONMENT_SKILL}\ndescription: {ENVIRONMENT_SKILL_DESCRIPTION}\n"
            f"---\n\n{section}")


def agent_environment_section(plan: StartPlan, *, install: str | None,
                              problems: Sequence[str] = ()) -> str:
    """The "Your environment (hangar)" section of the agent's instructions file."""
    lines = ["# Your environment (hangar)", ""]
    if plan.build is not None:
        lines.append(f"This sandbox started from build v{plan.build.version} "
                     f"({plan.build.id}) of this repository's environment: the install step "
                     "has already run in /workspace/repo.")
        if plan.stale:
            lines.append("The build is behind the default branch; a newer one is being "
                         "prepared for later sandboxes.")
        if plan.lockfiles_differ and install:
            lines.append("These lockfiles differ from the build's: "
                         + ", ".join(plan.lockfiles_differ)
                         + f". Run the install step before you rely on them: `{install}`")
    elif plan.fallback is Fallback.no_install:
        lines.append("This environment has no install step; the sandbox is the environment's "
                     "own image with the repository checked out.")
    else:
        lines.append("Dependencies are NOT installed: this sandbox started from the "
                     f"environment's own image because {plan.fallback}.")
        if install:
            lines.append(f"Run the install step yourself first: `{install}`")
    for problem in problems:
        lines.append(f"Setup problem: {problem}")
    lines.append("Commit your work to the current branch; hangar pushes it and opens the pull "
                 "request itself (this sandbox holds no GitHub credential).")
    return "\n".join(lines) + "\n"
