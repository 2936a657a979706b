"""Jobs, runs and intents in the store: the rows every concern reads and writes.

`JobRows` is what the engine gives each step for them (app/engine.py's `Engine` is one,
the loop being the engine's own part): read a row, save it whole, patch a few fields in
one transaction, mark a create on GitHub, and find a job's runs. Saving a row also says
whether the engine still steps it (`active`) and, for a run, the host it is tied to.
"""

from __future__ import annotations

from typing import Any, TypeVar

from app.creates import Creating, Plan
from app.models import Intent, IntentState, Job, JobState, Run, changed
from app.store import Store

RowT = TypeVar("RowT", Job, Run)  # a row that marks its creates on GitHub


class JobRows:
    """The row helpers steps use. Needs the store, and when this hangar started (a job
    older than that may have been written to GitHub by a hangar before it)."""

    store: Store
    started_at: float

    def get_job(self, job_id: str) -> Job | None:
        return self.store.get("job", job_id, Job)

    def get_run(self, run_id: str) -> Run | None:
        return self.store.get("run", run_id, Run)

    def creating(self, job_id: str) -> Creating:
        """How this replica creates what belongs to the job on GitHub (app.creates). A
        job older than this hangar may have had made for it what this database does not
        remember (a hangar killed between a write to GitHub and saving its id, or a
        backup restored since), so a first create for it looks first."""
        job = self.get_job(job_id)
        return Creating(self.store.owner, job is None or job.created_at < self.started_at)

    def existing_job(self, job_id: str) -> Job:
        """A job another row names: rows are never deleted, so one missing is a fault."""
        job = self.get_job(job_id)
        if job is None:
            raise LookupError(f"job {job_id} is not in the store")
        return job

    def existing_run(self, run_id: str) -> Run:
        """A run another row names (a job's, a land request's): it must be there."""
        run = self.get_run(run_id)
        if run is None:
            raise LookupError(f"run {run_id} is not in the store")
        return run

    def save_job(self, job: Job) -> Job:
        self.store.put("job", job.id, job, active=_job_placed(job)[0])
        return job

    def save_run(self, run: Run) -> Run:
        active, host = _run_placed(run)
        self.store.put("run", run.id, run, active=active, host=host)
        return run

    def save_intent(self, intent: Intent) -> Intent:
        self.store.put("intent", intent.id, intent, active=intent.state != IntentState.DONE)
        return intent

    def patch_run(self, run_id: str, **fields: Any) -> Run:
        """Read the run fresh, change only these fields, write it back: one transaction,
        so another replica's write meanwhile is kept too."""
        return self.store.update("run", run_id, Run, lambda run: changed(run, **fields),
                                 placed=_run_placed)

    def patch_job(self, job_id: str, **fields: Any) -> Job:
        return self.store.update("job", job_id, Job, lambda job: changed(job, **fields),
                                 placed=_job_placed)

    def claim_create(self, row: RowT, field: str, key: Any) -> tuple[RowT, Plan]:
        """Mark on the job or run row, as it is now, that this replica creates `key` on
        GitHub (`field`: the row's marks), unless another replica's create of it may be
        on its way: the row as written, and how to create (app.creates)."""
        creating = self.creating(row.job_id if isinstance(row, Run) else row.id)
        plan = Plan.LOOK

        def claim(fresh: RowT) -> RowT:
            nonlocal plan
            marks, plan = creating.claim(getattr(fresh, field), key)
            return fresh if plan == Plan.LOOK_ONLY else changed(fresh, **{field: marks})

        if isinstance(row, Run):
            return self.store.update("run", row.id, Run, claim, placed=_run_placed), plan
        return self.store.update("job", row.id, Job, claim, placed=_job_placed), plan

    def runs_of(self, job_id: str) -> list[Run]:
        return self.store.find("run", Run, job_id=job_id)

    def active_runs(self) -> list[Run]:
        return self.store.all("run", Run, active=True)


def _run_placed(run: Run) -> tuple[bool, str | None]:
    return not run.finished, host_of(run)


def _job_placed(job: Job) -> tuple[bool, str | None]:
    # A job keeps its row active while a folded or asked status edit waits.
    return job.state == JobState.ACTIVE or job.status_due_at > 0 or job.status_asked, None


def host_of(run: Run) -> str | None:
    """The host a run is tied to: where its local or docker sandbox lives (the instance
    that made it); None when any replica may step it (no sandbox, or kubernetes)."""
    sandbox = run.sandbox or {}
    if sandbox.get("provider") in ("local", "docker"):
        return (sandbox.get("labels") or {}).get("hangar.instance")
    return None
