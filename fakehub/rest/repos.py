"""Repositories, branches, contents, refs, commits, compare, permissions and rules."""

from __future__ import annotations

import base64
from urllib.parse import unquote

from aiohttp import web

from fakehub import auth, gitrepo, protection, rulesets
from fakehub.hub import HubError
from fakehub.payloads import iso, node_id
from fakehub.rest.common import (
    ApiError,
    body_json,
    from_hub_error,
    hub,
    identity,
    int_param,
    not_found,
    page,
    reply,
    repo_for,
    validation_failed,
)
from fakehub.state import Repo

routes = web.RouteTableDef()


@routes.get("/repos/{owner}/{repo}")
async def get_repo(request: web.Request) -> web.Response:
    repo = repo_for(request)
    ident = identity(request)
    shaped = hub(request).shapes.repo_rest(repo, ident.user if ident else None)
    if ident and ident.kind == "installation":
        shaped["permissions"] = hub(request).shapes.permissions_flags("write")
    return reply(shaped)


def _branch(request: web.Request, repo: Repo, name: str, tip: str) -> dict:
    h = hub(request)
    protected = _protected(repo, name)
    return {
        "name": name,
        "commit": {"sha": tip, "url": f"{h.api_url}/repos/{repo.full_name}/commits/{tip}"},
        "protected": protected,
    }


@routes.get("/repos/{owner}/{repo}/branches")
async def list_branches(request: web.Request) -> web.Response:
    repo = repo_for(request)
    refs = gitrepo.list_refs(repo.path, "refs/heads/")
    branches = [_branch(request, repo, ref.removeprefix("refs/heads/"), tip)
                for ref, tip in sorted(refs.items())]
    chunk, headers = page(request, branches)
    return reply(chunk, headers=headers)


def _protected(repo: Repo, branch: str) -> bool:
    return branch in repo.protections or bool(rulesets.active_rules(repo, branch))


def _protection_target(request: web.Request) -> tuple[Repo, str, str]:
    """(repo, branch, protection url); users need admin, Apps administration."""
    level = "write" if request.method in ("PUT", "DELETE") else "read"
    repo = repo_for(request, "administration", level)
    ident = identity(request)
    if ident is not None and ident.kind == "user" and \
            hub(request).store.permission(repo, ident.user) != "admin":
        raise not_found()
    branch = unquote(request.match_info["branch"])
    if gitrepo.ref_sha(repo.path, branch) is None:
        raise ApiError(404, "Branch not found")
    url = f"{hub(request).api_url}/repos/{repo.full_name}/branches/{branch}/protection"
    return repo, branch, url


@routes.get("/repos/{owner}/{repo}/branches/{branch:.+}/protection")
async def get_protection(request: web.Request) -> web.Response:
    repo, branch, url = _protection_target(request)
    stored = repo.protections.get(branch)
    if stored is None:
        raise ApiError(404, protection.NOT_PROTECTED)
    return reply({**protection.as_github(stored, url), "enabled": True, "name": branch,
                  "protection_url": url})


@routes.put("/repos/{owner}/{repo}/branches/{branch:.+}/protection")
async def put_protection(request: web.Request) -> web.Response:
    repo, branch, url = _protection_target(request)
    try:
        repo.protections[branch] = protection.normalize(await body_json(request))
    except protection.Invalid as exc:
        raise ApiError(422, str(exc)) from exc
    return reply(protection.as_github(repo.protections[branch], url))


@routes.delete("/repos/{owner}/{repo}/branches/{branch:.+}/protection")
async def delete_protection(request: web.Request) -> web.Response:
    repo, branch, _ = _protection_target(request)
    if repo.protections.pop(branch, None) is None:
        raise ApiError(404, protection.NOT_PROTECTED)
    return web.Response(status=204)


