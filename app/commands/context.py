"""What the commands concern's intake, helpers and shared actions use of the engine, and
nothing more: `Engine` is one (mypy checks it where app/commands/plugin.py registers the
hooks), and a test may pass a small object of its own. The intent's step,
`process_intent`, hands the engine on to each command's action, which the concern that
owns the command types against the whole `StepContext`: that step takes StepContext."""

from __future__ import annotations

from typing import Any, Protocol

from app.models import Intent, Job, Run
from app.settings import Settings
from app.store import Store


class CommandsContext(Protocol):
    """Intents in the store (a command recorded once per source, done, or woken when the
    turn it waited for ended); the job and run rows a command starts or finds (a job and
    its runs, a turn or a verification on a PR) and the job's notes; settings (the logins
    hangar ignores)."""

    settings: Settings
    store: Store

    def note(self, row_id: str, what: str) -> None: ...
    def get_job(self, job_id: str) -> Job | None: ...
    def get_run(self, run_id: str) -> Run | None: ...
    def runs_of(self, job_id: str) -> list[Run]: ...
    def save_job(self, job: Job) -> Job: ...
    def save_run(self, run: Run) -> Run: ...
    def save_intent(self, intent: Intent) -> Intent: ...
    def patch_job(self, job_id: str, **fields: Any) -> Job: ...
