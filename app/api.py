"""The REST API for scripts and orchestrators: start work, follow it, cancel it.

Every route needs `Authorization: Bearer <HANGAR_API_TOKEN>`; without a configured token
the API answers 503 and says how to enable it. Work started here is the same work a
`/hangar` comment starts: the same rows, the same status comment on the issue.
"""

from __future__ import annotations

import hmac
import uuid

from aiohttp import web
from gidgethub import BadRequest
from pydantic import BaseModel, Field, ValidationError

from app.github import get_or_none
from app.models import Intent, Job, Run, RunState, Thread


class StartJob(BaseModel):
    repo: str = Field(pattern=r"^[\w.-]+/[\w.-]+$", description="owner/name")
    issue: int = Field(ge=1)
    prompt: str = Field(min_length=1, max_length=8000)
    attempts: int = Field(1, ge=1, le=10)


def setup(app: web.Application) -> None:
    app.router.add_get("/api/jobs", list_jobs)
    app.router.add_post("/api/jobs", start_job)
    app.router.add_get("/api/jobs/{job_id}", get_job)
    app.router.add_post("/api/jobs/{job_id}/cancel", cancel_job)
    app.router.add_get("/api/runs/{run_id}", get_run)


def _authorized(request: web.Request) -> None:
    from app.web import SETTINGS

    expected = request.app[SETTINGS].api_token
    if expected is None:
        raise web.HTTPServiceUnavailable(
            text="the API is off: set HANGAR_API_TOKEN to a long random string to enable it")
    given = request.headers.get("Authorization", "")
    if not hmac.compare_digest(given.encode(), f"Bearer {expected.get_secret_value()}".encode()):
        raise web.HTTPUnauthorized(text="send Authorization: Bearer <HANGAR_API_TOKEN>")


def _engine(request: web.Request):
    from app.web import ENGINE

    return request.app[ENGINE]


def job_view(engine, job: Job) -> dict:
    runs = engine.runs_of(job.id)
    return {
        "job": job.model_dump(mode="json", exclude={"rendered"}),
        "runs": [r.model_dump(mode="json", exclude={"env", "watch", "sandbox"}) for r in runs],
        "timeline": [{"at": at, "what": what} for at, what in engine.store.notes(job.id)],
    }


async def list_jobs(request: web.Request) -> web.Response:
    _authorized(request)
    jobs = _engine(request).store.all("job", Job)
    repo = request.query.get("repo")
    return web.json_response([
        {"id": j.id, "repo": j.thread.repo, "issue": j.thread.number, "state": j.state,
         "requested_by": j.requested_by, "created_at": j.created_at}
        for j in jobs if repo is None or j.thread.repo == repo
    ])


async def start_job(request: web.Request) -> web.Response:
    """Work on an issue as if a maintainer had commented `/hangar <prompt>` on it."""
    from app.intents import job_id_for

    _authorized(request)
    try:
        body = StartJob.model_validate(await request.json())
    except (ValueError, ValidationError) as exc:
        raise web.HTTPUnprocessableEntity(
            text=f"send JSON {{repo: owner/name, issue: N, prompt: text, attempts: 1-10}}: "
                 f"{exc}") from None
    engine = _engine(request)
    auth = engine.auth
    installation = await get_or_none(await auth.client_for_app(),
                                     f"/repos/{body.repo}/installation", jwt=auth.jwt())
    if installation is None:
        raise web.HTTPNotFound(text=f"the App is not installed on {body.repo}")
    gh = await auth.client(installation["id"])
    try:
        repo = await gh.getitem(f"/repos/{body.repo}")
        issue = await gh.getitem(f"/repos/{body.repo}/issues/{body.issue}")
    except BadRequest as exc:
        raise web.HTTPNotFound(text=f"{body.repo}#{body.issue}: {exc}") from None
    if issue.get("pull_request"):
        raise web.HTTPUnprocessableEntity(
            text="give an issue number; follow-up turns on a PR are asked for in a comment")
    intent = Intent(
        id=f"api-{uuid.uuid4().hex[:12]}", comment_id=0, author="api", author_type="Api",
        thread=Thread(repo=body.repo, number=body.issue, installation_id=installation["id"]),
        command="run" if body.attempts == 1 else "try",
        args={"prompt": body.prompt, "n": body.attempts},
        title=issue.get("title") or "", body=issue.get("body") or "",
        clone_url=repo["clone_url"], default_branch=repo["default_branch"],
    )
    engine.save_intent(intent)
    engine.wake()
    return web.json_response({"job": job_id_for(intent.id), "intent": intent.id}, status=202)


async def get_job(request: web.Request) -> web.Response:
    _authorized(request)
    engine = _engine(request)
    job = engine.get_job(request.match_info["job_id"])
    if job is None:
        raise web.HTTPNotFound(text="no job with this id (a job just asked for appears "
                                    "within a second)")
    return web.json_response(job_view(engine, job))


async def cancel_job(request: web.Request) -> web.Response:
    _authorized(request)
    engine = _engine(request)
    job = engine.get_job(request.match_info["job_id"])
    if job is None:
        raise web.HTTPNotFound(text="no job with this id")
    cancelled = []
    for run in engine.runs_of(job.id):
        if not run.finished and run.state in (RunState.QUEUED, RunState.RUNNING):
            engine.patch_run(run.id, cancel_requested=True)
            cancelled.append(run.id)
    engine.note(job.id, f"cancelled {len(cancelled)} run(s) through the API")
    engine.wake()
    return web.json_response({"cancelled": cancelled})


async def get_run(request: web.Request) -> web.Response:
    _authorized(request)
    run = _engine(request).store.get("run", request.match_info["run_id"], Run)
    if run is None:
        raise web.HTTPNotFound(text="no run with this id")
    return web.json_response(run.model_dump(mode="json", exclude={"env", "watch", "sandbox"}))
