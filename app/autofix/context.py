"""What auto-fix's steps, intake, commands and helpers use of the engine, and nothing
more: `Engine` is one (mypy checks it where app/autofix/plugin.py registers the steps),
and a test may pass a small object of its own."""

from __future__ import annotations

from typing import Any, Protocol

from app.github.reads import GitHubReads
from app.models import Intent, Job, Run
from app.settings import Settings
from app.store import Store


class AutofixContext(Protocol):
    """Auto-fix rows in the store; the job and run rows they follow (a fix or review
    turn asked as a run row); GitHub through `github`; notes, and wake."""

    settings: Settings
    store: Store
    github: GitHubReads

    def wake(self, *row_ids: str) -> None: ...
    def note(self, row_id: str, what: str) -> None: ...
    def get_job(self, job_id: str) -> Job | None: ...
    def get_run(self, run_id: str) -> Run | None: ...
    def runs_of(self, job_id: str) -> list[Run]: ...
    def save_run(self, run: Run) -> Run: ...
    def save_intent(self, intent: Intent) -> Intent: ...
    def patch_job(self, job_id: str, **fields: Any) -> Job: ...
