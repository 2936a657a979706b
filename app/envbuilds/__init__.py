"""Environment builds: a repository's environment installed once into an image that
sandboxes start from, rebuilt when its inputs drift.

- environments.py  which environment a repository's work runs in (its
                   `.github/hangar.yml` choice among hangar's specs, or the default)
- rows.py          builds as rows: history per lane, the active build, pins, the audit
                   trail, and the `hangar env` commands that read and change them
- steps.py         the build's step in a sandbox, and what a sandbox's start asks of the
                   builds (the usable build, a probe of what drifted, a build queued)
- plugin.py        `register(engine)`: the build row, stale builds queued at the start
- context.py       `EnvbuildsContext`: what the builds' steps and helpers use of the
                   engine, and nothing more (a test passes a small object of its own)

This file is the concern's face: code outside the folder imports from here only.
"""

from app.envbuilds.environments import default_env_name, environment_for
from app.envbuilds.plugin import register
from app.envbuilds.rows import (
    BUILD,
    BuildError,
    EnvBuildRow,
    active,
    add_env_arguments,
    env_command,
    find,
    history,
    lane,
    lanes_of,
    rollback,
    unpin,
)
from app.envbuilds.steps import (
    facts,
    installed_for,
    instruction_files,
    key_for,
    maybe_queue,
    parse_probe,
    plan_for,
    probe_argv,
    request_build,
    spec_from_config,
    usable_build,
)

__all__ = [
    "BUILD",
    "BuildError",
    "EnvBuildRow",
    "active",
    "add_env_arguments",
    "default_env_name",
    "env_command",
    "environment_for",
    "facts",
    "find",
    "history",
    "installed_for",
    "instruction_files",
    "key_for",
    "lane",
    "lanes_of",
    "maybe_queue",
    "parse_probe",
    "plan_for",
    "probe_argv",
    "register",
    "request_build",
    "rollback",
    "spec_from_config",
    "unpin",
    "usable_build",
]
