"""Which environment a repository's work runs in: its `.github/hangar.yml` choice among
hangar's environment specs, or the default, with what was wrong with the choice. Runs
and environment builds both ask."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from app.github.ops import RepoOps
from app.repoconfig import parse_repo_config

if TYPE_CHECKING:
    from app.github.reads import GitHubReads
    from sandbox.envspec import EnvSpec


class EnvironmentChoice(Protocol):
    """What choosing an environment uses of the engine: the repository's config through
    `github`, and hangar's environment specs."""

    github: GitHubReads
    envs: dict[str, EnvSpec]


async def environment_for(engine: EnvironmentChoice, ops: RepoOps, ref: str,
                          sha: str | None = None) -> tuple[Any, list[str]]:
    """The environment for work on ref (`sha`: the commit ref points at now, if known)."""
    from sandbox.envspec import EnvSpecError, select_environment

    config, problems = parse_repo_config(await engine.github.config_text(ops, ref, sha))
    try:
        spec = select_environment(engine.envs, config.environment,
                                  default=default_env_name(engine), told=problems)
    except EnvSpecError as exc:
        problems.append(str(exc) + "; hangar used the default environment")
        spec = select_environment(engine.envs, None, default=default_env_name(engine))
    return spec, problems


def default_env_name(engine: EnvironmentChoice) -> str:
    return "default" if "default" in engine.envs else sorted(engine.envs)[0]
