"""The REST API for scripts and orchestrators: read jobs, runs and their timelines.

Every route needs `Authorization: Bearer <HANGAR_API_TOKEN>`; without a configured token
the API answers 503 and says how to enable it.
"""

from __future__ import annotations

import hmac

from aiohttp import web

from app.models import Job, Run


def setup(app: web.Application) -> None:
    app.router.add_get("/api/jobs", list_jobs)
    app.router.add_get("/api/jobs/{job_id}", get_job)
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


def _store(request: web.Request):
    from app.web import STORE

    return request.app[STORE]


async def list_jobs(request: web.Request) -> web.Response:
    _authorized(request)
    jobs = _store(request).all("job", Job)
    repo = request.query.get("repo")
    return web.json_response([
        {"id": j.id, "repo": j.thread.repo, "issue": j.thread.number, "state": j.state,
         "requested_by": j.requested_by, "created_at": j.created_at}
        for j in jobs if repo is None or j.thread.repo == repo
    ])


async def get_job(request: web.Request) -> web.Response:
    _authorized(request)
    store = _store(request)
    job = store.get("job", request.match_info["job_id"], Job)
    if job is None:
        raise web.HTTPNotFound(text="no job with this id")
    runs = [r for r in store.all("run", Run) if r.job_id == job.id]
    return web.json_response({
        "job": job.model_dump(mode="json"),
        "runs": [r.model_dump(mode="json", exclude={"env"}) for r in runs],
        "timeline": [{"at": at, "what": what} for at, what in store.notes(job.id)],
    })


async def get_run(request: web.Request) -> web.Response:
    _authorized(request)
    run = _store(request).get("run", request.match_info["run_id"], Run)
    if run is None:
        raise web.HTTPNotFound(text="no run with this id")
    return web.json_response(run.model_dump(mode="json", exclude={"env"}))
