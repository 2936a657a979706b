"""`/setup`: register hangar's GitHub App in one click (GitHub's App manifest flow).

Served by `hangar setup`, and by `hangar serve` while no App is configured; once hangar
has an App, `/setup` only says so. The page posts the manifest to GitHub with a one-time
state; GitHub sends the person back with a code, which is exchanged for the App's id,
private key and webhook secret, written where `hangar serve` reads them.

Until then the page registers an App into whoever reaches it, so it asks for a one-time
setup key that hangar prints in its log (as Jenkins does for its first sign-in).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import secrets
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import quote

import aiohttp
from aiohttp import web

from app.settings import Settings, git_base_url
from app.web import registration
from app.web.pages import escape, link, page

log = logging.getLogger(__name__)

SETTINGS = web.AppKey("setup_settings", Settings)
STATES = web.AppKey("setup_states", registration.States)
SESSION = web.AppKey("setup_session", aiohttp.ClientSession)
ON_REGISTERED: web.AppKey[Callable[[dict[str, Any]], None]] = web.AppKey("setup_on_registered")
DONE = web.AppKey("setup_done", dict)
SETUP_KEY = web.AppKey("setup_key", str)


def create_setup_app(settings: Settings,
                     on_registered: Callable[[dict[str, Any]], None] = lambda info: None,
                     setup_key: str | None = None) -> web.Application:
    """The application of a hangar that has no GitHub App yet: /setup and /healthz."""
    app = web.Application()
    app[SETTINGS] = settings
    app[SETUP_KEY] = setup_key or secrets.token_urlsafe(18)
    app[STATES] = registration.States()
    app[ON_REGISTERED] = on_registered
    app[DONE] = {}
    app.cleanup_ctx.append(_session)
    app.router.add_get("/setup", setup_page)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/", _to_setup)
    return app


def mount_configured(app: web.Application, app_id: int | None) -> None:
    """On a hangar that has its App, /setup says so instead of registering another."""

    async def already(request: web.Request) -> web.Response:
        return page("hangar setup", f"<h1>hangar already has its GitHub App</h1><p>App id "
                    f"{escape(str(app_id))} is configured, so setup is off. To register "
                    "another App, start hangar with an empty data directory and no "
                    "HANGAR_APP_ID.</p>", status=404)

    app.router.add_get("/setup", already)


async def serve_until_registered(settings: Settings) -> dict[str, Any]:
    """Serve the setup page until a registration is written; answer what GitHub gave."""
    registered: asyncio.Future = asyncio.get_running_loop().create_future()

    def done(info: dict[str, Any]) -> None:
        if not registered.done():
            registered.set_result(info)

    app = create_setup_app(settings, done)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, settings.host, settings.port).start()
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::") else settings.host
    print(f"hangar: no GitHub App is configured. Open http://{host}:{settings.port}"
          f"/setup?key={app[SETUP_KEY]} in a browser to register one.", flush=True)
    try:
        info = await registered
        await asyncio.sleep(0.3)  # let the confirmation page reach the browser
    finally:
        await runner.cleanup()
    return info


async def _session(app: web.Application) -> AsyncIterator[None]:
    app[SESSION] = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
    yield
    await app[SESSION].close()


async def _healthz(request: web.Request) -> web.Response:
    return web.json_response({"ok": True, "setup": not request.app[DONE]})


async def _to_setup(request: web.Request) -> web.Response:
    raise web.HTTPFound("/setup")


async def setup_page(request: web.Request) -> web.Response:
    if request.app[DONE]:
        return _registered_page(request.app[DONE])
    if "code" in request.query or "state" in request.query:
        return await _finish(request)
    return _start_page(request)


def _start_page(request: web.Request) -> web.Response:
    settings = request.app[SETTINGS]
    query = request.query
    key = request.app[SETUP_KEY]
    if not hmac.compare_digest(query.get("key", "").encode(), key.encode()):
        return page("hangar setup", "<h1>Register hangar's GitHub App</h1><p>Open the link "
                    "with <code>/setup?key=…</code> that hangar printed when it started: "
                    "only someone who can read its log may register its App.</p>", status=403)
    public_url = (query.get("public_url") or settings.public_url
                  or str(request.url.origin())).strip()
    github = query.get("github") or git_base_url(settings.github_url)
    organization = (query.get("organization") or "").strip() or None
    name = (query.get("name") or "").strip() or None
    try:
        web_url, api_url = registration.web_and_api_urls(github)
        public_url = registration.checked_public_url(public_url)
    except ValueError as exc:
        options = _options_form(key, github, organization, public_url, name)
        return page("hangar setup", f"<h1>Register hangar's GitHub App</h1><p class=bad>"
                    f"{escape(str(exc))}</p>{options}", status=400)
    manifest = registration.manifest_for(public_url, name)
    state = request.app[STATES].issue(web_url, api_url, public_url)
    action = registration.new_app_url(web_url, organization, state)
    owner = f"the organization {organization}" if organization else "your personal account"
    permissions = ", ".join(f"{k}: {v}" for k, v in sorted(manifest["default_permissions"].items()))
    body = (
        "<h1>Register hangar's GitHub App</h1>"
        f'<form class=card method=post action="{escape(action)}">'
        f'<input type=hidden name=manifest value="{escape(json.dumps(manifest))}">'
        f"<p>GitHub at <code>{escape(web_url)}</code> creates the App <b>"
        f"{escape(manifest['name'])}</b> for {escape(owner)}, with its webhook at "
        f"<code>{escape(manifest['hook_attributes']['url'])}</code>.</p>"
        f"<p class=muted>Permissions: {escape(permissions)}. Events: "
        f"{escape(', '.join(manifest['default_events']))}.</p>"
        "<button type=submit id=register>Register the GitHub App</button></form>"
        f"{_options_form(key, web_url, organization, public_url, name)}"
    )
    return page("hangar setup", body)


def _options_form(key: str, github: str, organization: str | None, public_url: str,
                  name: str | None) -> str:
    return (
        "<form class=card method=get action=/setup><h2>For an organization, or another "
        "GitHub</h2>"
        f'<input type=hidden name=key value="{escape(key)}">'
        "<label for=github>GitHub address (github.com or your Enterprise Server)</label>"
        f'<input type=url id=github name=github value="{escape(github)}">'
        "<label for=organization>Organization (empty: your personal account)</label>"
        f'<input type=text id=organization name=organization value="{escape(organization or "")}">'
        "<label for=public_url>Where GitHub reaches this hangar</label>"
        f'<input type=url id=public_url name=public_url value="{escape(public_url)}">'
        "<label for=name>App name (empty: hangar)</label>"
        f'<input type=text id=name name=name value="{escape(name or "")}">'
        "<button type=submit class=plain id=change>Use these</button></form>"
    )


async def _finish(request: web.Request) -> web.Response:
    app = request.app
    code = request.query.get("code", "")
    pending = app[STATES].take(request.query.get("state", ""))
    if pending is None or not code:
        return _failed("GitHub's answer does not match a registration this hangar started "
                       "(or it is more than an hour old).", 400)
    try:
        conversion = await exchange_code(app[SESSION], pending.api_url, code)
    except RegistrationError as exc:
        return _failed(str(exc), 502)
    settings = app[SETTINGS]
    try:
        path = registration.write_registration(settings.data_dir, conversion, pending.api_url,
                                               pending.public_url)
    except OSError as exc:
        return _failed(f"GitHub created the App {conversion.get('slug')}, but hangar could not "
                       f"save it in {settings.data_dir} ({exc.strerror}): make that directory "
                       f"writable, delete the App on GitHub ({conversion.get('html_url')}) "
                       "and start again.", 500)
    info = {"id": conversion["id"], "slug": conversion.get("slug"),
            "html_url": conversion.get("html_url") or "", "path": str(path),
            "install_url": registration.install_url(conversion.get("html_url") or "")}
    app[DONE].update(info)
    log.info("github app registered", extra={"app_id": info["id"], "slug": info["slug"]})
    app[ON_REGISTERED](info)
    return _registered_page(info)


def _registered_page(info: dict[str, Any]) -> web.Response:
    return page("hangar setup", (
        f"<h1>The GitHub App {escape(str(info['slug']))} is registered</h1>"
        f"<section><p>App id {escape(str(info['id']))}. Its private key and webhook secret "
        f"are saved in <code>{escape(info['path'])}</code> (readable by hangar's user only); "
        "<code>hangar serve</code> reads them from there.</p>"
        f"<p>Next: {link(info['install_url'], 'install the App on your repositories')}, "
        "then protect each default branch with a ruleset (<code>hangar doctor "
        "OWNER/REPO</code> checks it).</p></section>"))


def _failed(reason: str, status: int) -> web.Response:
    return page("hangar setup", f"<h1>The App was not registered</h1><p class=bad>"
                f"{escape(reason)}</p><p>{link('/setup', 'Start again')}: nothing was "
                "written.</p>", status=status)


class RegistrationError(Exception):
    """GitHub did not turn the code into an App; the message says why and what to do."""


async def exchange_code(session: aiohttp.ClientSession, api_url: str,
                        code: str) -> dict[str, Any]:
    """POST /app-manifests/{code}/conversions: the new App with its key and secrets."""
    url = f"{api_url}/app-manifests/{quote(code, safe='')}/conversions"
    try:
        async with session.post(url, headers={"Accept": "application/vnd.github+json"}) as resp:
            body = await resp.text()
            status = resp.status
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise RegistrationError(f"could not reach {api_url} to finish the registration "
                                f"({type(exc).__name__}: {exc}).") from None
    if status != 201:
        raise RegistrationError(f"GitHub answered {status} to the code exchange "
                                f"({body[:200]}); codes are good for one hour and one use, "
                                "so start again.")
    try:
        conversion = json.loads(body)
        missing = [k for k in ("id", "pem", "webhook_secret") if not conversion.get(k)]
    except (ValueError, AttributeError):
        missing = ["a JSON body"]
    if missing:
        raise RegistrationError(f"GitHub's answer to the code exchange lacks {', '.join(missing)}.")
    return conversion
