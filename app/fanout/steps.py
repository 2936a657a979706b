"""Fan-out's steps: once every attempt of `/hangar try N` has finished, they are ranked,
with their CI read from GitHub, after waiting (grading) for CI still running on their
heads; and the same ranking of runs an orchestrator started by hand (the API's rank)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from app import render
from app.fanout import grading
from app.fanout.ranking import ci_verdict, rank
from app.github.ops import read_ci
from app.models import Job, Run
from app.repoconfig import FanoutPolicy, parse_repo_config
from app.runs import ask_status_edit

if TYPE_CHECKING:
    from app.fanout.context import FanoutContext


async def rank_attempts(engine: FanoutContext, job: Job) -> None:
    """Rank the finished attempts of `/hangar try N` (the engine calls it once every run
    of a job has finished, before the job ends): at once when no head's CI is running,
    else once it has finished or HANGAR_GRADING_WAIT_SECONDS have passed (grading)."""
    if job.attempts < 2 or job.ranking or grading.get_row(engine, job.id) is not None:
        return
    latest = render.latest_turns(engine.runs_of(job.id))
    ci = await ci_of(engine, latest)
    waiting = running_ci(latest, ci)
    policy = await policy_of(engine, job)
    wait = grading_wait(engine, policy)
    if waiting and wait > 0:
        grading.start(engine, job.id, job.thread.repo, heads_of(latest), waiting, wait)
        return
    engine.patch_job(job.id, ranking=entries(latest, ci, unfinished=waiting,
                                             weights=weights(policy)),
                     grading=said_unfinished(waiting, 0.0))


async def advance_grading(engine: FanoutContext, job_id: str) -> None:
    """Look at the CI of a grading's heads again: rank once none is running, or at the
    deadline with what CI has said (naming the heads whose CI had not finished)."""
    row = grading.get_row(engine, job_id)
    job = engine.get_job(job_id)
    if row is None or job is None or row.done:
        return
    if job.ranking:  # ranked already (a step repeated after a crash)
        grading.finish(engine, row)
        return
    latest = [r for r in render.latest_turns(engine.runs_of(job_id)) if r.attempt in row.heads]
    ci = await ci_of(engine, latest)
    waiting = running_ci(latest, ci)
    now = time.time()
    if waiting and now < row.until:
        shown = job.grading.get("waiting")
        grading.wait_again(engine, row, waiting)
        if shown != grading.by_name(waiting):
            # The status names the heads still waited on. Asked only when they changed:
            # the ask wakes the job's id, which is this row's too, and an ask at every
            # look stepped this row again at once, reading CI a thousand times a second.
            ask_status_edit(engine, job_id)
        return
    engine.patch_job(job_id, ranking=entries(latest, ci, unfinished=waiting,
                                             weights=weights(await policy_of(engine, job))),
                     grading=said_unfinished(waiting, now - row.since))
    grading.finish(engine, row)
    ask_status_edit(engine, job_id)


async def policy_of(engine: FanoutContext, job: Job) -> FanoutPolicy:
    """The repository's `fanout:` on the job's base (a malformed file's defaults stand)."""
    ops = await engine.github.repo_ops(job.thread)
    config, _ = parse_repo_config(await engine.github.config_text(ops, job.base_branch))
    return config.fanout


def weights(policy: FanoutPolicy) -> dict[str, float] | None:
    """`fanout.weights`, or None for the fixed order."""
    return None if policy.weights is None else policy.weights.model_dump()


def grading_wait(engine: FanoutContext, policy: FanoutPolicy) -> float:
    """How long the ranking may wait for CI: the repository's `fanout.ci_wait_minutes`,
    never past the operator's HANGAR_GRADING_WAIT_SECONDS."""
    bound = engine.settings.grading_wait_seconds
    if policy.ci_wait_minutes is None:
        return bound
    return min(bound, policy.ci_wait_minutes * 60.0)


def heads_of(runs: list[Run]) -> dict[int, str]:
    return {r.attempt: r.head_sha for r in runs if r.pr_number and r.head_sha}


def running_ci(runs: list[Run], ci: dict[int, str]) -> dict[int, str]:
    """attempt -> head sha, of the attempts whose CI has not finished."""
    return {a: sha for a, sha in heads_of(runs).items() if ci.get(a) == "pending"}


def said_unfinished(waiting: dict[int, str], waited: float) -> dict[str, Any]:
    return {"unfinished": grading.by_name(waiting), "waited": waited} if waiting else {}


async def ci_of(engine: FanoutContext, runs: list[Run]) -> dict[int, str]:
    """attempt -> the CI verdict on its PR's head, from GitHub."""
    ci = {}
    for run in runs:
        job = engine.get_job(run.job_id)
        if run.pr_number and run.head_sha and job is not None:
            ops = await engine.github.repo_ops(job.thread)
            ci[run.attempt] = ci_verdict(*await read_ci(ops, run.head_sha))
    return ci


async def ranking_of(engine: FanoutContext, runs: list[Run]) -> list[dict[str, Any]]:
    """The runs ranked best first, each `attempt` a distinct number (the attempt of a
    `try N`, or the place in the list given), with CI on each PR's head from GitHub; by
    the repository's `fanout.weights` when every run is of one repository and base."""
    jobs = {job.id: job for run in runs if (job := engine.get_job(run.job_id)) is not None}
    places = {(job.thread.repo, job.base_branch) for job in jobs.values()}
    policy = (await policy_of(engine, next(iter(jobs.values())))
              if len(places) == 1 else FanoutPolicy())
    return entries(runs, await ci_of(engine, runs), weights=weights(policy))


def entries(runs: list[Run], ci: dict[int, str], *, unfinished: dict[int, str] | None = None,
            weights: dict[str, float] | None = None) -> list[dict[str, Any]]:
    """The ranking as the job keeps it; `unfinished`: attempts whose CI had not finished;
    `weights`: the repository's, which order the eligible by score."""
    unfinished = unfinished or {}
    return [{"place": r.place, "attempt": r.run.attempt, "run": r.run.id,
             "pr": r.run.pr_number, "why": r.why, "eligible": r.eligible,
             "gates": [str(g) for g in r.gates], "tie_with": list(r.tie_with),
             "verified": verified(r.run), "ci": r.ci,
             **({"ci_unfinished": unfinished[r.run.attempt]}
                if r.run.attempt in unfinished else {}),
            **({"score": r.score, "score_terms": [list(t) for t in r.terms]}
               if r.score is not None else {})}
            for r in rank(runs, ci, weights)]


def verified(run: Run) -> str | None:
    """passed | flaky | failed | not_run, or None where nothing was verified."""
    v = run.verification
    if v is None:
        return None
    if v.passed:
        return "flaky" if v.flaky else "passed"
    return "failed" if v.passed is False else "not_run"