@routes.get("/repos/{owner}/{repo}/branches/{branch:.+}")
async def get_branch(request: web.Request) -> web.Response:
    repo = repo_for(request)
    h = hub(request)
    name = unquote(request.match_info["branch"])
    tip = gitrepo.ref_sha(repo.path, name)
    if tip is None:
        raise ApiError(404, "Branch not found")
    protected = _protected(repo, name)
    classic = [c.context for c in protection.required_checks(repo.protections.get(name))]
    api = f"{h.api_url}/repos/{repo.full_name}"
    return reply({
        "name": name,
        "commit": h.shapes.commit(repo, gitrepo.commit_info(repo.path, tip)),
        "_links": {"self": f"{api}/branches/{name}",
                   "html": f"{h.base_url}/{repo.full_name}/tree/{name}"},
        "protected": protected,
        "protection": {"enabled": protected, "required_status_checks": {
            "enforcement_level": "non_admins" if classic else "off", "contexts": classic,
            "checks": [{"context": c, "app_id": None} for c in classic]}},
        "protection_url": f"{api}/branches/{name}/protection",
    })


@routes.get("/repos/{owner}/{repo}/contents/{path:.*}")
async def get_contents(request: web.Request) -> web.Response:
    repo = repo_for(request, "contents", "read")
    h = hub(request)
    path = unquote(request.match_info["path"]).strip("/")
    ref = request.query.get("ref") or repo.default_branch
    sha = gitrepo.resolve(repo.path, ref)
    if sha is None:
        raise ApiError(404, f"No commit found for the ref {ref}")
    blob = gitrepo.read_blob(repo.path, sha, path) if path else None
    if blob is not None:
        content, oid = blob
        return reply(_file_entry(h, repo, path, oid, len(content), ref, content))
    entries = gitrepo.list_tree(repo.path, sha, path)
    if entries is None:
        raise not_found()
    listing = [
        _file_entry(h, repo, f"{path}/{name}".lstrip("/"), oid, size, ref, None,
                    kind="dir" if kind == "tree" else "file")
        for kind, name, oid, size in entries
    ]
    return reply(listing)


def _file_entry(h, repo: Repo, path: str, oid: str, size: int, ref: str,
                content: bytes | None, kind: str = "file") -> dict:
    api = f"{h.api_url}/repos/{repo.full_name}"
    html = f"{h.base_url}/{repo.full_name}/{'tree' if kind == 'dir' else 'blob'}/{ref}/{path}"
    git_url = f"{api}/git/{'trees' if kind == 'dir' else 'blobs'}/{oid}"
    entry = {
        "type": kind,
        "size": size,
        "name": path.rsplit("/", 1)[-1],
        "path": path,
        "sha": oid,
        "url": f"{api}/contents/{path}?ref={ref}",
        "git_url": git_url,
        "html_url": html,
        "download_url": f"{h.base_url}/{repo.full_name}/raw/{ref}/{path}" if kind == "file"
        else None,
        "_links": {"self": f"{api}/contents/{path}?ref={ref}", "git": git_url, "html": html},
    }
    if content is not None:
        encoded = base64.b64encode(content).decode()
        # GitHub wraps base64 content at 60 characters per line.
        entry["content"] = "\n".join(encoded[i : i + 60] for i in range(0, len(encoded), 60))
        entry["encoding"] = "base64"
    return entry


def _ref_object(h, repo: Repo, ref: str, sha: str) -> dict:
    api = f"{h.api_url}/repos/{repo.full_name}"
    return {
        "ref": ref,
        "node_id": f"REF_{repo.id}_{ref}",
        "url": f"{api}/git/{ref}",
        "object": {"type": "commit", "sha": sha, "url": f"{api}/git/commits/{sha}"},
    }


@routes.get("/repos/{owner}/{repo}/git/ref/{ref:.+}")
async def get_ref(request: web.Request) -> web.Response:
    repo = repo_for(request, "contents", "read")
    ref = "refs/" + unquote(request.match_info["ref"])
    sha = gitrepo.exact_ref(repo.path, ref)
    if sha is None:
        raise not_found()
    return reply(_ref_object(hub(request), repo, ref, sha))


