"""What the repositories concern's moves and rebuild use of the engine, and nothing more:
`Engine` is one, and a test may pass a small object of its own. The rebuild's chore,
`run_pending_rebuild`, ends by handing the engine on to runs' reaper, which may hold a
sandbox's commits (a push, a check run): that chore takes the whole `StepContext` (mypy
checks Engine against it where app/repositories/plugin.py adds the chore, and
StepContext against this where the chore calls the rebuild)."""

from __future__ import annotations

from typing import Any, Protocol

from app.github.reads import GitHubReads
from app.models import Job, Rename, Run
from app.settings import Settings
from app.store import Store


class RepositoriesContext(Protocol):
    """Jobs and land requests in the store, ended with a repository; every concern's rows
    under a repository's new name (`rename_repositories`); the job and run rows a rebuild
    recovers and a removal stops, and the job's notes; GitHub through `github` (the App's
    installations and their hangar PRs); settings (the App's id), and wake."""

    settings: Settings
    store: Store
    github: GitHubReads

    def wake(self, *row_ids: str) -> None: ...
    def rename_repositories(self, *renames: Rename) -> list[str]: ...
    def note(self, row_id: str, what: str) -> None: ...
    def get_job(self, job_id: str) -> Job | None: ...
    def runs_of(self, job_id: str) -> list[Run]: ...
    def save_job(self, job: Job) -> Job: ...
    def save_run(self, run: Run) -> Run: ...
    def patch_job(self, job_id: str, **fields: Any) -> Job: ...
    def patch_run(self, run_id: str, **fields: Any) -> Run: ...
