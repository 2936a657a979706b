"""GitHub's REST redirects for a renamed repository: a call under its old full name is
sent to `/repositories/{id}/…` (301 Moved Permanently for GET and HEAD, 307 Temporary
Redirect, "repeat the request verbatim", for the rest), and `/repositories/{id}/…` is
served as `/repos/{owner}/{repo}/…` would be under the repository's current name."""

from __future__ import annotations

import re
from urllib.parse import unquote

from aiohttp import web
from yarl import URL

from fakehub import auth
from fakehub.rest.common import hub, identity, int_param, not_found

# Where GitHub's redirect answers point (gidgethub#214 quotes one from 2024).
DOCS = "https://docs.github.com/rest/guides/best-practices-for-using-the-rest-api#follow-redirects"
_UNDER_REPO = re.compile(r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)(?P<rest>/.*)?")

routes = web.RouteTableDef()


def moved(request: web.Request, prefix: str) -> web.Response | None:
    """GitHub's redirect when the path names a repository by an old full name, for a
    caller who may see that repository (others get the 404 of a name nobody has)."""
    found = _UNDER_REPO.fullmatch(request.rel_url.raw_path.removeprefix(prefix))
    if found is None:
        return None
    h = hub(request)
    repo = h.store.repo_renamed_from(f"{unquote(found['owner'])}/{unquote(found['repo'])}")
    if repo is None or not auth.can_read(h.store, identity(request), repo):
        return None
    location = f"{h.api_url}/repositories/{repo.id}{found['rest'] or ''}"
    if request.rel_url.raw_query_string:
        location += f"?{request.rel_url.raw_query_string}"
    status = 301 if request.method in ("GET", "HEAD") else 307
    return web.json_response(
        {"message": "Moved Permanently", "url": location, "documentation_url": DOCS},
        status=status, headers={"Location": location})


@routes.route("*", r"/repositories/{repository_id:\d+}{rest:(?:/.*)?}")
async def by_repository_id(request: web.Request) -> web.StreamResponse:
    """Whatever `/repos/{owner}/{repo}{rest}` answers, for the repository with this id
    under its current name."""
    repo = hub(request).store.repo_by_id(int_param(request, "repository_id"))
    if repo is None:
        raise not_found()
    prefix, _, after = request.rel_url.raw_path.partition("/repositories/")
    rest = after.partition("/")[2]
    path = f"{prefix}/repos/{repo.full_name}" + (f"/{rest}" if rest else "")
    same = await request.app.router.resolve(request.clone(rel_url=URL(path, encoded=True)))
    request.match_info.update(same)  # owner, repo and the route's own parts
    return await same.handler(request)