@routes.get("/repos/{owner}/{repo}/git/matching-refs/{ref:.*}")
async def matching_refs(request: web.Request) -> web.Response:
    repo = repo_for(request, "contents", "read")
    prefix = "refs/" + unquote(request.match_info["ref"])
    found = [_ref_object(hub(request), repo, ref, sha)
             for ref, sha in sorted(gitrepo.list_refs(repo.path).items())
             if ref.startswith(prefix)]
    return reply(found)


@routes.post("/repos/{owner}/{repo}/git/refs")
async def create_ref(request: web.Request) -> web.Response:
    repo = repo_for(request, "contents", "write")
    h = hub(request)
    body = await body_json(request)
    ref, sha = body.get("ref"), body.get("sha")
    if not isinstance(ref, str) or not ref.startswith("refs/") or ref.count("/") < 2:
        raise ApiError(422, "Reference name must start with 'refs/' and have at least two "
                            "slashes.")
    if not sha or gitrepo.resolve(repo.path, sha) is None:
        raise ApiError(422, "Object does not exist")
    if gitrepo.exact_ref(repo.path, ref) is not None:
        raise ApiError(422, "Reference already exists")
    ident = identity(request)
    assert ident is not None
    try:
        if ref.startswith("refs/heads/"):
            h.internal_push(repo, ref.removeprefix("refs/heads/"), sha, ident)
        else:
            gitrepo.update_ref(repo.path, ref, sha, gitrepo.ZERO_SHA)
    except HubError as exc:
        raise from_hub_error(exc) from exc
    return reply(_ref_object(h, repo, ref, sha), status=201)


@routes.delete("/repos/{owner}/{repo}/git/refs/{ref:.+}")
async def delete_ref(request: web.Request) -> web.Response:
    repo = repo_for(request, "contents", "write")
    h = hub(request)
    ref = "refs/" + unquote(request.match_info["ref"])
    old = gitrepo.exact_ref(repo.path, ref)
    if old is None:
        raise ApiError(422, "Reference does not exist")
    ident = identity(request)
    assert ident is not None
    reasons = h.push_allowed(repo, ident, ref, old, None, True)
    if reasons:
        raise ApiError(422, rulesets.render_violations(ref, reasons))
    gitrepo.delete_ref(repo.path, ref)
    h.ref_updated(repo, ref, old, gitrepo.ZERO_SHA, ident.user)
    return web.Response(status=204)


@routes.get("/repos/{owner}/{repo}/commits/{ref:.+}")
async def get_commit(request: web.Request) -> web.Response:
    repo = repo_for(request, "contents", "read")
    h = hub(request)
    ref = unquote(request.match_info["ref"])
    sha = gitrepo.resolve(repo.path, ref)
    if sha is None:
        raise ApiError(422, f"No commit found for SHA: {ref}")
    info = gitrepo.commit_info(repo.path, sha)
    parent = info.parents[0] if info.parents else gitrepo.out(
        repo.path, "hash-object", "-t", "tree", "/dev/null")
    files = [h.shapes.file_change(repo, f, parent, sha)
             for f in gitrepo.diff_files(repo.path, parent, sha)]
    return reply(h.shapes.commit(repo, info, files))


