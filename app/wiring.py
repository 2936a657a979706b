"""The composition root: the one module that knows every part and joins them.

It builds hangar's aiohttp application (`create_app(settings)`), its shared things under
the typed keys of app/web/keys.py, and the engine, which each concern of `CONCERNS` tells
its row kinds, commands, chores and hooks (its `register(engine)`); what a concern hears is
its router's (handlers/). The engine knows the concerns only through what they register.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from types import ModuleType
from urllib.parse import urlsplit

import aiohttp
import yaml
from aiohttp import web

from app import (
    autofix,
    commands,
    envbuilds,
    fanout,
    landing,
    notify,
    repositories,
    review_threads,
    reviewers,
    runs,
)
from app.engine import Chore, CommandAction, Engine, Registrations
from app.github.client import AppAuth, RetryPolicy
from app.intake import redelivery
from app.intake.deliveries import DeliveryWriter
from app.intake.dispatch import Dispatcher
from app.metrics import Metrics
from app.redact import remember, remember_pem, remember_place, remember_url
from app.settings import Settings
from app.store import Store
from app.web import api, fleet, jobpage, mcp_http, signin, upstream, webhook
from app.web.keys import (
    AUTH,
    DISPATCHER,
    EGRESS,
    ENGINE,
    MAX_WEBHOOK_BYTES,
    METRICS,
    MODELS,
    SESSION,
    SETTINGS,
    STORE,
    TOKENS,
    WRITER,
)
from app.web.registration import REGISTRATION_FILE
from app.web.sandbox_gate import serve_gate
from app.web.setup import mount_configured
from handlers import router

log = logging.getLogger(__name__)

# How often the serving store copies its WAL back into the database, off every commit.
CHECKPOINT_EVERY_S = 0.5

# How often handled deliveries past their retention are deleted.
DELIVERY_RETENTION_EVERY_S = 3600.0


def create_app(settings: Settings) -> web.Application:
    """Build hangar's application; everything it holds starts and stops with it."""
    settings.check_for_serving()
    remember_settings_secrets(settings)
    remember_places(settings)
    app = web.Application(client_max_size=MAX_WEBHOOK_BYTES)
    app[SETTINGS] = settings
    app[METRICS] = Metrics()
    app.cleanup_ctx.append(_store)
    app.cleanup_ctx.append(_session)
    app.cleanup_ctx.append(serve_gate)  # what sandboxes reach: app/web/sandbox_gate.py
    app.cleanup_ctx.append(_engine_and_dispatcher)
    webhook.setup(app)
    upstream.mount_sandbox_state(app)
    mount_configured(app, settings.app_id)
    api.setup(app)
    mcp_http.mount(app)
    signin.setup(app)  # people signed in with GitHub, on the pages below
    fleet.setup(app)
    jobpage.setup(app)
    return app


def build_engine(app: web.Application) -> Engine:
    engine = Engine(
        settings=app[SETTINGS], store=app[STORE], auth=app[AUTH], metrics=app[METRICS],
        tokens=app[TOKENS], models=app.get(MODELS), egress=app.get(EGRESS),
    )
    register_concerns(engine)
    remember_environment_secrets(engine)
    return engine


def remember_settings_secrets(settings: Settings) -> None:
    """What hangar's settings hold that must never leave it (app.redact): the App's key,
    the webhook secret, the API token, the model endpoints' credentials and keys."""
    remember(settings.secret(),
             settings.api_token.get_secret_value() if settings.api_token else None)
    remember_pem(settings.private_key())
    registration = settings.data_dir / REGISTRATION_FILE  # `hangar setup`'s, for people
    if registration.is_file():
        saved = yaml.safe_load(registration.read_text()) or {}
        remember(str(saved.get("client_secret") or "") if isinstance(saved, dict) else None)
    for credential, endpoint in settings.model_endpoints.items():
        remember(os.environ.get(credential))
        remember_url(endpoint.get("base_url"))


def remember_places(settings: Settings) -> None:
    """The operator's places that an error's words may carry into what hangar tells people
    (app.redact.Places): its data and environments directories, the sandbox gate's address
    as sandboxes reach it (unless it is the address people reach hangar at), each model
    endpoint, and the database."""
    for path, name in ((settings.data_dir, "[hangar's data directory]"),
                       (settings.envs_dir, "[hangar's environments directory]")):
        if path is not None:
            remember_place(str(path.absolute()), name)
            remember_place(str(path.resolve()), name)
    # Links hangar gives people start with its public URL: a gate at that address stays.
    gate, shown = settings.proxy_base_url, (settings.public_url or "").rstrip("/")
    if not shown or not (shown.startswith(gate) or gate.startswith(shown)):
        remember_place(gate, "[hangar's sandbox gate]")
    for endpoint in settings.model_endpoints.values():
        remember_address(endpoint.get("base_url"), "[the model endpoint]")
    if settings.database_url is not None:
        remember_address(settings.database_url.get_secret_value(), "[hangar's database]")


