"""Who is looking at hangar's pages: a person signed in with GitHub, or an operator's token.

Sign-in is the App's own OAuth (GitHub's web application flow for a GitHub App): `/login/
github` sends the browser to `/login/oauth/authorize` with the App's client id, hangar's
callback and a one-time `state`; GitHub sends it back to `/login/github/callback` with a
code, which hangar exchanges (with the client secret) for a user access token, reads
`GET /user` with it, and forgets it. The session is a signed cookie holding the login
and an expiry (HMAC-SHA256 with a key kept in the data directory, 0600), `HttpOnly`,
`SameSite=Lax`, `Secure` unless hangar's public URL is http on a loopback host; it ends
early when the person revokes their authorization of the App (GitHub tells hangar with
`github_app_authorization` revoked). The
`state` is bound to the browser that asked: it is also kept in a signed cookie, and the
callback takes a code only when the two agree (no sign-in forced on someone else).

What a person may read is what they may read on GitHub: their permission on the
repository (`GET /repos/{owner}/{repo}/collaborators/{login}/permission`, asked with the
installation's token), kept a minute. Operators' API tokens with the `read` scope see
everything, as before.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import aiohttp
from aiohttp import web
from cachetools import TTLCache
from gidgethub import BadRequest, GitHubException

from app.github.client import RateLimited, get_or_none
from app.render import pages as words
from app.sessions import session_ended
from app.settings import Settings
from app.web import access
from app.web.keys import AUTH, SESSION, SETTINGS, STORE
from app.web.pages import escape, page

log = logging.getLogger("hangar.signin")

SESSION_COOKIE = "hangar_session"
STATE_COOKIE = "hangar_oauth"
TOKEN_COOKIE = "hangar_token"  # an operator's API token typed at /login
KEY_FILE = "session.key"
SESSION_SECONDS = 8 * 3600  # as long as GitHub's user access token lives
STATE_SECONDS = 600  # GitHub's code is good for ten minutes
PERMISSION_SECONDS = 60
READ_ROLES = frozenset({"read", "triage", "write", "maintain", "admin"})
LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})


class Signer:
    """Values a browser keeps and hangar trusts only with its signature and before expiry."""

    def __init__(self, key: bytes):
        self._key = key

    @classmethod
    def in_data_dir(cls, data_dir: Path) -> Signer:
        """The key of `data_dir/session.key`, made (0600, never readable by others) once."""
        path = data_dir / KEY_FILE
        data_dir.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            return cls(path.read_bytes())
        key = secrets.token_bytes(32)
        with open(fd, "wb") as handle:
            handle.write(key)
        return cls(key)

    def sign(self, purpose: str, data: dict, seconds: float) -> str:
        body = base64.urlsafe_b64encode(json.dumps(
            {**data, "exp": int(time.time() + seconds)}, separators=(",", ":")).encode()
        ).decode().rstrip("=")
        return f"{body}.{self._mac(purpose, body)}"

    def open(self, purpose: str, value: str | None) -> dict | None:
        """What `sign` sealed for this purpose, or None: forged, another purpose's, expired."""
        body, _, mac = (value or "").partition(".")
        if not body or not hmac.compare_digest(mac, self._mac(purpose, body)):
            return None
        try:
            data = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        except ValueError:
            return None
        if not isinstance(data, dict) or not isinstance(data.get("exp"), int) \
                or data["exp"] < time.time():
            return None
        return data

    def _mac(self, purpose: str, body: str) -> str:
        return hmac.new(self._key, f"{purpose}\0{body}".encode(), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Viewer:
    """Who asks for a page: an operator (a token with `read`) or a signed-in GitHub login."""

    login: str | None = None
    operator: bool = False


class SignIn:
    """What sign-in keeps: the signer and a minute of people's permissions."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.signer = Signer.in_data_dir(settings.data_dir)
        self.permissions: TTLCache = TTLCache(maxsize=4096, ttl=PERMISSION_SECONDS)

    @property
    def enabled(self) -> bool:
        s = self.settings
        return bool(s.client_id and s.client_secret and s.public_url)

    @property
    def callback_url(self) -> str:
        return f"{(self.settings.public_url or '').rstrip('/')}/login/github/callback"

    @property
    def secure_cookies(self) -> bool:
        """`Secure`, unless the public URL is plain http on this machine (a demo)."""
        parts = urlsplit(self.settings.public_url or "")
        return not (parts.scheme == "http" and parts.hostname in LOOPBACK)

    def set_cookie(self, response: web.StreamResponse, name: str, value: str,
                   seconds: int) -> None:
        response.set_cookie(name, value, max_age=seconds, path="/", httponly=True,
                            samesite="Lax", secure=self.secure_cookies)


SIGNIN = web.AppKey("signin", SignIn)


def viewer(request: web.Request) -> Viewer | None:
    """The operator's token (bearer header or the /login cookie), else the session's login."""
    header = request.headers.get("Authorization", "")
    if not header and request.cookies.get(TOKEN_COOKIE):
        header = f"Bearer {request.cookies[TOKEN_COOKIE]}"
    if header:
        principal = access.authenticate(request.app[STORE], request.app[SETTINGS], header)
        # The pages span every repository: a token limited to some does not open them.
        if principal is not None and principal.allows("read") and principal.repos is None:
            return Viewer(operator=True)
    signin = request.app[SIGNIN]
    if not signin.enabled:
        return None
    session = signin.signer.open(SESSION_COOKIE, request.cookies.get(SESSION_COOKIE))
    if not session or not isinstance(session.get("login"), str):
        return None
    began = session.get("at", 0)  # 0: a cookie from before sessions were dated
    if not isinstance(began, (int, float)) or session_ended(
            request.app[STORE], session["login"], began):
        return None  # signed in before they revoked hangar's authorization
    return Viewer(login=session["login"])


async def can_read(request: web.Request, who: Viewer, repo: str, installation_id: int) -> bool:
    """Whether `who` may read `repo` on GitHub (kept a minute); operators read everything."""
    if who.operator:
        return True
    if not who.login:
        return False
    signin = request.app[SIGNIN]
    key = (who.login.lower(), repo.lower())
    if key in signin.permissions:
        return signin.permissions[key]
    try:
        gh = await request.app[AUTH].client(installation_id)
        answer = await get_or_none(
            gh, f"/repos/{repo}/collaborators/{who.login}/permission")
    except BadRequest as exc:  # 403: the installation no longer covers the repository
        log.info("permission of %s on %s not read: %s", who.login, repo, exc)
        answer = None
    except (GitHubException, aiohttp.ClientError, RateLimited) as exc:
        # GitHub did not answer: not readable this time, and not remembered as such.
        log.warning("permission of %s on %s not read: %r", who.login, repo, exc)
        return False
    role = (answer or {}).get("role_name") or (answer or {}).get("permission")
    allowed = role in READ_ROLES
    signin.permissions[key] = allowed
    return allowed


def local_path(value: str | None) -> str:
    """Where to go after signing in: a path on hangar itself, never another site."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return "/"
    return value


def login_url(request: web.Request, next_path: str) -> str:
    """Where a signed-out browser goes: GitHub's sign-in when it is set up, else /login."""
    where = "/login/github" if request.app[SIGNIN].enabled else "/login"
    return f"{where}?" + urlencode({"next": local_path(next_path)})


def who_line(who: Viewer) -> str:
    """The line at the top of a page: who is signed in, and a way out."""
    name = f"{words.SIGNED_IN_AS} @{who.login}" if who.login else words.OPERATOR
    return (f"<form method=post action=/logout class=muted id=who>{escape(name)} "
            f"<button type=submit class=plain id=sign-out>{escape(words.SIGN_OUT)}</button>"
            "</form>")


def sign_in_problem(code: str) -> web.Response:
    return page("hangar: sign in", f"<h1>hangar</h1><p class=bad id=problem>"
                f"{escape(words.sign_in_problem(code))}</p><p><a href=/login/github>"
                f"{escape(words.SIGN_IN_WITH_GITHUB)}</a></p>", status=400)


# -- the routes --------------------------------------------------------------------------


def setup(app: web.Application) -> None:
    app[SIGNIN] = SignIn(app[SETTINGS])
    app.router.add_get("/login/github", start)
    app.router.add_get("/login/github/callback", callback)
    app.router.add_post("/logout", sign_out)


async def start(request: web.Request) -> web.Response:
    signin = request.app[SIGNIN]
    if not signin.enabled:
        raise web.HTTPFound("/login")
    state = secrets.token_urlsafe(24)
    fields = {"client_id": signin.settings.client_id, "redirect_uri": signin.callback_url,
              "state": state}
    hint = request.query.get("login", "")
    if access.LOGIN.fullmatch(hint):  # GitHub's `login`: the account it suggests
        fields["login"] = hint
    query = urlencode(fields)
    response = web.HTTPFound(f"{signin.settings.git_base_url}/login/oauth/authorize?{query}")
    signin.set_cookie(response, STATE_COOKIE, signin.signer.sign(
        STATE_COOKIE, {"state": state, "next": local_path(request.query.get("next"))},
        STATE_SECONDS), STATE_SECONDS)
    raise response


class SignInFailed(Exception):
    """GitHub did not sign this person in; the message is for the sign-in page."""


async def callback(request: web.Request) -> web.Response:
    signin = request.app[SIGNIN]
    if not signin.enabled:
        raise web.HTTPNotFound()
    asked = signin.signer.open(STATE_COOKIE, request.cookies.get(STATE_COOKIE))
    given = request.query.get("state", "")
    if asked is None or not given or not hmac.compare_digest(str(asked.get("state")), given):
        return sign_in_problem("state")
    if "code" not in request.query:
        return sign_in_problem("denied")
    try:
        login = await _login_for_code(request, request.query["code"])
    except SignInFailed as exc:
        log.warning("sign-in failed: %s", exc)
        return sign_in_problem("github")
    response = web.HTTPFound(local_path(asked.get("next")))
    signin.set_cookie(response, SESSION_COOKIE, signin.signer.sign(
        SESSION_COOKIE, {"login": login, "at": time.time()}, SESSION_SECONDS),
        SESSION_SECONDS)
    response.del_cookie(STATE_COOKIE, path="/")
    raise response


async def _login_for_code(request: web.Request, code: str) -> str:
    """Exchange the code for a user access token and read who it belongs to."""
    settings = request.app[SETTINGS]
    session = request.app[SESSION]
    secret = settings.client_secret.get_secret_value() if settings.client_secret else ""
    async with session.post(
            f"{settings.git_base_url}/login/oauth/access_token",
            data={"client_id": settings.client_id or "", "client_secret": secret,
                  "code": code, "redirect_uri": request.app[SIGNIN].callback_url},
            headers={"Accept": "application/json"}) as answer:
        body = await answer.json(content_type=None) if answer.status == 200 else {}
    token = body.get("access_token") if isinstance(body, dict) else None
    if not token:
        raise SignInFailed(f"the code exchange answered {answer.status} "
                           f"{(body or {}).get('error', '') if isinstance(body, dict) else ''}")
    async with session.get(f"{settings.github_url}/user", headers={
            "Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json"}
            ) as answer:
        user = await answer.json(content_type=None) if answer.status == 200 else {}
    login = user.get("login") if isinstance(user, dict) else None
    if not isinstance(login, str) or not access.LOGIN.fullmatch(login):
        raise SignInFailed(f"GET /user answered {answer.status}")
    return login


async def sign_out(request: web.Request) -> web.Response:
    response = web.HTTPFound("/login")
    response.del_cookie(SESSION_COOKIE, path="/")
    response.del_cookie(TOKEN_COOKIE, path="/")
    raise response
