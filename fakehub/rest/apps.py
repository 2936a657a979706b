"""App endpoints: the App itself, installations, installation tokens, deliveries, and
registering an App from a manifest (the web form and the code conversion)."""

from __future__ import annotations

import json
import secrets
from datetime import timedelta
from html import escape
from urllib.parse import urlencode, urlsplit

from aiohttp import web

from fakehub import auth
from fakehub.hub import HubError
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
from fakehub.state import iso, now

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
    # As on GitHub, a delivery is listed once it was attempted, not while it waits in line.
    found = [d for d in reversed(h.store.deliveries) if d.app_id == ident.app_id
             and (d.status_code is not None or d.error is not None)]
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


# -- registering an App from a manifest ---------------------------------------------
# GitHub's web pages (`/settings/apps/new`, `/organizations/{org}/settings/apps/new`)
# take the manifest as a form field and show it with a "Create GitHub App" button;
# creating redirects to the manifest's redirect_url with a code (good for one hour and
# one use), which `POST /app-manifests/{code}/conversions` turns into the App's
# credentials. fakehub has no web sign-in: a personal App belongs to fakehub's default
# apps owner, an organization's App to that organization.

MANIFEST_CODE_TTL = timedelta(hours=1)
web_routes = web.RouteTableDef()


@web_routes.post("/settings/apps/new")
@web_routes.post("/organizations/{org}/settings/apps/new")
async def manifest_form(request: web.Request) -> web.Response:
    form = await request.post()
    org = request.match_info.get("org")
    try:
        manifest = _manifest(str(form.get("manifest", "")))
    except ValueError as exc:
        return _html("Invalid GitHub App manifest", f"<p>{escape(str(exc))}</p>", 422)
    if org and hub(request).store.user(org) is None:
        return _html("Not Found", f"<p>No organization {escape(org)}.</p>", 404)
    hook = manifest.get("hook_attributes") or {}
    rows = [("Homepage URL", manifest["url"]), ("Webhook URL", hook.get("url") or "(none)"),
            ("Redirect URL", manifest.get("redirect_url") or "(none)"),
            ("Permissions", ", ".join(f"{k}: {v}" for k, v in sorted(
                (manifest.get("default_permissions") or {}).items()))),
            ("Events", ", ".join(manifest.get("default_events") or []))]
    listed = "".join(f"<tr><th>{escape(k)}</th><td id=\"{escape(k.lower().replace(' ', '-'))}\">"
                     f"{escape(str(v))}</td></tr>" for k, v in rows)
    body = (
        f"<p>Create a GitHub App for {escape(org or 'your personal account')} from this "
        "manifest.</p><form method=post action=\"/settings/apps/new/create\">"
        "<label for=name>GitHub App name</label> "
        f"<input id=name name=name value=\"{escape(str(manifest.get('name') or ''))}\">"
        f"<table>{listed}</table>"
        f"<input type=hidden name=manifest value=\"{escape(json.dumps(manifest))}\">"
        f"<input type=hidden name=state value=\"{escape(request.query.get('state', ''))}\">"
        f"<input type=hidden name=org value=\"{escape(org or '')}\">"
        "<button type=submit id=create>Create GitHub App</button></form>"
    )
    return _html("Create GitHub App", body)


@web_routes.post("/settings/apps/new/create")
async def manifest_create(request: web.Request) -> web.Response:
    form = await request.post()
    h = hub(request)
    try:
        manifest = _manifest(str(form.get("manifest", "")))
    except ValueError as exc:
        return _html("Invalid GitHub App manifest", f"<p>{escape(str(exc))}</p>", 422)
    name = str(form.get("name") or manifest.get("name") or "").strip()
    if not name:
        return _html("Name required", "<p>Give the GitHub App a name.</p>", 422)
    hook = manifest.get("hook_attributes") or {}
    try:
        app = h.create_app(
            name,
            hook.get("url") if hook.get("active", True) else None,
            list(manifest.get("default_events") or []),
            dict(manifest.get("default_permissions") or {}),
            owner=str(form.get("org") or "") or None,
            callback_urls=[str(u) for u in manifest.get("callback_urls") or []],
        )
    except HubError as exc:
        return _html("Name already taken", f"<p>{escape(exc.message)}: choose another "
                     "name.</p>", exc.status)
    code = secrets.token_hex(10)
    h.store.manifest_codes[code] = (app.id, now())
    target = manifest.get("redirect_url") or manifest["url"]
    query = {"code": code}
    if form.get("state"):
        query["state"] = str(form["state"])
    separator = "&" if urlsplit(target).query else "?"
    raise web.HTTPFound(f"{target}{separator}{urlencode(query)}")


@routes.post("/app-manifests/{code}/conversions")
async def manifest_conversion(request: web.Request) -> web.Response:
    h = hub(request)
    found = h.store.manifest_codes.pop(request.match_info["code"], None)
    if found is None or now() - found[1] > MANIFEST_CODE_TTL:
        raise not_found()
    app = h.store.apps[found[0]]
    shaped = h.shapes.app(app)
    shaped.update(pem=app.private_key_pem, webhook_secret=app.webhook_secret,
                  client_secret=app.client_secret)
    return reply(shaped, status=201)


def _manifest(text: str) -> dict:
    try:
        manifest = json.loads(text)
    except ValueError:
        raise ValueError("The manifest form field must be JSON.") from None
    if not isinstance(manifest, dict):
        raise ValueError("The manifest must be a JSON object.")
    if not manifest.get("url"):
        raise ValueError("The manifest needs a url (the App's homepage).")
    hook = manifest.get("hook_attributes")
    if hook is not None and (not isinstance(hook, dict) or
                             (hook.get("active", True) and not hook.get("url"))):
        raise ValueError("hook_attributes needs a url while the webhook is active.")
    return manifest


def _html(title: str, body: str, status: int = 200) -> web.Response:
    text = (f"<!doctype html><html><head><meta charset=utf-8><title>{escape(title)}</title>"
            f"</head><body><h1>{escape(title)}</h1>{body}</body></html>")
    return web.Response(text=text, status=status, content_type="text/html")


@web_routes.get("/apps/{slug}/installations/new")
async def install_form(request: web.Request) -> web.Response:
    app = _app_by_slug(request)
    return _html(f"Install {app.name}", (
        f"<form method=post><label for=account>Install {escape(app.name)} on the account"
        "</label> <input id=account name=account> "
        "<button type=submit id=install>Install</button></form>"))


@web_routes.post("/apps/{slug}/installations/new")
async def install_app(request: web.Request) -> web.Response:
    app = _app_by_slug(request)
    account = str((await request.post()).get("account", "")).strip()
    h = hub(request)
    if h.store.user(account) is None:
        return _html("Not Found", f"<p>No account {escape(account)}.</p>", 404)
    inst = h.install(app.id, account, None)
    return _html(f"Installed {app.name}", f"<p id=installed>{escape(app.name)} is installed "
                 f"on {escape(account)} (installation {inst.id}), all repositories.</p>")


def _app_by_slug(request: web.Request):
    slug = request.match_info["slug"]
    app = next((a for a in hub(request).store.apps.values() if a.slug == slug), None)
    if app is None:
        raise web.HTTPNotFound(text=f"No GitHub App {slug}.")
    return app
