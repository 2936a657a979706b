"""Environment builds per repository: their history, a build now, rollback and unpin (the
admin's, as `hangar env ...`)."""

from __future__ import annotations

from aiohttp import web

from app import envbuilds
from app.web.api.calls import ApiError, Call, ok, route


@route("GET", "/api/envs/{owner}/{repo}/builds", "admin",
       "A repository's environment builds per lane: versions, the active one, the pin")
async def env_builds(call: Call) -> web.Response:
    repo = f"{call.param('owner')}/{call.param('repo')}"
    lanes = []
    for lid in envbuilds.lanes_of(call.store, repo):
        current = envbuilds.active(call.store, lid)
        lanes.append({
            "lane": lid, "pinned": envbuilds.lane(call.store, lid).pinned_id,
            "active": current.id if current else None,
            "builds": [b.model_dump(mode="json", exclude={"log_tail"})
                       for b in envbuilds.history(call.store, lid)],
        })
    return ok({"repo": repo, "lanes": lanes})


@route("POST", "/api/envs/builds/{build_id}/rollback", "admin",
       "Make a build that succeeded the active one, pinned (as `hangar env rollback`)",
       action="env.rollback", conflicts=True)
async def env_rollback(call: Call) -> web.Response:
    try:
        envbuilds.find(call.store, call.param("build_id"))
    except envbuilds.BuildError as exc:
        raise ApiError(404, str(exc)) from None
    try:
        row = envbuilds.rollback(call.store, call.param("build_id"), who=call.principal.who)
    except envbuilds.BuildError as exc:  # it did not succeed: nothing to roll back to
        raise ApiError(409, str(exc)) from None
    call.audited = True  # by envbuilds.rollback, as from the CLI
    call.audit_target = f"{row.repo} {row.id} v{row.version}"
    return ok({"repo": row.repo, "active": row.id, "version": row.version, "pinned": True})


@route("POST", "/api/envs/{owner}/{repo}/unpin", "admin",
       "Let new builds take over again in every lane of a repository (`hangar env unpin`)",
       action="env.unpin")
async def env_unpin(call: Call) -> web.Response:
    repo = f"{call.param('owner')}/{call.param('repo')}"
    released = envbuilds.unpin(call.store, repo, who=call.principal.who)
    call.audit_target = repo
    call.audited = True  # by envbuilds.unpin, as from the CLI
    return ok({"repo": repo, "unpinned": released})


@route("POST", "/api/envs/{owner}/{repo}/builds", "admin",
       "Build a repository's environment now, even after a failed build with the same key "
       "(`hangar env build-repo`); 202 with the queued build, or 200 when one is already "
       "queued or running", action="env.build", success=202)
async def env_build(call: Call) -> web.Response:
    repo = f"{call.param('owner')}/{call.param('repo')}"
    try:
        row = await envbuilds.request_build(call.engine, repo, who=call.principal.who)
    except envbuilds.BuildError as exc:
        raise ApiError(409, str(exc)) from None
    call.audit_target = repo
    call.audited = row is not None  # envbuilds.queue_build wrote env.build
    if row is None:
        return ok({"repo": repo, "queued": None,
                   "message": "a build of this repository is already queued or running"})
    return ok({"repo": repo, "queued": row.id, "version": row.version}, status=202)


@route("GET", "/api/envs/builds/{build_id}", "admin",
       "One environment build: its config, state and the end of its install output "
       "(`hangar env build-show`)")
async def env_build_show(call: Call) -> web.Response:
    try:
        row = envbuilds.find(call.store, call.param("build_id"))
    except envbuilds.BuildError as exc:
        raise ApiError(404, str(exc)) from None
    return ok(row.model_dump(mode="json"))