def remember_address(url: str | None, name: str) -> None:
    """A URL of the operator's, as written and as an error names its host and port."""
    if not url:
        return
    parts = urlsplit(url)
    remember_place(url, name)
    remember_place(f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}", name)
    try:
        port = parts.port or {"https": 443, "http": 80, "postgresql": 5432,
                              "postgres": 5432}.get(parts.scheme)
    except ValueError:
        return
    if parts.hostname and port:
        remember_place(f"{parts.hostname}:{port}", name)


def remember_environment_secrets(engine: Engine) -> None:
    """The secrets the environments name from hangar's own environment: each model
    credential and each build secret an operator mapped."""
    for spec in engine.envs.values():
        for name in (spec.model_credential_env, *spec.build_secrets):
            if name:
                remember(os.environ.get(name))


# Each concern registers its rows, commands, chores, start-up work, hooks and status notes
# (its `register(engine)`), in this order: the engine looks over the row kinds, runs the
# start-up work and says the status notes in the order they were registered.
CONCERNS: tuple[ModuleType, ...] = (
    commands, runs, landing, fanout, autofix, reviewers, review_threads, notify, envbuilds,
    repositories,
)

# After a run's step its hooks run concern by concern in this order: a waiting command is
# freed, auto-fix looks at the head's CI, reviewers are asked, threads answered, the job
# woken, merge groups and overlaps looked at, operators told.
AFTER_RUN_STEP: tuple[ModuleType, ...] = (
    commands, autofix, reviewers, review_threads, runs, landing, notify,
)


def command_actions() -> dict[str, CommandAction]:
    """Every command's action, as the concern that owns it registers it."""
    registered = Registrations()
    register_concerns(registered)
    return registered.command_actions


def register_concerns(engine: Registrations) -> None:
    """What each concern asks of the engine, then the intake's chores."""
    for concern in CONCERNS:
        concern.register(engine)
    engine.order_after_step("run", AFTER_RUN_STEP)
    engine.add_chore(Chore("redelivery", redelivery.catch_up,
                           every=lambda engine: engine.settings.redelivery_interval_seconds))
    engine.add_chore(Chore("forget deliveries", redelivery.forget_old_deliveries,
                           every=lambda _engine: DELIVERY_RETENTION_EVERY_S))


async def _store(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    # With PostgreSQL, several replicas share the rows: each takes leases in its own name.
    shared = settings.database != settings.db_path
    app[STORE] = Store(settings.database, checkpoint_every=CHECKPOINT_EVERY_S,
                       owner=settings.replica_name if shared else "hangar")
    app[WRITER] = DeliveryWriter(app[STORE])
    yield
    app[WRITER].close()
    app[STORE].close()


async def _session(app: web.Application) -> AsyncIterator[None]:
    app[SESSION] = aiohttp.ClientSession()
    settings = app[SETTINGS]
    app[AUTH] = AppAuth(
        settings.github_app_id(),
        settings.private_key(),
        api_url=settings.github_url,
        session=app[SESSION],
        metrics=app[METRICS],
        retry=RetryPolicy(write_spacing_s=settings.github_write_spacing_seconds,
                          writes_per_minute=settings.github_writes_per_minute),
        # Replicas share each installation's budget through the store; one process keeps
        # it in memory.
        budget=app[STORE] if app[STORE].shared else None,
    )
    yield
    await app[SESSION].close()


async def _engine_and_dispatcher(app: web.Application) -> AsyncIterator[None]:
    engine = build_engine(app)
    app[ENGINE] = engine
    dispatcher = Dispatcher(app[STORE], router, app[METRICS], {"engine": engine}, app[WRITER])
    app[DISPATCHER] = dispatcher
    tasks = [engine.start(), _spawn(dispatcher.run(), "dispatcher")]
    yield
    await dispatcher.stop()
    await engine.stop()
    for task in tasks:
        await _finish(task)


def _spawn(coro, name: str) -> asyncio.Task:
    return asyncio.get_running_loop().create_task(coro, name=name)


async def _finish(task: asyncio.Task) -> None:
    try:
        async with asyncio.timeout(30):
            await task
    except (TimeoutError, asyncio.CancelledError):
        task.cancel()
