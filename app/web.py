"""The web application: webhook intake, health, metrics, the push proxy and the API."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from urllib.parse import parse_qs

import aiohttp
from aiohttp import web
from gidgethub import ValidationFailure, sansio

from app.dispatch import Dispatcher
from app.github import AppAuth
from app.intake import DeliveryWriter
from app.metrics import Metrics
from app.settings import Settings
from app.store import Delivery, Store

log = logging.getLogger(__name__)

SETTINGS = web.AppKey("settings", Settings)
STORE = web.AppKey("store", Store)
METRICS = web.AppKey("metrics", Metrics)
SESSION = web.AppKey("session", aiohttp.ClientSession)
AUTH = web.AppKey("auth", AppAuth)
DISPATCHER = web.AppKey("dispatcher", Dispatcher)
ENGINE = web.AppKey("engine", object)
WRITER = web.AppKey("writer", DeliveryWriter)

# GitHub caps webhook payloads at 25 MB.
MAX_WEBHOOK_BYTES = 25 * 2**20 + 4096


def create_app(settings: Settings) -> web.Application:
    """Build hangar's application; everything it holds starts and stops with it."""
    settings.check_for_serving()
    app = web.Application(client_max_size=MAX_WEBHOOK_BYTES)
    app[SETTINGS] = settings
    app[METRICS] = Metrics()
    app.cleanup_ctx.append(_store)
    app.cleanup_ctx.append(_session)
    app.cleanup_ctx.append(_engine_and_dispatcher)
    app.router.add_post("/webhook", receive_webhook)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    _mount_proxy(app)
    from app import api

    api.setup(app)
    return app


async def _store(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    app[STORE] = Store(settings.db_path)
    app[WRITER] = DeliveryWriter(app[STORE])
    yield
    app[WRITER].close()
    app[STORE].close()


async def _session(app: web.Application) -> AsyncIterator[None]:
    app[SESSION] = aiohttp.ClientSession()
    settings = app[SETTINGS]
    app[AUTH] = AppAuth(
        settings.app_id,
        settings.private_key(),
        api_url=settings.github_url,
        session=app[SESSION],
        metrics=app[METRICS],
    )
    yield
    await app[SESSION].close()


async def _engine_and_dispatcher(app: web.Application) -> AsyncIterator[None]:
    from app.engine import Engine
    from handlers import router

    engine = Engine.from_app(app)
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
        await asyncio.wait_for(task, timeout=30)
    except (TimeoutError, asyncio.CancelledError):
        task.cancel()


def _mount_proxy(app: web.Application) -> None:
    from app.upstream import mount_proxy

    mount_proxy(app)


async def receive_webhook(request: web.Request) -> web.Response:
    started = time.perf_counter()
    app = request.app
    result, response = await _accept(request)
    app[METRICS].deliveries.inc(result=result)
    app[METRICS].ack_latency.observe(time.perf_counter() - started)
    return response


async def _accept(request: web.Request) -> tuple[str, web.Response]:
    app = request.app
    body = await request.read()
    headers = request.headers
    signature = headers.get("X-Hub-Signature-256")
    if not signature:
        return "rejected", _reason(401, "X-Hub-Signature-256 is missing: set a webhook secret "
                                        "on the GitHub App; hangar accepts only signed deliveries")
    try:
        sansio.validate_event(body, signature=signature, secret=app[SETTINGS].secret())
    except ValidationFailure:
        return "rejected", _reason(
            401, "X-Hub-Signature-256 does not match this body: check that the App's "
                 "webhook secret equals HANGAR_WEBHOOK_SECRET")
    event = headers.get("X-GitHub-Event")
    delivery_id = headers.get("X-GitHub-Delivery")
    if not event or not delivery_id:
        return "rejected", _reason(400, "X-GitHub-Event and X-GitHub-Delivery are required")
    try:
        raw, payload = _decode(headers.get("Content-Type", ""), body)
    except ValueError as exc:
        return "rejected", _reason(400, str(exc))
    delivery = Delivery(
        id=delivery_id, event=event, action=payload.get("action"),
        repo=(payload.get("repository") or {}).get("full_name"),
        installation_id=(payload.get("installation") or {}).get("id"),
        received_at=time.time(), payload=payload,
        state="ignored" if event == "ping" else "stored", error=None)
    fresh = await app[WRITER].add(delivery, raw)
    fields = {"delivery_id": delivery_id, "event": event, "repo": delivery.repo}
    if not fresh:
        log.info("duplicate delivery", extra=fields)
        return "duplicate", web.json_response({"ok": True, "duplicate": True}, status=200)
    log.info("delivery stored", extra=fields)
    if event == "ping":
        return "accepted", web.json_response({"ok": True, "pong": True}, status=200)
    app[DISPATCHER].submit(delivery)
    return "accepted", web.json_response({"ok": True}, status=202)


def _decode(content_type: str, body: bytes) -> tuple[str, dict]:
    """(the payload's JSON text, the payload) from either content type GitHub sends."""
    mime = content_type.split(";")[0].strip().lower()
    try:
        if mime == "application/json":
            raw = body.decode()
        elif mime == "application/x-www-form-urlencoded":
            raw = parse_qs(body.decode())["payload"][0]
        else:
            raise ValueError("Content-Type must be application/json or "
                             "application/x-www-form-urlencoded")
        payload = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, IndexError) as exc:
        raise ValueError(f"the body is not a webhook payload: {exc}") from None
    if not isinstance(payload, dict):
        raise ValueError("the body must be a JSON object")
    return raw, payload


def _reason(status: int, message: str) -> web.Response:
    return web.json_response({"ok": False, "message": message}, status=status)


async def healthz(request: web.Request) -> web.Response:
    store = request.app[STORE]
    return web.json_response({"ok": True, "pending_deliveries": store.count_deliveries("stored")})


async def metrics(request: web.Request) -> web.Response:
    return web.Response(
        text=request.app[METRICS].render(), content_type="text/plain", charset="utf-8"
    )
