"""What every REST handler shares: the caller, the repository, errors, JSON, pages."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from fakehub import auth
from fakehub.git_http import HUB_KEY
from fakehub.hub import Hub, HubError
from fakehub.state import Identity, Repo, permission_at_least

DOCS = "https://docs.github.com/rest"
IDENTITY_KEY = web.RequestKey("identity", object)


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        errors: list[Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.errors = errors
        self.headers = headers or {}


def error_body(status: int, message: str, errors: list[Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"message": message, "documentation_url": DOCS, "status": str(status)}
    if errors is not None:
        body["errors"] = errors
    return body


BODY_LIMIT_CHARS = 65_536  # GitHub's limit on issue, comment, PR and review bodies


def check_body_length(resource: str, body: dict[str, Any]) -> None:
    """GitHub's 422 for a body past its limit."""
    text = body.get("body")
    if isinstance(text, str) and len(text) > BODY_LIMIT_CHARS:
        raise ApiError(422, "Validation Failed", [{
            "resource": resource, "code": "custom", "field": "body",
            "message": f"body is too long (maximum is {BODY_LIMIT_CHARS} characters)"}])


def not_found() -> ApiError:
    return ApiError(404, "Not Found")


def validation_failed(resource: str, field: str, code: str = "missing_field") -> ApiError:
    return ApiError(
        422, "Validation Failed", [{"resource": resource, "field": field, "code": code}]
    )


def hub(request: web.Request) -> Hub:
    return request.app[HUB_KEY]


def identity(request: web.Request) -> Identity | None:
    if IDENTITY_KEY not in request:
        try:
            request[IDENTITY_KEY] = auth.identify(
                hub(request).store, request.headers.get("Authorization")
            )
        except auth.AuthError as exc:
            raise ApiError(exc.status, exc.message) from exc
    return request[IDENTITY_KEY]


def require_identity(request: web.Request) -> Identity:
    ident = identity(request)
    if ident is None:
        raise ApiError(401, "Requires authentication")
    return ident


def require_app(request: web.Request) -> Identity:
    ident = identity(request)
    if ident is None or ident.kind != "app":
        raise ApiError(
            401,
            "A JSON web token could not be decoded",
        )
    return ident


# Which users may do what, by the installation permission category a route needs.
_USER_LEVEL = {
    ("issues", "write"): "read",
    ("pull_requests", "write"): "read",
    ("contents", "write"): "write",
    ("statuses", "write"): "write",
    ("administration", "write"): "admin",
    ("administration", "read"): "read",
}


def repo_for(request: web.Request, category: str = "metadata", level: str = "read") -> Repo:
    """The repository in the path, if the caller may use `category` at `level` on it."""
    h = hub(request)
    ident = identity(request)
    repo = h.store.repo(f"{request.match_info['owner']}/{request.match_info['repo']}")
    if repo is None:
        raise not_found()
    if ident is not None and ident.kind == "app":
        raise ApiError(403, "Resource not accessible by integration")
    if not auth.can_read(h.store, ident, repo):
        raise not_found()
    if level == "read" and not (ident and ident.kind == "installation"):
        return repo
    if ident is None:
        raise ApiError(401, "Requires authentication")
    if ident.kind == "installation":
        covered = auth.installation_covers(h.store, ident, repo)
        if not covered and not repo.private and level == "read":
            return repo  # public data is readable with any token, as on GitHub
        have = auth.installation_permission(ident, category)
        if not covered or not permission_at_least(have, level):
            if not covered and repo.private:
                raise not_found()
            raise ApiError(403, "Resource not accessible by integration")
        return repo
    if category == "checks":
        raise ApiError(403, "You must authenticate via a GitHub App.")
    need = _USER_LEVEL.get((category, level), level)
    if not permission_at_least(h.store.permission(repo, ident.user), need):
        raise ApiError(403, "Resource not accessible by personal access token")
    return repo


async def body_json(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    if not raw:
        return {}
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise ApiError(400, "Problems parsing JSON") from exc
    if not isinstance(data, dict):
        raise ApiError(400, "Problems parsing JSON")
    return data


def reply(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response(data, status=status, headers=headers)


def page(request: web.Request, items: list[Any]) -> tuple[list[Any], dict[str, str]]:
    """One page of `items` and the Link header GitHub would send with it."""
    try:
        per_page = max(1, min(100, int(request.query.get("per_page", "30"))))
        number = max(1, int(request.query.get("page", "1")))
    except ValueError as exc:
        raise ApiError(400, "Invalid page parameter") from exc
    start = (number - 1) * per_page
    chunk = items[start : start + per_page]
    last = max(1, -(-len(items) // per_page))
    links = []
    base = request.url.with_query({k: v for k, v in request.query.items() if k != "page"})
    if number < last:
        links.append(f'<{base.update_query(page=number + 1)}>; rel="next"')
        links.append(f'<{base.update_query(page=last)}>; rel="last"')
    if number > 1:
        links.append(f'<{base.update_query(page=1)}>; rel="first"')
        links.append(f'<{base.update_query(page=number - 1)}>; rel="prev"')
    return chunk, ({"Link": ", ".join(links)} if links else {})


def from_hub_error(exc: HubError) -> ApiError:
    return ApiError(exc.status, exc.message, exc.errors)


def int_param(request: web.Request, name: str) -> int:
    try:
        return int(request.match_info[name])
    except ValueError as exc:
        raise not_found() from exc
