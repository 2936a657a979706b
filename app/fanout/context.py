"""What fan-out's ranking and grading use of the engine, and nothing more: `Engine` is
one (mypy checks it where app/fanout/plugin.py registers the steps), and a test may pass
a small object of its own. `/hangar try` and `pick` start and pick turns, and take the
whole `StepContext` (app/fanout/commands.py)."""

from __future__ import annotations

from typing import Any, Protocol

from app.github.reads import GitHubReads
from app.models import Job, Run
from app.settings import Settings
from app.store import Store


class FanoutContext(Protocol):
    """Grading rows in the store; the job and run rows they rank (the ranking and the
    grading are kept on the job); GitHub through `github` (CI on the heads, the
    repository's `fanout:`); and wake, for the status edit a ranking asks."""

    settings: Settings
    store: Store
    github: GitHubReads

    def wake(self, *row_ids: str) -> None: ...
    def get_job(self, job_id: str) -> Job | None: ...
    def runs_of(self, job_id: str) -> list[Run]: ...
    def patch_job(self, job_id: str, **fields: Any) -> Job: ...
