"""What jobs' and runs' steps and helpers use of the engine, and nothing more: `Engine` is
one (mypy checks it where app/runs/plugin.py registers the steps), and a test may pass a
small object of its own. The commands (app/runs/commands.py) start jobs and turns through
the commands concern, and take the whole `StepContext`, as fan-out's do."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Protocol

from app.github.reads import GitHubReads
from app.models import Job, Run
from app.settings import Settings
from app.store import Store
from proxy import TokenRegistry
from proxy.egress import EgressLedger
from proxy.gateway import ModelLedger
from sandbox.envspec import EnvSpec
from sandbox.fleet import Fleet, Providers

if TYPE_CHECKING:
    from app.creates import Plan
    from app.engine import PrStatus
    from app.rows import RowT


class RunsContext(Protocol):
    """The job and run rows through their helpers (the queue reads the active runs; a
    check run or a PR only one replica may create is claimed on its row), notes, a lock
    (one status comment edited at a time), and wake; GitHub through `github`; the
    sandboxes a turn runs in (the environments, the providers, a place in the fleet, its
    labels by instance, the gate's tokens, the model ledger for its route and pauses);
    the egress ledger, handed on to app.egress, and the store, to the builds a sandbox
    starts from; whether a rebuild is owed (the reaper keeps a sandbox it does not know);
    what the other concerns say about a job's PRs and do once its runs end; settings."""

    settings: Settings
    store: Store
    github: GitHubReads
    tokens: TokenRegistry
    models: ModelLedger | None
    egress: EgressLedger | None
    envs: dict[str, EnvSpec]
    fleet: Fleet
    providers: Providers
    instance_id: str
    rebuilding: bool

    def wake(self, *row_ids: str) -> None: ...
    def note(self, row_id: str, what: str) -> None: ...
    def lock(self, key: str) -> AbstractAsyncContextManager[Any]: ...
    def get_job(self, job_id: str) -> Job | None: ...
    def get_run(self, run_id: str) -> Run | None: ...
    def existing_job(self, job_id: str) -> Job: ...
    def existing_run(self, run_id: str) -> Run: ...
    def patch_run(self, run_id: str, **fields: Any) -> Run: ...
    def patch_job(self, job_id: str, **fields: Any) -> Job: ...
    def claim_create(self, row: RowT, field: str, key: Any) -> tuple[RowT, Plan]: ...
    def runs_of(self, job_id: str) -> list[Run]: ...
    def active_runs(self) -> list[Run]: ...
    def pr_status(self, repo: str, pr_numbers: list[int]) -> PrStatus: ...
    async def runs_ended(self, job: Job) -> None: ...
