"""The land worker: a sandbox that rebases a pull request's branch onto its base
(`land.update: rebase`), for landing.

It holds no model credential and no GitHub credential: only a push token of hangar's proxy
for this one branch, which may replace exactly the head it was given (a lease), so its
push is `git push --force-with-lease=<branch>:<old head>` and nothing else. The rebase
runs there, never on hangar's own machine: git runs the repository's content only where
a sandbox holds it.
"""

from __future__ import annotations

import logging
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app import runs
from app.envbuilds import environment_for
from app.redact import redact, tail
from proxy import sandbox_git_files
from sandbox import envimage
from sandbox.provider import HOME_DIR, REPO_DIR

if TYPE_CHECKING:
    from app.github.ops import RepoOps
    from app.landing.context import LandingContext
    from app.landing.rows import LandRequest

log = logging.getLogger(__name__)

WORKER_TIMEOUT_S = 600
SAID = "hangar-land:"  # the script's own lines, told from git's


@dataclass(frozen=True)
class Rebased:
    head: str  # the new head the worker pushed


@dataclass(frozen=True)
class Conflicts:
    files: tuple[str, ...]  # where the rebase stopped, as git lists the unmerged files


@dataclass(frozen=True)
class HeadMoved:
    """The branch is no longer at the head the worker was given: nothing was pushed."""


@dataclass(frozen=True)
class Failed:
    said: str  # git's last words (redacted), for the reason


class Unreached(Exception):
    """The worker could not clone the branch or push it through hangar's gate, and GitHub
    refused nothing: not the branch's fault. Raised, so the land step is tried again
    (and, failing on, stops with hangar's own reason)."""

    def __init__(self, said: str):
        super().__init__(f"the land worker could not clone or push the branch: {said}")
        self.said = said


Outcome = Rebased | Conflicts | HeadMoved | Failed


def rebase_script(*, clone_url: str, branch: str, base: str, old: str) -> str:
    """Clone, check the head is still `old`, rebase onto the base, push with the lease."""
    q = shlex.quote
    git = "git -c core.hooksPath=/dev/null -c core.fsmonitor=false"
    return "\n".join([
        "set -u",
        f"{git} clone -q --no-tags {q(clone_url)} {REPO_DIR} || exit 10",
        f"cd {REPO_DIR}",
        f"{git} checkout -q -B {q(branch)} {q('origin/' + branch)} || exit 10",
        f'if [ "$(git rev-parse HEAD)" != {q(old)} ]; then echo "{SAID} moved"; exit 3; fi',
        f"if ! {git} rebase -q {q('origin/' + base)}; then",
        f'  echo "{SAID} conflicts"',
        "  git diff --name-only --diff-filter=U",
        f"  {git} rebase --abort",
        "  exit 4",
        "fi",
        f"{git} push -q --force-with-lease={q(f'refs/heads/{branch}:{old}')} origin "
        f"{q(f'HEAD:refs/heads/{branch}')} || exit 11",
        f'echo "{SAID} pushed $(git rev-parse HEAD)"',
    ])


def read_outcome(exit_code: int | None, output: str) -> Outcome:
    """What the worker's script did, from its exit code and its own marked lines."""
    lines = output.splitlines()
    if exit_code == 0:
        pushed = [line.split()[-1] for line in lines if line.startswith(f"{SAID} pushed ")]
        if pushed:
            return Rebased(pushed[-1])
    if exit_code == 3:
        return HeadMoved()
    if exit_code == 4 and f"{SAID} conflicts" in lines:
        after = lines[lines.index(f"{SAID} conflicts") + 1:]
        files = [line.strip() for line in after if line.strip() and not line.startswith(
            ("error:", "hint:", "fatal:", "warning:"))]
        return Conflicts(tuple(dict.fromkeys(files)))
    last = [line for line in lines if line.strip() and not line.startswith(SAID)]
    said = redact(tail("\n".join(last[-3:]) or f"exit {exit_code}", 300))
    refusal = runs.push_refusal(output) if exit_code == 11 else None
    if exit_code == 10 or (exit_code == 11 and (
            refusal is None or runs.refused_by_hangar(refusal))):
        # The clone, or a push GitHub did not refuse (the gate down, no token, a 5xx), or
        # one hangar's gate refused: hangar's trouble, not the branch's.
        raise Unreached(said)
    return Failed(said)


async def rebase(engine: LandingContext, ops: RepoOps, request: LandRequest,
                 clone_url: str) -> Outcome:
    """Rebase the request's branch onto its base in a land-worker sandbox, and push it
    through the proxy with a lease on the request's head."""
    spec, _ = await environment_for(engine, ops, request.base)
    provider = engine.providers[spec.provider]
    spec = await envimage.ensure(provider, spec)
    labels = {"hangar.instance": engine.instance_id, "hangar.land": request.id,
              "hangar.role": "land"}
    for leftover in await provider.list(labels):
        await provider.destroy(leftover)
        engine.tokens.revoke(leftover.id)
    sb = await provider.create(spec, labels)
    try:
        token = engine.tokens.issue(sb.id, repo=request.repo, branch=request.branch,
                                    installation_id=request.installation_id,
                                    allow_force=False, lease=request.head_sha)
        files = sandbox_git_files(engine.settings.proxy_base_url, sb.id, token, clone_url,
                                  home=HOME_DIR)
        gitconfig = f"{HOME_DIR}/.gitconfig"
        identity = b"[user]\n\tname = hangar\n\temail = land@hangar.invalid\n"
        await provider.copy_in(sb, {gitconfig: files[gitconfig] + identity})
        creds = f"{HOME_DIR}/.git-credentials"
        await provider.copy_in(sb, {creds: files[creds]}, mode=0o600)
        result = await provider.run(
            sb, ["sh", "-c", rebase_script(clone_url=clone_url, branch=request.branch,
                                           base=request.base, old=request.head_sha or "")],
            cwd="/workspace", timeout=WORKER_TIMEOUT_S)
        outcome = read_outcome(result.exit_code, result.output)
        if isinstance(outcome, Failed):
            log.warning("the land worker failed", extra={
                "land": request.id, "exit_code": result.exit_code,
                "output": redact(tail(result.output, 2000))})
        return outcome
    finally:
        engine.tokens.revoke(sb.id)
        await provider.destroy(sb)
