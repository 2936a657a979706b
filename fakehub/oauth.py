"""A GitHub App's web application flow: the authorize page, the code exchange, `GET /user`.

As on GitHub (docs: "Generating a user access token for a GitHub App"):
`GET /login/oauth/authorize?client_id=…&redirect_uri=…&state=…` shows a consent page;
authorizing sends the browser to the redirect URI with `code` and the same `state`. A
code is good for ten minutes and one use; `POST /login/oauth/access_token` (client_id,
client_secret, code, redirect_uri) answers form-encoded, or JSON when asked with
`Accept: application/json`, and reports a bad code or bad credentials with status 200
and an `error` field. The token is a user access token (`ghu_…`, eight hours) that
`GET /user` reads.

fakehub has no passwords: its consent page asks which user is signed in, as a test's
browser would have been on github.com.
"""

from __future__ import annotations

import secrets
from datetime import timedelta
from html import escape
from urllib.parse import urlencode, urlsplit

from aiohttp import web

from fakehub.rest.common import ApiError, hub, reply, require_identity
from fakehub.state import App, Token, iso, now

CODE_TTL = timedelta(minutes=10)
USER_TOKEN_LIFETIME = timedelta(hours=8)
ERROR_URI = "https://docs.github.com/apps/managing-oauth-apps/troubleshooting-oauth-app-access-token-request-errors"
LOOPBACK = ("127.0.0.1", "::1", "localhost")

web_routes = web.RouteTableDef()
api_routes = web.RouteTableDef()


def _app(request: web.Request, client_id: str) -> App | None:
    return next((a for a in hub(request).store.apps.values() if a.client_id == client_id), None)


def redirect_allowed(app: App, redirect_uri: str) -> bool:
    """GitHub's rule: the redirect URI's scheme, host and port are the callback URL's and
    its path lies under the callback's path; on a loopback host any port will do."""
    wanted = urlsplit(redirect_uri)
    for callback in app.callback_urls:
        have = urlsplit(callback)
        base, path = have.path.rstrip("/"), wanted.path or "/"
        loopback = have.hostname in LOOPBACK and wanted.hostname == have.hostname
        if (wanted.scheme == have.scheme and wanted.hostname == have.hostname
                and (loopback or wanted.port == have.port)
                and (not base or path == base or path.startswith(base + "/"))):
            return True
    return False


def _page(title: str, body: str, status: int = 200) -> web.Response:
    text = (f"<!doctype html><html><head><meta charset=utf-8><title>{escape(title)}</title>"
            f"</head><body><h1>{escape(title)}</h1>{body}</body></html>")
    return web.Response(text=text, status=status, content_type="text/html")


def _target(request: web.Request, query) -> tuple[App, str] | web.Response:
    app = _app(request, str(query.get("client_id", "")))
    if app is None:
        return _page("Not Found", "<p>No application has this client_id.</p>", 404)
    redirect_uri = str(query.get("redirect_uri") or (app.callback_urls or [""])[0])
    if not redirect_uri or not redirect_allowed(app, redirect_uri):
        return _page("Redirect URI mismatch", "<p>The redirect_uri is not associated with "
                     "this application.</p>", 400)
    return app, redirect_uri


@web_routes.get("/login/oauth/authorize")
async def authorize_page(request: web.Request) -> web.Response:
    found = _target(request, request.query)
    if isinstance(found, web.Response):
        return found
    app, redirect_uri = found
    hidden = "".join(
        f'<input type=hidden name="{name}" value="{escape(str(value))}">'
        for name, value in (("client_id", app.client_id), ("redirect_uri", redirect_uri),
                            ("state", request.query.get("state", ""))))
    return _page(f"Authorize {app.name}", (
        f"<form method=post action=/login/oauth/authorize>{hidden}"
        "<label for=login>Signed in to fakehub as</label> <input id=login name=login "
        f"value=\"{escape(request.query.get('login', ''))}\"> "
        f"<button type=submit id=authorize>Authorize {escape(app.name)}</button></form>"))


@web_routes.post("/login/oauth/authorize")
async def authorize(request: web.Request) -> web.Response:
    form = await request.post()
    found = _target(request, form)
    if isinstance(found, web.Response):
        return found
    app, redirect_uri = found
    user = hub(request).store.user(str(form.get("login", "")))
    if user is None or user.type != "User":
        return _page("Sign in", "<p>Incorrect username.</p>", 422)
    code = secrets.token_hex(10)
    hub(request).store.oauth_codes[code] = (app.id, user.login, redirect_uri, now())
    query = {"code": code}
    if form.get("state"):
        query["state"] = str(form["state"])
    separator = "&" if urlsplit(redirect_uri).query else "?"
    raise web.HTTPFound(f"{redirect_uri}{separator}{urlencode(query)}")


@web_routes.post("/login/oauth/access_token")
async def access_token(request: web.Request) -> web.Response:
    fields = dict(request.query)
    if request.content_type == "application/json":
        fields.update({k: str(v) for k, v in (await request.json()).items()})
    else:
        fields.update({k: str(v) for k, v in (await request.post()).items()})
    store = hub(request).store
    app = _app(request, fields.get("client_id", ""))
    if app is None or not secrets.compare_digest(fields.get("client_secret", ""),
                                                 app.client_secret):
        return _answer(request, {"error": "incorrect_client_credentials",
                                 "error_description": "The client_id and/or client_secret "
                                 "passed are incorrect.", "error_uri": ERROR_URI})
    issued = store.oauth_codes.get(fields.get("code", ""))
    if issued is None or issued[0] != app.id or now() - issued[3] > CODE_TTL:
        return _answer(request, {"error": "bad_verification_code",
                                 "error_description": "The code passed is incorrect or "
                                 "expired.", "error_uri": ERROR_URI})
    if fields.get("redirect_uri") and fields["redirect_uri"] != issued[2]:
        return _answer(request, {"error": "redirect_uri_mismatch",
                                 "error_description": "The redirect_uri MUST match the "
                                 "registered callback URL for this application.",
                                 "error_uri": ERROR_URI})
    del store.oauth_codes[fields["code"]]
    token = Token(token="ghu_" + secrets.token_hex(18), kind="user",
                  expires_at=now() + USER_TOKEN_LIFETIME, login=issued[1], app_id=app.id)
    store.tokens[token.token] = token
    return _answer(request, {
        "access_token": token.token, "expires_in": int(USER_TOKEN_LIFETIME.total_seconds()),
        "refresh_token": "ghr_" + secrets.token_hex(38), "refresh_token_expires_in": 15897600,
        "scope": "", "token_type": "bearer"})


def _answer(request: web.Request, body: dict) -> web.Response:
    if "application/json" in request.headers.get("Accept", ""):
        return web.json_response(body)
    return web.Response(text=urlencode(body), content_type="application/x-www-form-urlencoded")


@api_routes.get("/user")
async def authenticated_user(request: web.Request) -> web.Response:
    ident = require_identity(request)
    if ident.kind != "user":
        raise ApiError(403, "Resource not accessible by integration")
    user = ident.user
    created = iso(now())  # fakehub keeps no sign-up date
    # The private user shape: the simple user's fields and the profile's.
    return reply({**hub(request).shapes.user(user), "name": user.name, "company": None,
                  "blog": "", "location": None, "email": user.email, "hireable": None,
                  "bio": None, "public_repos": 0, "public_gists": 0, "followers": 0,
                  "following": 0, "created_at": created, "updated_at": created,
                  "private_gists": 0, "total_private_repos": 0, "owned_private_repos": 0,
                  "disk_usage": 0, "collaborators": 0, "two_factor_authentication": False})
