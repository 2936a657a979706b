"""The aiohttp application: REST under /api/v3, git at /{owner}/{repo}.git."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time

from aiohttp import web

from fakehub import gql, oauth, webpages
from fakehub.faults import FAULTS_KEY, Faults, answer
from fakehub.git_http import HUB_KEY, add_git_routes
from fakehub.hub import Hub, HubError
from fakehub.rest import apps, attachments, checks, issues, pulls, redirects, repos
from fakehub.rest.common import ApiError, error_body, identity

log = logging.getLogger("fakehub.server")

API_PREFIX = "/api/v3"
def _caller(request: web.Request) -> tuple[str, int | None]:
    """(rate-limit key, app id) of a REST caller, tolerant of bad credentials. The key
    names whose allowance a call is charged to: an installation's (its tokens), the
    App's own (its JWT), a user's, or an address's."""
    try:
        ident = identity(request)
    except ApiError:
        return "invalid", None
    if ident is None:
        return f"ip:{request.remote}", None
    return f"{ident.kind}:{ident.installation_id or ident.user.id}", ident.app_id


def _json_error(status: int, message: str, errors=None, headers=None) -> web.Response:
    return web.json_response(error_body(status, message, errors), status=status, headers=headers)


def build_api(hub: Hub, faults: Faults) -> web.Application:
    rates = hub.rates

    @web.middleware
    async def gateway(request: web.Request, handler) -> web.StreamResponse:
        path = request.path.removeprefix(API_PREFIX) or "/"
        started = time.monotonic()
        fault = faults.pick(request.method, path)
        key, app_id = _caller(request)
        refused = rates.refusal(key, request.method) if hub.enforce_rate_limits else None
        if refused is not None:
            response: web.StreamResponse = refused
        elif fault is not None and fault.after:
            await _dispatch(request, handler)  # done, but the answer is lost on the way
            response = await answer(fault)
        elif fault is not None:
            response = await answer(fault)
        else:
            response = await _dispatch(request, handler)
            response = _conditional(request, response)
            if response.status == 304:
                response.headers.update(rates.headers(key))  # a 304 costs nothing
            else:
                response.headers.update(rates.charge(key, request.method))
        response.headers.setdefault("X-GitHub-Request-Id", f"FAKE:{id(request):x}")
        response.headers.setdefault("X-GitHub-Media-Type", "github.v3; format=json")
        hub.store.api_calls.append((app_id, key, request.method, path, response.status))
        if hub.record_exchanges:
            await _record(hub, request, path, response, time.monotonic() - started)
        return response

    api = web.Application(middlewares=[gateway])
    api[HUB_KEY] = hub
    # Order matters: the more specific commit sub-resources come before commits/{ref}.
    for table in (checks.routes, apps.routes, issues.routes, pulls.routes, repos.routes,
                  oauth.api_routes, redirects.routes):
        api.add_routes(table)
    api.router.add_route("*", "/{tail:.*}", _not_found)
    return api


def _conditional(request: web.Request, response: web.StreamResponse) -> web.StreamResponse:
    """A GET answered 200 carries an ETag; asked again with it (If-None-Match), 304. As
    GitHub's, the ETag is specific to the token that asked: another token's is no match."""
    body = getattr(response, "body", None)
    if request.method != "GET" or response.status != 200 or not isinstance(body, bytes):
        return response
    token = request.headers.get("Authorization", "").encode()
    digest = hashlib.sha256(body + response.headers.get("Link", "").encode()
                            + b"\0" + token).hexdigest()
    etag = f'"{digest[:40]}"'
    if etag in [t.strip().removeprefix("W/") for t in
                request.headers.get("If-None-Match", "").split(",")]:
        return web.Response(status=304, headers={"ETag": etag})
    response.headers["ETag"] = etag
    return response


async def _dispatch(request: web.Request, handler) -> web.StreamResponse:
    try:
        # A renamed repository's old name is redirected before any route sees it.
        return redirects.moved(request, API_PREFIX) or await handler(request)
    except ApiError as exc:
        return _json_error(exc.status, exc.message, exc.errors, exc.headers)
    except HubError as exc:
        return _json_error(exc.status, exc.message, exc.errors)
    except web.HTTPException as exc:
        if exc.status == 405:
            return _json_error(404, "Not Found")
        return _json_error(exc.status, exc.reason)
    except Exception:
        log.exception("fakehub bug on %s %s", request.method, request.path)
        return _json_error(500, "Server Error")


async def _not_found(request: web.Request) -> web.Response:
    raise ApiError(404, "Not Found")


async def _record(hub: Hub, request: web.Request, path: str, response, elapsed: float) -> None:
    """Keep request and response bodies for the contract tests."""
    raw = await request.read() if request.body_exists else b""  # read() keeps the bytes
    body = getattr(response, "body", None)
    resource = request.match_info.route.resource
    hub.exchanges.append({
        "method": request.method,
        "path": path,
        "route": resource.canonical if resource is not None else None,
        "status": response.status,
        "request": json.loads(raw) if raw else None,
        "response": json.loads(body) if isinstance(body, bytes | bytearray) and body else None,
        "elapsed": elapsed,
    })


def create_app(hub: Hub) -> web.Application:
    faults = Faults()
    app = web.Application(client_max_size=1024**3)
    app[HUB_KEY] = hub
    app[FAULTS_KEY] = faults
    app.add_subapp(API_PREFIX, build_api(hub, faults))
    app.router.add_post("/api/graphql", gql.endpoint)  # GitHub Enterprise's GraphQL address
    app.add_routes(apps.web_routes)  # the App manifest flow's pages on the web host
    app.add_routes(oauth.web_routes)  # sign-in with GitHub: the web application flow
    app.add_routes(webpages.routes)  # the issue, PR, check run and commit pages links lead to
    app.add_routes(attachments.web_routes)  # files attached to issues and comments
    add_git_routes(app)

    async def lifecycle(app: web.Application):
        await hub.deliverer.start()
        yield
        # Stopping drops what is still queued: a test's teardown must not wait on a
        # receiver that is already gone. Driver.settle() is there to wait on purpose.
        for task in list(hub._background):
            task.cancel()
        await asyncio.gather(*hub._background, return_exceptions=True)
        await hub.deliverer.stop()

    app.cleanup_ctx.append(lifecycle)
    return app
