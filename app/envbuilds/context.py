"""What environment builds' steps and helpers use of the engine, and nothing more:
`Engine` is one (mypy checks it where app/envbuilds/plugin.py registers the steps), and a
test may pass a small object of its own. What a sandbox's start asks of the builds takes
less, `app.envbuilds.steps.SandboxBuilds`: runs calls it with its own context."""

from __future__ import annotations

from typing import Protocol

from app.github.reads import GitHubReads
from app.settings import Settings
from app.store import Store
from proxy import TokenRegistry
from proxy.egress import EgressLedger
from sandbox.envspec import EnvSpec
from sandbox.fleet import Fleet, Providers


class EnvbuildsContext(Protocol):
    """Build rows in the store; GitHub through `github` (the repository a build is asked
    for, its `.github/hangar.yml`); the sandbox a build runs in (the environments, the
    providers, a place in the fleet, its labels by instance, a fetch-only token, an
    egress credential for install); settings, and wake (the queued builds)."""

    settings: Settings
    store: Store
    github: GitHubReads
    tokens: TokenRegistry
    egress: EgressLedger | None
    envs: dict[str, EnvSpec]
    fleet: Fleet
    providers: Providers
    instance_id: str

    def wake(self, *row_ids: str) -> None: ...
