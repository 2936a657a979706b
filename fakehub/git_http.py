"""Git smart HTTP, served by `git http-backend` as a CGI, streamed both ways.

fakehub checks the credentials and the repository permission first; the rules of a
push are checked by a pre-receive hook that asks the hub (so git itself prints the
refusal), and a post-receive hook tells the hub which refs moved.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os

from aiohttp import web

from fakehub import auth, faults, pushprotection, rulesets
from fakehub.hub import Hub
from fakehub.state import Identity, Repo, permission_at_least

log = logging.getLogger("fakehub.git")

HUB_KEY = web.AppKey("hub", Hub)
CHUNK = 64 * 1024

def _unauthorized(message: str = "Invalid username or token.") -> web.Response:
    return web.Response(
        status=401,
        text=f"{message}\n",
        headers={"WWW-Authenticate": 'Basic realm="GitHub"'},
    )


def git_identity(hub: Hub, header: str | None) -> Identity | None:
    """The caller of a git request from HTTP basic auth; None when anonymous."""
    if not header or not header.lower().startswith("basic "):
        return None
    try:
        _user, _, secret = base64.b64decode(header[6:]).decode().partition(":")
    except (ValueError, UnicodeDecodeError) as exc:
        raise auth.AuthError(401, "Invalid username or token.") from exc
    if secret.startswith("ghs_") or secret.startswith("ghp_"):
        token = auth.lookup_token(hub.store, secret)
        return auth.identity_for_token(hub.store, token)
    raise auth.AuthError(401, "Invalid username or token. Password authentication is not "
                              "supported for Git operations.")


def _wants_write(tail: str, service: str | None) -> bool:
    return tail == "git-receive-pack" or service == "git-receive-pack"


def _may(hub: Hub, ident: Identity | None, repo: Repo, write: bool) -> tuple[bool, int, str]:
    """(allowed, status, message) for a git read or write."""
    if ident is None:
        if write or repo.private or not hub.anonymous_git_reads:
            return False, 401, "Authentication required"
        return True, 200, ""
    if not auth.can_read(hub.store, ident, repo):
        return False, 404, "Repository not found."
    denied = f"Permission to {repo.full_name}.git denied to {ident.user.login}."
    if not write:
        # A private repository's code needs the contents permission, not just metadata.
        if ident.kind == "installation" and repo.private and not permission_at_least(
            auth.installation_permission(ident, "contents"), "read"
        ):
            return False, 403, denied
        return True, 200, ""
    if ident.kind == "installation":
        ok = auth.installation_covers(hub.store, ident, repo) and permission_at_least(
            auth.installation_permission(ident, "contents"), "write"
        )
    else:
        ok = permission_at_least(hub.store.permission(repo, ident.user), "write")
    if not ok:
        return False, 403, denied
    return True, 200, ""


async def handle_git(request: web.Request) -> web.StreamResponse:
    hub = request.app[HUB_KEY]
    fault = request.app[faults.FAULTS_KEY].pick(request.method, request.path)
    if fault is not None:
        return await faults.answer(fault)
    owner, name, tail = (request.match_info[k] for k in ("owner", "repo", "tail"))
    asked = f"{owner}/{name.removesuffix('.git')}"
    repo = hub.store.repo(asked) or hub.store.repo_renamed_from(asked)
    try:
        ident = git_identity(hub, request.headers.get("Authorization"))
    except auth.AuthError as exc:  # a bad token asks for others; a suspended one is refused
        if exc.status == 401:
            return _unauthorized(exc.message)
        return web.Response(status=exc.status, text=exc.message + "\n")
    if repo is None:
        return _unauthorized() if ident is None else web.Response(
            status=404, text="Repository not found.\n")
    write = _wants_write(tail, request.query.get("service"))
    allowed, status, message = _may(hub, ident, repo, write)
    if not allowed:
        if status == 401 or (status == 404 and ident is None):
            return _unauthorized(message)
        return web.Response(status=status, text=message + "\n")
    if repo.full_name.lower() != asked.lower() and request.method == "GET" \
            and tail == "info/refs":
        # A renamed repository: git follows the first request's redirect ("warning:
        # redirecting to …") and sends the rest to the new address.
        suffix = ".git" if request.rel_url.raw_path.split("/")[2].endswith(".git") else ""
        query = f"?{request.rel_url.raw_query_string}" if request.rel_url.raw_query_string else ""
        location = f"{request.scheme}://{request.host}/{repo.full_name}{suffix}/{tail}{query}"
        return web.Response(status=301, headers={"Location": location})
    return await _run_backend(request, hub, repo, ident, tail)


def _cgi_env(request: web.Request, hub: Hub, repo: Repo, ident: Identity | None, tail: str):
    actor = {"kind": ident.kind, "login": ident.user.login, "app_id": ident.app_id,
             "installation_id": ident.installation_id,
             "token": ident.token.token if ident.token else None} if ident else None
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(hub.data_dir),
        "GIT_PROJECT_ROOT": str(hub.repos_dir),
        "GIT_HTTP_EXPORT_ALL": "1",
        "GIT_CONFIG_NOSYSTEM": "1",
        # The bare repository stays where it was made, whatever the repository is called now.
        "PATH_INFO": f"/{repo.path.relative_to(hub.repos_dir).as_posix()}/{tail}",
        "REQUEST_METHOD": request.method,
        "QUERY_STRING": request.query_string,
        "CONTENT_TYPE": request.headers.get("Content-Type", ""),
        "REMOTE_ADDR": request.remote or "127.0.0.1",
        "REMOTE_USER": ident.user.login if ident else "",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "FAKEHUB_HOOK_URL": f"{hub.base_url}/_fakehub/hooks",
        "FAKEHUB_HOOK_SECRET": hub.hook_secret,
        "FAKEHUB_REPO": repo.full_name,
        "FAKEHUB_ACTOR": json.dumps(actor),
    }
    if repo.push_protection:
        env["FAKEHUB_SCAN_SECRETS"] = "1"
    if request.headers.get("Git-Protocol"):
        env["HTTP_GIT_PROTOCOL"] = request.headers["Git-Protocol"]
    # aiohttp hands us the body already decompressed, so no CONTENT_ENCODING here.
    if request.content_length is not None and "Content-Encoding" not in request.headers:
        env["CONTENT_LENGTH"] = str(request.content_length)
    return env


async def _run_backend(
    request: web.Request, hub: Hub, repo: Repo, ident: Identity | None, tail: str
) -> web.StreamResponse:
    proc = await asyncio.create_subprocess_exec(
        "git",
        "http-backend",
        env=_cgi_env(request, hub, repo, ident, tail),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdin and proc.stdout and proc.stderr
    feeder = asyncio.ensure_future(_feed(request, proc.stdin))
    errors = asyncio.ensure_future(proc.stderr.read())
    try:
        status, headers = await _read_cgi_headers(proc.stdout)
        response = web.StreamResponse(status=status, headers=headers)
        await response.prepare(request)
        while chunk := await proc.stdout.read(CHUNK):
            await response.write(chunk)
        await response.write_eof()
        return response
    finally:
        await feeder
        await proc.wait()
        stderr = (await errors).decode(errors="replace").strip()
        if stderr:
            log.info("http-backend %s: %s", repo.full_name, stderr)


async def _feed(request: web.Request, stdin: asyncio.StreamWriter) -> None:
    """Stream the request body into the CGI, so big packs never sit in memory."""
    try:
        while chunk := await request.content.read(CHUNK):
            stdin.write(chunk)
            await stdin.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        try:
            stdin.close()
        except (BrokenPipeError, ConnectionResetError):
            pass


async def _read_cgi_headers(stdout: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    status, headers = 200, {}
    while True:
        line = (await stdout.readline()).decode("latin-1").rstrip("\r\n")
        if not line:
            return status, headers
        key, _, value = line.partition(":")
        if key.lower() == "status":
            status = int(value.strip().split()[0])
        else:
            headers[key.strip()] = value.strip()


# -- the hooks' callbacks ------------------------------------------------------------


def _hook_actor(hub: Hub, raw: str) -> Identity | None:
    data = json.loads(raw) if raw else None
    if not data:
        return None
    user = hub.store.user(data["login"])
    if user is None:
        return None
    token = hub.store.tokens.get(data["token"]) if data.get("token") else None
    return Identity(data["kind"], user, data.get("app_id"), data.get("installation_id"), token)


async def handle_hook(request: web.Request) -> web.Response:
    hub = request.app[HUB_KEY]
    if request.headers.get("X-Fakehub-Hook-Secret") != hub.hook_secret:
        return web.json_response({"ok": False, "messages": ["bad hook secret"]}, status=403)
    body = await request.json()
    repo = hub.store.repo(body["repo"]) or hub.store.repo_renamed_from(body["repo"])
    actor = _hook_actor(hub, body["actor"])
    if repo is None or actor is None:
        return web.json_response({"ok": False, "messages": ["unknown repository or pusher"]})
    if request.match_info["mode"] == "pre-receive":
        return web.json_response(_pre_receive(hub, repo, actor, body["commands"]))
    for command in body["commands"]:
        hub.ref_updated(repo, command["ref"], command["old"], command["new"], actor.user)
    return web.json_response({"ok": True})


def _pre_receive(hub: Hub, repo: Repo, actor: Identity, commands: list[dict]) -> dict:
    zero = "0" * 40
    for command in commands:
        findings = [f for f in pushprotection.find_secrets(command.get("patch") or "")
                    if f.key not in repo.allowed_secrets]
        if repo.push_protection and findings:
            unblock = f"{hub.base_url}/{repo.full_name}/security/secret-scanning/unblock-secret"
            return {"ok": False,
                    "messages": pushprotection.refusal(command["ref"], findings, unblock)}
        old = None if command["old"] == zero else command["old"]
        new = None if command["new"] == zero else command["new"]
        refusal = hub.workflow_refusal(repo, actor, old, new, command.get("files"))
        if refusal:
            return {"ok": False, "messages": [f"error: {refusal}"]}
        reasons = hub.push_allowed(repo, actor, command["ref"], old, new, command["fast_forward"])
        if reasons:
            ref = command["ref"]
            branch = ref.removeprefix("refs/heads/")
            messages = [
                f"error: GH013: {rulesets.RULE_VIOLATION_HEADER} for {ref}.",
                f"Review all repository rules at {hub.base_url}/{repo.full_name}/rules"
                f"?ref=refs%2Fheads%2F{branch}",
                "",
                *[f"- {reason}" for reason in reasons],
                "",
            ]
            return {"ok": False, "messages": messages}
    return {"ok": True}


def add_git_routes(app: web.Application) -> None:
    app.router.add_post("/_fakehub/hooks/{mode}", handle_hook)
    app.router.add_route("*", "/{owner}/{repo}.git/{tail:.*}", handle_git)
    # GitHub also serves git without the .git suffix.
    services = "info/refs|git-upload-pack|git-receive-pack"
    app.router.add_route("*", "/{owner}/{repo}/{tail:(" + services + ")}", handle_git)
