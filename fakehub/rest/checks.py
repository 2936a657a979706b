"""Check runs, check suites, commit statuses and the combined status."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from aiohttp import web

from fakehub import gitrepo
from fakehub.hub import HubError
from fakehub.rest.common import (
    ApiError,
    body_json,
    from_hub_error,
    hub,
    int_param,
    not_found,
    page,
    reply,
    repo_for,
    require_identity,
)
from fakehub.state import CheckRun, Repo

routes = web.RouteTableDef()

STATUSES = ("queued", "in_progress", "completed")
CONCLUSIONS = ("action_required", "cancelled", "failure", "neutral", "success", "skipped",
               "timed_out")


OUTPUT_LIMIT_BYTES = 65_535  # GitHub's limit on a check run's output.summary and .text

def _invalid(field: str, message: str | None = None) -> ApiError:
    error: dict[str, Any] = {"resource": "CheckRun", "code": "invalid", "field": field}
    if message:
        error["message"] = message
    return ApiError(422, "Validation Failed", [error])


def _validate_check_fields(body: dict[str, Any], creating: bool) -> None:
    """The limits GitHub enforces on check-run bodies."""
    if creating:
        for field in ("name", "head_sha"):
            if not isinstance(body.get(field), str) or not body[field]:
                raise ApiError(422, "Validation Failed",
                               [{"resource": "CheckRun", "code": "missing_field", "field": field}])
    if "status" in body and body["status"] not in STATUSES:
        raise _invalid("status")
    if body.get("conclusion") is not None and body["conclusion"] not in CONCLUSIONS:
        raise _invalid("conclusion")
    if body.get("status") == "completed" and not body.get("conclusion"):
        raise ApiError(422, "Validation Failed",
                       [{"resource": "CheckRun", "code": "missing_field", "field": "conclusion"}])
    output = body.get("output")
    if output is not None:
        if not isinstance(output, dict) or not output.get("title") or "summary" not in output:
            raise _invalid("output", "output requires title and summary")
        for field in ("summary", "text"):
            if len((output.get(field) or "").encode()) > OUTPUT_LIMIT_BYTES:
                raise _invalid(f"output.{field}", f"{field} is too long (maximum is "
                                                  f"{OUTPUT_LIMIT_BYTES} bytes)")
        if len(output.get("annotations") or []) > 50:
            raise _invalid("output.annotations", "at most 50 annotations per request")
    actions = body.get("actions")
    if actions is not None:
        if len(actions) > 3:
            raise _invalid("actions", "at most 3 actions")
        for action in actions:
            if len(action.get("label", "")) > 20 or len(action.get("description", "")) > 40 \
                    or len(action.get("identifier", "")) > 20:
                raise _invalid("actions", "label ≤ 20, description ≤ 40, identifier ≤ 20")


def _run(request: web.Request, repo: Repo) -> CheckRun:
    run = hub(request).store.check_runs.get(int_param(request, "check_run_id"))
    if run is None or run.repo_id != repo.id:
        raise not_found()
    return run


@routes.post("/repos/{owner}/{repo}/check-runs")
async def create_check_run(request: web.Request) -> web.Response:
    repo = repo_for(request, "checks", "write")
    ident = require_identity(request)
    h = hub(request)
    body = await body_json(request)
    _validate_check_fields(body, creating=True)
    try:
        run = h.create_check_run(repo, ident.app_id, body, ident.user)  # type: ignore[arg-type]
    except HubError as exc:
        raise from_hub_error(exc) from exc
    return reply(h.shapes.check_run(run), status=201)


@routes.get("/repos/{owner}/{repo}/check-runs/{check_run_id}")
async def get_check_run(request: web.Request) -> web.Response:
    repo = repo_for(request, "checks", "read")
    return reply(hub(request).shapes.check_run(_run(request, repo)))


@routes.patch("/repos/{owner}/{repo}/check-runs/{check_run_id}")
async def update_check_run(request: web.Request) -> web.Response:
    repo = repo_for(request, "checks", "write")
    ident = require_identity(request)
    h = hub(request)
    run = _run(request, repo)
    body = await body_json(request)
    _validate_check_fields(body, creating=False)
    try:
        h.update_check_run(repo, run, ident.app_id, body, ident.user)  # type: ignore[arg-type]
    except HubError as exc:
        raise from_hub_error(exc) from exc
    return reply(h.shapes.check_run(run))


@routes.get("/repos/{owner}/{repo}/check-runs/{check_run_id}/annotations")
async def list_annotations(request: web.Request) -> web.Response:
    repo = repo_for(request, "checks", "read")
    run = _run(request, repo)
    blob = f"{hub(request).base_url}/{repo.full_name}/blob/{run.head_sha}"
    shaped = [
        {
            "path": a.get("path"),
            "start_line": a.get("start_line"),
            "end_line": a.get("end_line"),
            "start_column": a.get("start_column"),
            "end_column": a.get("end_column"),
            "annotation_level": a.get("annotation_level"),
            "title": a.get("title"),
            "message": a.get("message"),
            "raw_details": a.get("raw_details"),
            "blob_href": f"{blob}/{a.get('path')}",
        }
        for a in run.annotations
    ]
    chunk, headers = page(request, shaped)
    return reply(chunk, headers=headers)


def _sha_for(repo: Repo, ref: str) -> str:
    sha = gitrepo.resolve(repo.path, unquote(ref))
    if sha is None:
        raise ApiError(422, f"No commit found for SHA: {ref}")
    return sha


@routes.get("/repos/{owner}/{repo}/commits/{ref:.+}/check-runs")
async def list_check_runs(request: web.Request) -> web.Response:
    repo = repo_for(request, "checks", "read")
    h = hub(request)
    sha = _sha_for(repo, request.match_info["ref"])
    runs = sorted(h.store.check_runs_for(repo, sha), key=lambda r: r.id, reverse=True)
    if name := request.query.get("check_name"):
        runs = [r for r in runs if r.name == name]
    if status := request.query.get("status"):
        runs = [r for r in runs if r.status == status]
    if app_id := request.query.get("app_id"):
        runs = [r for r in runs if str(r.app_id) == app_id]
    if request.query.get("filter", "latest") == "latest":
        latest: dict[tuple[int, str], CheckRun] = {}
        for run in runs:  # newest first
            latest.setdefault((run.app_id, run.name), run)
        runs = list(latest.values())
    chunk, headers = page(request, [h.shapes.check_run(r) for r in runs])
    return reply({"total_count": len(runs), "check_runs": chunk}, headers=headers)


@routes.get("/repos/{owner}/{repo}/commits/{ref:.+}/check-suites")
async def list_check_suites(request: web.Request) -> web.Response:
    repo = repo_for(request, "checks", "read")
    h = hub(request)
    sha = _sha_for(repo, request.match_info["ref"])
    suites = [s for s in h.store.check_suites.values()
              if s.repo_id == repo.id and s.head_sha == sha]
    if app_id := request.query.get("app_id"):
        suites = [s for s in suites if str(s.app_id) == app_id]
    chunk, headers = page(request, [h.shapes.check_suite(s) for s in suites])
    return reply({"total_count": len(suites), "check_suites": chunk}, headers=headers)


@routes.get("/repos/{owner}/{repo}/check-suites/{check_suite_id}")
async def get_check_suite(request: web.Request) -> web.Response:
    repo = repo_for(request, "checks", "read")
    h = hub(request)
    suite = h.store.check_suites.get(int_param(request, "check_suite_id"))
    if suite is None or suite.repo_id != repo.id:
        raise not_found()
    return reply(h.shapes.check_suite(suite))


@routes.get("/repos/{owner}/{repo}/commits/{ref:.+}/statuses")
async def list_statuses(request: web.Request) -> web.Response:
    repo = repo_for(request, "statuses", "read")
    h = hub(request)
    sha = _sha_for(repo, request.match_info["ref"])
    chunk, headers = page(request, [h.shapes.status(s) for s in h.store.statuses_for(repo, sha)])
    return reply(chunk, headers=headers)


@routes.get("/repos/{owner}/{repo}/commits/{ref:.+}/status")
async def combined_status(request: web.Request) -> web.Response:
    repo = repo_for(request, "statuses", "read")
    h = hub(request)
    sha = _sha_for(repo, request.match_info["ref"])
    latest: dict[str, Any] = {}
    for status in h.store.statuses_for(repo, sha):  # newest first
        latest.setdefault(status.context, status)
    states = {s.state for s in latest.values()}
    state = ("failure" if states & {"failure", "error"} else "pending"
             if "pending" in states or not states else "success")
    api = f"{h.api_url}/repos/{repo.full_name}"
    # GitHub pages the combined status's statuses too (30 by default, Link header).
    chunk, headers = page(request, [h.shapes.status(s) for s in latest.values()])
    return reply({
        "state": state,
        "statuses": chunk,
        "sha": sha,
        "total_count": len(latest),
        "repository": h.shapes.repo(repo, webhook=False),
        "commit_url": f"{api}/commits/{sha}",
        "url": f"{api}/commits/{sha}/status",
    }, headers=headers)


@routes.post("/repos/{owner}/{repo}/statuses/{sha}")
async def create_status(request: web.Request) -> web.Response:
    repo = repo_for(request, "statuses", "write")
    ident = require_identity(request)
    h = hub(request)
    body = await body_json(request)
    try:
        status = h.create_status(repo, request.match_info["sha"], body, ident)
    except HubError as exc:
        raise from_hub_error(exc) from exc
    return reply(h.shapes.status(status), status=201)
