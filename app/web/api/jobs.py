"""Jobs: list them, read one (waiting for a change), read a fan-out's ranking, and act on
one as `/hangar` would — start it, a follow-up turn, verify, pick, resolve, cancel, resume.
Each act records the intent a comment would, so the same rules answer."""

from __future__ import annotations

import asyncio
import uuid

from aiohttp import web
from gidgethub import BadRequest
from pydantic import ConfigDict, Field

from app.commands import job_id_for
from app.github.client import SUSPENDED, InstallationUnavailable, get_or_none
from app.models import Intent, Job, Thread
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
    require,
    route,
    wait_as_asked,
)
from app.web.api.views import job_view, ranking_view


class StartJob(Body):
    """Work on an issue, as `/hangar <prompt>` (attempts 1) or `/hangar try N <prompt>`."""

    repo: str = Field(pattern=r"^[\w.-]+/[\w.-]+$", description="owner/name")
    issue: int = Field(ge=1, description="the issue's number")
    prompt: str = Field(min_length=1, max_length=8000,
                        description="what the agents are asked to do, as after `/hangar`")
    attempts: int = Field(1, ge=1, le=10, description="N attempts, ranked (`/hangar try N`)")
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"repo": "acme/widgets", "issue": 7, "prompt": "fix the failing test", "attempts": 3}]})


class FollowUp(Body):
    """A follow-up turn on one of the job's pull requests, as `/hangar <prompt>` there."""

    prompt: str = Field(min_length=1, max_length=8000,
                        description="what the agent is asked to do in this turn")
    pr: int | None = Field(None, ge=1, description="which PR; may be left out when the job "
                                                    "has one PR or a picked attempt")
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"prompt": "also cover the empty list", "pr": 12}]})


class PrChoice(Body):
    """Which of the job's pull requests."""

    pr: int | None = Field(None, ge=1, description="may be left out when the job has one PR "
                                                    "or a picked attempt")
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"pr": 12}]})


class Pick(Body):
    """Keep one attempt of `try N`, as `/hangar pick N`: the others' PRs are closed."""

    attempt: int = Field(ge=1, le=10, description="the attempt's number in the ranking")
    force: bool = Field(False, description="keep it even if the ranking calls it ineligible")
    land: bool = Field(False, description="then ask to land its PR, as `/hangar land` there "
                                          "(needs the land scope too)")
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"attempt": 2}, {"attempt": 2, "land": True}]})

class JobsQuery(Query):
    repo: str | None = Field(None, description="only this repository (owner/name)")

@route("GET", "/api/jobs", "read", "Jobs, oldest first", query=JobsQuery)
async def list_jobs(call: Call) -> web.Response:
    repo = call.query.repo
    return ok([
        {"id": j.id, "repo": j.thread.repo, "issue": j.thread.number, "state": j.state,
         "attempts": j.attempts, "requested_by": j.requested_by, "created_at": j.created_at}
        for j in call.store.all("job", Job)
        if (repo is None or j.thread.repo == repo) and call.principal.reaches(j.thread.repo)
    ])


@route("GET", "/api/jobs/{job_id}", "read",
       "A job: its runs, PRs, land requests and timeline; can wait for a change",
       query=WaitQuery)
async def get_job(call: Call) -> web.Response:
    job_id = job_of(call).id
    seq = await wait_as_asked(call, lambda c: c.job == job_id)
    return ok({"seq": seq, **job_view(call.engine, job_of(call))})


@route("GET", "/api/jobs/{job_id}/ranking", "read",
       "The ranking of a fan-out (`try N`); can wait until it is final", query=WaitQuery)
async def get_ranking(call: Call) -> web.Response:
    job = job_of(call)
    seq = call.changes.seq
    if not job.ranking and call.query.wait_seconds > 0:
        deadline = asyncio.get_running_loop().time() + call.query.wait_seconds
        after = seq if call.query.after is None else call.query.after
        # Woken by each change of this job; done when the ranking is there.
        while not (job := job_of(call)).ranking:
            left = deadline - asyncio.get_running_loop().time()
            found = await call.changes.wait(after, lambda c: c.job == job.id, left)
            if not found:
                break
            after = found[-1].seq
        seq = call.changes.seq
    return ok({"seq": seq, **ranking_view(call.engine, job_of(call))})


@route("POST", "/api/jobs", "operate",
       "Work on an issue, as `/hangar <prompt>` or `/hangar try N <prompt>`",
       body=StartJob, action="job.start", success=202, conflicts=True)
