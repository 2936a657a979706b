"""App endpoints: the App itself, installations, installation tokens, deliveries."""

from __future__ import annotations

from aiohttp import web

from fakehub import auth
from fakehub.rest.common import (
    ApiError,
    body_json,
    hub,
    int_param,
    not_found,
    page,
    reply,
    require_app,
    require_identity,
)
from fakehub.state import iso

routes = web.RouteTableDef()


@routes.get("/app")
async def get_app(request: web.Request) -> web.Response:
    ident = require_app(request)
    h = hub(request)
    shaped = h.shapes.app(h.store.apps[ident.app_id])  # type: ignore[index]
    shaped["installations_count"] = sum(
        1 for i in h.store.installations.values() if i.app_id == ident.app_id
    )
    return reply(shaped)


@routes.get("/app/installations")
async def list_installations(request: web.Request) -> web.Response:
    ident = require_app(request)
    h = hub(request)
    found = [h.shapes.installation(i) for i in h.store.installations.values()
             if i.app_id == ident.app_id]
    chunk, headers = page(request, found)
    return reply(chunk, headers=headers)


@routes.get("/app/installations/{installation_id}")
async def get_installation(request: web.Request) -> web.Response:
    ident = require_app(request)
    h = hub(request)
    inst = h.store.installations.get(int_param(request, "installation_id"))
    if inst is None or inst.app_id != ident.app_id:
        raise not_found()
    return reply(h.shapes.installation(inst))


@routes.post("/app/installations/{installation_id}/access_tokens")
async def create_access_token(request: web.Request) -> web.Response:
    ident = require_app(request)
    h = hub(request)
    inst = h.store.installations.get(int_param(request, "installation_id"))
    if inst is None or inst.app_id != ident.app_id:
        raise not_found()
    body = await body_json(request)
    try:
        token = auth.mint_installation_token(
            h.store,
            inst,
            repositories=body.get("repositories"),
            repository_ids=body.get("repository_ids"),
            permissions=body.get("permissions"),
        )
    except auth.AuthError as exc:
        raise ApiError(exc.status, exc.message) from exc
    shaped = {
        "token": token.token,
        "expires_at": iso(token.expires_at),
        "permissions": token.permissions,
        "repository_selection": "all"
        if inst.repo_ids is None and token.repo_ids is None
        else "selected",
    }
    if token.repo_ids is not None:
        shaped["repositories"] = [
            h.shapes.repo_rest(r)
            for r in h.store.installation_repos(inst)
            if r.id in token.repo_ids
        ]
    return reply(shaped, status=201)


@routes.get("/repos/{owner}/{repo}/installation")
async def repo_installation(request: web.Request) -> web.Response:
    ident = require_app(request)
    h = hub(request)
    repo = h.store.repo(f"{request.match_info['owner']}/{request.match_info['repo']}")
    inst = h.store.installation_for(ident.app_id, repo) if repo else None  # type: ignore[arg-type]
    if inst is None:
        raise not_found()
    return reply(h.shapes.installation(inst))


@routes.get("/installation/repositories")
async def installation_repositories(request: web.Request) -> web.Response:
    ident = require_identity(request)
    if ident.kind != "installation":
        raise ApiError(403, "You must authenticate with an installation access token in order "
                            "to list repositories for an installation.")
    h = hub(request)
    inst = h.store.installations[ident.installation_id]  # type: ignore[index]
    repos = [r for r in h.store.installation_repos(inst)
             if ident.token is None or ident.token.repo_ids is None
             or r.id in ident.token.repo_ids]
    chunk, headers = page(request, [h.shapes.repo_rest(r) for r in repos])
    return reply(
        {"total_count": len(repos), "repository_selection":
         "all" if inst.repo_ids is None else "selected", "repositories": chunk},
        headers=headers,
    )


@routes.get("/app/hook/deliveries")
async def list_deliveries(request: web.Request) -> web.Response:
    ident = require_app(request)
    h = hub(request)
    found = [d for d in reversed(h.store.deliveries) if d.app_id == ident.app_id]
    chunk, headers = page(request, [_delivery(d) for d in found])
    return reply(chunk, headers=headers)


@routes.post("/app/hook/deliveries/{delivery_id}/attempts")
async def redeliver(request: web.Request) -> web.Response:
    ident = require_app(request)
    h = hub(request)
    wanted = int_param(request, "delivery_id")
    delivery = next((d for d in h.store.deliveries if d.id == wanted and d.app_id == ident.app_id),
                    None)
    if delivery is None:
        raise not_found()
    h.deliverer.redeliver(delivery.guid)
    return reply({}, status=202)


def _delivery(d) -> dict:
    return {
        "id": d.id,
        "guid": d.guid,
        "delivered_at": iso(d.delivered_at),
        "redelivery": d.redelivery,
        "duration": d.duration,
        "status": "OK" if d.status_code and d.status_code < 300 else (d.error or "failed"),
        "status_code": d.status_code or 0,
        "event": d.event,
        "action": d.action,
        "installation_id": d.installation_id,
        "repository_id": d.repository_id,
        "throttled_at": None,
    }