@routes.get("/repos/{owner}/{repo}/compare/{basehead:.+}")
async def compare(request: web.Request) -> web.Response:
    repo = repo_for(request, "contents", "read")
    h = hub(request)
    basehead = unquote(request.match_info["basehead"])
    if "..." not in basehead:
        raise not_found()
    base_name, head_name = basehead.split("...", 1)
    base, head = gitrepo.resolve(repo.path, base_name), gitrepo.resolve(repo.path, head_name)
    if base is None or head is None:
        raise not_found()
    merge_base = gitrepo.merge_base(repo.path, base, head)
    if merge_base is None:
        raise ApiError(404, f"No common ancestor between {base_name} and {head_name}.")
    ahead = gitrepo.count_commits(repo.path, base, head)
    behind = gitrepo.count_commits(repo.path, head, base)
    status = ("identical" if ahead == behind == 0 else "ahead" if behind == 0
              else "behind" if ahead == 0 else "diverged")
    # As GitHub: at most 250 commits and 300 files.
    commits = gitrepo.commits_between(repo.path, base, head)
    files = [h.shapes.file_change(repo, f, merge_base, head)
             for f in gitrepo.diff_files(repo.path, merge_base, head)[:300]]
    web_url = f"{h.base_url}/{repo.full_name}/compare/{base_name}...{head_name}"
    return reply({
        "url": f"{h.api_url}/repos/{repo.full_name}/compare/{base_name}...{head_name}",
        "html_url": web_url,
        "permalink_url": f"{h.base_url}/{repo.full_name}/compare/{base[:7]}...{head[:7]}",
        "diff_url": f"{web_url}.diff",
        "patch_url": f"{web_url}.patch",
        "base_commit": h.shapes.commit(repo, gitrepo.commit_info(repo.path, base)),
        "merge_base_commit": h.shapes.commit(repo, gitrepo.commit_info(repo.path, merge_base)),
        "status": status,
        "ahead_by": ahead,
        "behind_by": behind,
        "total_commits": ahead,
        "commits": [h.shapes.commit(repo, c) for c in commits],
        "files": files[:300],  # GitHub's compare lists no more
    })


@routes.get("/repos/{owner}/{repo}/collaborators/{username}/permission")
async def collaborator_permission(request: web.Request) -> web.Response:
    repo = repo_for(request)
    h = hub(request)
    user = h.store.user(request.match_info["username"])
    if user is None:
        raise ApiError(404, f"{request.match_info['username']} is not a user")
    role = h.store.permission(repo, user)
    if role == "read" and not repo.private and user.login.lower() not in repo.collaborators \
            and user.id != repo.owner.id:
        role = "read"
    # The legacy `permission` field folds maintain into write and triage into read.
    legacy = {"maintain": "write", "triage": "read"}.get(role, role)
    shaped_user = h.shapes.user(user)
    shaped_user["permissions"] = h.shapes.permissions_flags(role)
    shaped_user["role_name"] = role
    return reply({"permission": legacy, "role_name": role, "user": shaped_user})


@routes.get("/repos/{owner}/{repo}/rules/branches/{branch:.+}")
async def branch_rules(request: web.Request) -> web.Response:
    repo = repo_for(request)
    branch = unquote(request.match_info["branch"])
    rules = [rulesets.rule_as_github_returns(a) for a in rulesets.active_rules(repo, branch)]
    chunk, headers = page(request, rules)
    return reply(chunk, headers=headers)


def _ruleset_summary(h, repo: Repo, ruleset: dict) -> dict:
    api = f"{h.api_url}/repos/{repo.full_name}/rulesets/{ruleset['id']}"
    return {
        "id": ruleset["id"],
        "name": ruleset["name"],
        "target": ruleset["target"],
        "source_type": ruleset["source_type"],
        "source": ruleset["source"],
        "enforcement": ruleset["enforcement"],
        "node_id": f"RRS_{ruleset['id']}",
        "_links": {"self": {"href": api},
                   "html": {"href": f"{h.base_url}/{repo.full_name}/rules/{ruleset['id']}"}},
    }


@routes.get("/repos/{owner}/{repo}/rulesets")
async def list_rulesets(request: web.Request) -> web.Response:
    repo = repo_for(request)
    h = hub(request)
    chunk, headers = page(request, [_ruleset_summary(h, repo, r) for r in repo.rulesets])
    chunk = [_as_seen_by(request, repo, s) for s in chunk]
    return reply(chunk, headers=headers)


@routes.get("/repos/{owner}/{repo}/rulesets/{ruleset_id}")
async def get_ruleset(request: web.Request) -> web.Response:
    repo = repo_for(request)
    h = hub(request)
    wanted = int_param(request, "ruleset_id")
    ruleset = next((r for r in repo.rulesets if r["id"] == wanted), None)
    if ruleset is None:
        raise not_found()
    return reply(_as_seen_by(request, repo, {**ruleset, **_ruleset_summary(h, repo, ruleset)},
                             ruleset))


