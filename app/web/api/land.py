"""Land requests: list them, read one (waiting for a change), ask to land a job's PR and
withdraw the ask. No call approves: a person's review on GitHub does."""

from __future__ import annotations

from aiohttp import web
from pydantic import ConfigDict, Field

from app.landing import LandRequest, land_id
from app.web.api.calls import (
    ApiError,
    Body,
    Call,
    Query,
    WaitQuery,
    job_of,
    ok,
    pr_of,
    reach,
    record_ask,
    route,
    wait_as_asked,
)
from app.web.api.views import land_view


class LandAsk(Body):
    """Ask hangar to land a job's pull request, as `/hangar land` there."""

    job: str = Field(min_length=1, max_length=100)
    pr: int | None = Field(None, ge=1)
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"job": "job-1a2b3c4d", "pr": 12}]})

class LandQuery(Query):
    repo: str | None = Field(None, description="only this repository (owner/name)")
    state: str | None = Field(None, description="only requests in this state, e.g. "
                                                "awaiting_approval, conflict, landed")

@route("GET", "/api/land", "read", "Land requests", query=LandQuery)
async def list_land(call: Call) -> web.Response:
    q = call.query
    return ok([land_view(r) for r in call.store.all("land", LandRequest)
               if (q.repo is None or r.repo == q.repo) and (q.state is None or r.state == q.state)
               and call.principal.reaches(r.repo)])


@route("GET", "/api/land/{land_id}", "read",
       "A land request: state, reason, history; can wait for a change", query=WaitQuery)
async def get_land(call: Call) -> web.Response:
    land_id = call.param("land_id")
    request = call.store.get("land", land_id, LandRequest)
    if request is None:
        raise ApiError(404, "no land request with this id")
    reach(call, request.repo)
    seq = await wait_as_asked(call, lambda c: c.kind == "land" and c.id == land_id)
    return ok({"seq": seq, **land_view(call.store.get("land", land_id, LandRequest))})


@route("POST", "/api/land", "land",
       "Ask hangar to land a job's PR, as `/hangar land`: it lands once a person approves "
       "the head on GitHub and the required checks pass", body=LandAsk, action="land.request",
       success=202, conflicts=True)
async def request_land(call: Call) -> web.Response:
    job = job_of(call, call.body.job)
    pr = pr_of(call, job, call.body.pr)
    return record_ask(call, job, "land", pr=pr, args={"ack_sensitive": False},
                extra={"land": land_id(job.thread.repo, pr)})


@route("POST", "/api/land/{land_id}/cancel", "land",
       "Withdraw a land request, as `/hangar land cancel`", action="land.cancel", success=202,
       conflicts=True)
async def cancel_land(call: Call) -> web.Response:
    request = call.store.get("land", call.param("land_id"), LandRequest)
    if request is None:
        raise ApiError(404, "no land request with this id")
    reach(call, request.repo)
    job = job_of(call, request.job_id)  # a land request outlives no job; 404 if it did
    return record_ask(call, job, "land_cancel", pr=request.pr_number, extra={"land": request.id})