async def start_job(call: Call) -> web.Response:
    body: StartJob = call.body
    reach(call, body.repo)
    github = call.engine.github
    installation = await get_or_none(await github.app_client(),
                                     f"/repos/{body.repo}/installation", jwt=github.jwt())
    if installation is None:
        raise ApiError(404, f"the App is not installed on {body.repo}")
    owner = body.repo.partition("/")[0]
    try:
        if installation.get("suspended_at"):
            raise InstallationUnavailable(installation["id"], SUSPENDED)
        gh = await github.client(installation["id"])
    except InstallationUnavailable as exc:
        again = (f"an owner of {owner} unsuspends it in the installation's settings on "
                 "GitHub" if exc.how == SUSPENDED else f"it must be installed on {owner} again")
        raise ApiError(409, f"hangar's GitHub App was {exc.how} on {owner}; {again}") from None
    try:
        repo = await gh.getitem(f"/repos/{body.repo}")
        issue = await gh.getitem(f"/repos/{body.repo}/issues/{body.issue}")
    except BadRequest as exc:
        raise ApiError(404, f"{body.repo}#{body.issue}: {exc}") from None
    if issue.get("pull_request"):
        raise ApiError(422, "give an issue number; a follow-up turn on a hangar PR is "
                            "POST /api/jobs/{job_id}/turns")
    intent = Intent(
        id=f"api-{uuid.uuid4().hex[:12]}", comment_id=0, author=call.principal.asker,
        author_type="Api",
        thread=Thread(repo=body.repo, number=body.issue, installation_id=installation["id"]),
        command="run" if body.attempts == 1 else "try",
        args={"prompt": body.prompt, "n": body.attempts},
        title=issue.get("title") or "", body=issue.get("body") or "",
        clone_url=repo["clone_url"], default_branch=repo["default_branch"],
    )
    call.engine.save_intent(intent)
    call.engine.wake()
    job_id = job_id_for(intent.id)
    call.audit_target = f"{body.repo}#{body.issue} {job_id}"
    call.audit_detail = f"attempts {body.attempts}"
    return ok({"job": job_id, "intent": intent.id}, status=202)


@route("POST", "/api/jobs/{job_id}/turns", "operate",
       "A follow-up turn on one of the job's PRs, as `/hangar <prompt>` there",
       body=FollowUp, action="job.follow_up", success=202, conflicts=True)
async def follow_up(call: Call) -> web.Response:
    job = job_of(call)
    return record_ask(call, job, "run", pr=pr_of(call, job, call.body.pr),
                args={"prompt": call.body.prompt})


@route("POST", "/api/jobs/{job_id}/verify", "operate",
       "Verify a PR's head again in a clean sandbox, as `/hangar verify`",
       body=PrChoice, action="job.verify", success=202, conflicts=True)
async def verify_again(call: Call) -> web.Response:
    job = job_of(call)
    return record_ask(call, job, "verify", pr=pr_of(call, job, call.body.pr))


@route("POST", "/api/jobs/{job_id}/pick", "operate",
       "Keep one attempt of `try N`, as `/hangar pick N`", body=Pick, action="job.pick",
       success=202, conflicts=True)
async def pick(call: Call) -> web.Response:
    if call.body.land:
        require(call.principal, "land")  # a pick that lands is a land request too
    job = job_of(call)
    if job.attempts < 2:
        raise ApiError(422, f"{job.id} has one attempt; pick chooses among the attempts of "
                            "a job started with attempts ≥ 2")
    if call.body.attempt > job.attempts:
        raise ApiError(422, f"{job.id} has attempts 1 to {job.attempts}")
    return record_ask(call, job, "pick", pr=None, args={
        "n": call.body.attempt, "force": call.body.force, "land": call.body.land})


@route("POST", "/api/jobs/{job_id}/resolve", "operate",
       "A turn on one of the job's PRs that merges the base and resolves the conflicts, as "
       "`/hangar resolve` there; its head is verified again", body=PrChoice,
       action="job.resolve", success=202, conflicts=True)
async def resolve_conflicts(call: Call) -> web.Response:
    job = job_of(call)
    return record_ask(call, job, "resolve", pr=pr_of(call, job, call.body.pr), args={})


@route("POST", "/api/jobs/{job_id}/cancel", "operate",
       "Stop the job's queued and running agents, as `/hangar cancel`", action="job.cancel",
       success=202, conflicts=True)
async def cancel_job(call: Call) -> web.Response:
    return record_ask(call, job_of(call), "cancel", pr=None)


@route("POST", "/api/jobs/{job_id}/resume", "operate",
       "Start the job's agents that the model's usage paused, as `/hangar resume`: the "
       "pause stays lifted until that usage resets", action="job.resume", success=202,
       conflicts=True)
async def resume_job(call: Call) -> web.Response:
    return record_ask(call, job_of(call), "resume", pr=None)
