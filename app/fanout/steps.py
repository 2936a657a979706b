"""Fan-out's step: once every attempt of `/hangar try N` has finished, they are ranked,
with their CI read from GitHub."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app import render
from app.fanout.ranking import ci_verdict, rank
from app.github.ops import read_ci
from app.models import Job, Run

if TYPE_CHECKING:
    from app.engine import StepContext


async def rank_attempts(engine: StepContext, job: Job) -> None:
    """Rank the finished attempts of `/hangar try N`, with CI read from GitHub (the engine
    calls it once every run of a job has finished, before the job ends)."""
    if job.attempts < 2 or job.ranking:
        return
    ops = await engine.repo_ops(job.thread)
    latest = render.latest_turns(engine.runs_of(job.id))
    ci = {}
    for run in latest:
        if run.pr_number and run.head_sha:
            ci[run.attempt] = ci_verdict(*await read_ci(ops, run.head_sha))
    ranking = [{"place": r.place, "attempt": r.run.attempt, "pr": r.run.pr_number,
                "why": r.why, "eligible": r.eligible, "gates": [str(g) for g in r.gates],
                "tie_with": list(r.tie_with), "verified": verified(r.run)}
               for r in rank(latest, ci)]
    engine.patch_job(job.id, ranking=ranking)




def verified(run: Run) -> str | None:
    """passed | flaky | failed | not_run, or None where nothing was verified."""
    v = run.verification
    if v is None:
        return None
    if v.passed:
        return "flaky" if v.flaky else "passed"
    return "failed" if v.passed is False else "not_run"
