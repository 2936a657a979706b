"""Runs: one run, and ranking runs an orchestrator started by hand by `try N`'s rules."""

from __future__ import annotations

from aiohttp import web
from pydantic import Field

from app import fanout
from app.models import RunKind
from app.web.api.calls import ApiError, Call, Query, job_of, ok, route
from app.web.api.views import run_view


class RankQuery(Query):
    runs: str = Field(description="the runs' ids, comma-separated: 2 to 10 agent turns an "
                                  "orchestrator started by hand, each finished")

@route("GET", "/api/rank", "read",
       "Rank runs started by hand by the rules that rank `try N`'s attempts: best first, "
       "each with `eligible`, the gates it failed and why", query=RankQuery, conflicts=True)
async def rank_runs(call: Call) -> web.Response:
    ids = list(dict.fromkeys(r.strip() for r in call.query.runs.split(",") if r.strip()))
    if not 2 <= len(ids) <= 10:
        raise ApiError(422, "runs: give 2 to 10 run ids, comma-separated")
    runs = []
    for n, run_id in enumerate(ids, start=1):
        run = call.engine.get_run(run_id)
        if run is None:
            raise ApiError(404, f"no run {run_id}")
        if run.kind == RunKind.VERIFY:
            raise ApiError(422, f"{run_id} is a verification, not an agent's turn")
        if not run.finished:
            raise ApiError(409, f"{run_id} has not finished; rank it once it has")
        runs.append(run.model_copy(update={"attempt": n}))  # its place in the list
    return ok({"ranking": await fanout.ranking_of(call.engine, runs)})


@route("GET", "/api/runs/{run_id}", "read", "One run: branch, PR, head, verification, agent")
async def get_run(call: Call) -> web.Response:
    run = call.engine.get_run(call.param("run_id"))
    if run is None:
        raise ApiError(404, "no run with this id")
    job_of(call, run.job_id)
    return ok(run_view(run))
