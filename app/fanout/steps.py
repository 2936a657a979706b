"""Fan-out's steps: once every attempt of `/hangar try N` has finished, they are ranked,
with their CI read from GitHub; and the same ranking of runs an orchestrator started by
hand (the API's rank)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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
    latest = render.latest_turns(engine.runs_of(job.id))
    engine.patch_job(job.id, ranking=await ranking_of(engine, latest))


async def ranking_of(engine: StepContext, runs: list[Run]) -> list[dict[str, Any]]:
    """The runs ranked best first, each `attempt` a distinct number (the attempt of a
    `try N`, or the place in the list given), with CI on each PR's head from GitHub."""
    ci = {}
    for run in runs:
        job = engine.get_job(run.job_id)
        if run.pr_number and run.head_sha and job is not None:
            ops = await engine.repo_ops(job.thread)
            ci[run.attempt] = ci_verdict(*await read_ci(ops, run.head_sha))
    return [{"place": r.place, "attempt": r.run.attempt, "run": r.run.id,
             "pr": r.run.pr_number, "why": r.why, "eligible": r.eligible,
             "gates": [str(g) for g in r.gates], "tie_with": list(r.tie_with),
             "verified": verified(r.run)}
            for r in rank(runs, ci)]


def verified(run: Run) -> str | None:
    """passed | flaky | failed | not_run, or None where nothing was verified."""
    v = run.verification
    if v is None:
        return None
    if v.passed:
        return "flaky" if v.flaky else "passed"
    return "failed" if v.passed is False else "not_run"