@routes.post("/repos/{owner}/{repo}/rulesets")
async def create_ruleset(request: web.Request) -> web.Response:
    repo = repo_for(request, "administration", "write")
    h = hub(request)
    body = await body_json(request)
    if not body.get("name"):
        raise validation_failed("Ruleset", "name")
    if body.get("enforcement") not in ("disabled", "active", "evaluate"):
        raise validation_failed("Ruleset", "enforcement", "invalid")
    ruleset = h.add_ruleset(repo, body)
    return reply(_as_seen_by(request, repo, {**ruleset, **_ruleset_summary(h, repo, ruleset)},
                             ruleset), status=201)


def _as_seen_by(request: web.Request, repo: Repo, shaped: dict,
                ruleset: dict | None = None) -> dict:
    """A ruleset as this caller sees it: `current_user_can_bypass` for them, and
    `bypass_actors` only for those who administer it (admins; Apps with administration
    write), as on GitHub."""
    h = hub(request)
    ruleset = ruleset or next(r for r in repo.rulesets if r["id"] == shaped["id"])
    ident = identity(request)
    permission = h.permission(repo, ident) if ident is not None else "none"
    shown = {k: v for k, v in shaped.items() if k != "bypass_actors"}
    shown["current_user_can_bypass"] = rulesets.bypass_mode(ruleset, ident, permission)
    administers = ident is not None and (
        permission == "admin" if ident.kind == "user" else
        ident.kind == "installation"
        and auth.installation_permission(ident, "administration") == "write")
    if administers and "bypass_actors" in shaped:
        shown["bypass_actors"] = shaped["bypass_actors"]
    return shown


@routes.get("/repos/{owner}/{repo}/deployments")
async def list_deployments(request: web.Request) -> web.Response:
    """Deployments, newest first, filtered by `sha` and `environment` as GitHub's are."""
    repo = repo_for(request, "deployments", "read")
    h = hub(request)
    sha, env = request.query.get("sha"), request.query.get("environment")
    found = [_deployment(h, repo, d) for d in reversed(repo.deployments)
             if (sha is None or d["sha"] == sha) and (env is None or d["environment"] == env)]
    chunk, headers = page(request, found)
    return reply(chunk, headers=headers)


def _deployment(h, repo: Repo, d: dict) -> dict:
    url = f"{h.api_url}/repos/{repo.full_name}/deployments/{d['id']}"
    stamp = iso(d["at"])
    return {"id": d["id"], "node_id": node_id("Deployment", d["id"]), "sha": d["sha"],
            "ref": d["sha"], "task": "deploy", "environment": d["environment"],
            "creator": h.shapes.user(d["creator"]), "payload": {}, "description": None,
            "statuses_url": f"{url}/statuses",
            "repository_url": f"{h.api_url}/repos/{repo.full_name}", "url": url,
            "created_at": stamp, "updated_at": stamp}


@routes.get("/repos/{owner}/{repo}/deployments/{deployment_id}/statuses")
async def list_deployment_statuses(request: web.Request) -> web.Response:
    """A deployment's statuses, newest first (fakehub keeps only the latest)."""
    repo = repo_for(request, "deployments", "read")
    h = hub(request)
    found = next((d for d in repo.deployments
                  if d["id"] == int_param(request, "deployment_id")), None)
    if found is None:
        raise ApiError(404, "Not Found")
    deployment = _deployment(h, repo, found)
    stamp = iso(found["at"])
    status = {"id": found["id"], "node_id": node_id("DeploymentStatus", found["id"]),
              "state": found["state"], "creator": deployment["creator"], "description": "",
              "environment": found["environment"], "deployment_url": deployment["url"],
              "target_url": "", "repository_url": deployment["repository_url"],
              "url": f"{deployment['url']}/statuses/{found['id']}",
              "created_at": stamp, "updated_at": stamp}
    chunk, headers = page(request, [status])
    return reply(chunk, headers=headers)
