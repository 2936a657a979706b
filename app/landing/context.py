"""What landing's steps, intake, commands and helpers use of the engine, and nothing
more: `Engine` is one (mypy checks it where app/landing/plugin.py registers the steps),
and a test may pass a small object of its own."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from app.creates import Creating
from app.github.reads import GitHubReads
from app.models import Intent, Job, Run
from app.settings import Settings
from app.store import Store
from proxy import TokenRegistry
from sandbox.envspec import EnvSpec
from sandbox.fleet import Providers


class LandingContext(Protocol):
    """Land requests, overlaps and merge groups in the store; the job and run rows they
    follow (and a verification or a `/hangar resolve` turn asked as a run row); GitHub
    through `github`; the clean sandbox a land verifies in (providers, the gate's
    tokens, the environments); notes, a lock for the mirror, and wake."""

    settings: Settings
    store: Store
    github: GitHubReads
    tokens: TokenRegistry
    envs: dict[str, EnvSpec]
    providers: Providers
    instance_id: str

    def wake(self, *row_ids: str) -> None: ...
    def note(self, row_id: str, what: str) -> None: ...
    def lock(self, key: str) -> AbstractAsyncContextManager[Any]: ...
    def get_job(self, job_id: str) -> Job | None: ...
    def get_run(self, run_id: str) -> Run | None: ...
    def existing_job(self, job_id: str) -> Job: ...
    def creating(self, job_id: str) -> Creating: ...
    def runs_of(self, job_id: str) -> list[Run]: ...
    def save_run(self, run: Run) -> Run: ...
    def save_intent(self, intent: Intent) -> Intent: ...
    def patch_job(self, job_id: str, **fields: Any) -> Job: ...
