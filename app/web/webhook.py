"""The web application's own routes: webhook intake, health and metrics.

app/wiring.py builds the application and mounts these beside the API and the fleet page.
Sandboxes never reach it: they reach the sandbox gate (app/sandbox_gate.py)."""

from __future__ import annotations

import json
import logging
import time
from urllib.parse import parse_qs

from aiohttp import web
from gidgethub import ValidationFailure, sansio

from app.intake.payloads import UnreadablePayload, kept, read_delivery
from app.store import Delivery
from app.web import gauges
from app.web.keys import DISPATCHER, ENGINE, METRICS, SETTINGS, STORE, WRITER

log = logging.getLogger(__name__)


def setup(app: web.Application) -> None:
    app.router.add_post("/webhook", receive_webhook)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)


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
        raw = _decode(headers.get("Content-Type", ""), body)
    except UnsupportedMediaType as exc:
        return "rejected", _reason(400, str(exc))
    except UnreadablePayload as exc:
        raw = body.decode(errors="replace")
        return "rejected", await _store_failed(app, event, delivery_id, raw, str(exc))
    try:
        envelope, parts, payload = read_delivery(event, raw)
    except ValueError as exc:
        return "rejected", await _store_failed(app, event, delivery_id, raw, str(exc))
    # A delivery no handler hears (GitHub sends every action of the events an App asks
    # for) is stored done: nothing dispatches it, and it costs one write.
    heard = event != "ping" and app[DISPATCHER].hears(event, payload)
    delivery = Delivery(
        id=delivery_id, event=event, action=envelope.action,
        repo=envelope.repository.full_name if envelope.repository else None,
        installation_id=envelope.installation.id if envelope.installation else None,
        received_at=time.time(), payload=payload,
        state="stored" if heard else "ignored", error=None, parts=parts)
    fresh = await app[WRITER].add(delivery, kept(envelope, parts, raw))
    fields = {"delivery_id": delivery_id, "event": event, "repo": delivery.repo}
    if not fresh:
        log.info("duplicate delivery", extra=fields)
        return "duplicate", _answer(_DUPLICATE, 200)
    # An operator matches GitHub's "Recent Deliveries" to this line by delivery id: worth
    # the ~50 µs it costs (more than reading the payload), unless the log level drops it.
    log.info("delivery stored", extra=fields)
    if event == "ping":
        return "accepted", _answer(_PONG, 200)
    if heard:
        app[DISPATCHER].submit(delivery)
    return "accepted", _answer(_ACCEPTED, 202)


class UnsupportedMediaType(ValueError):
    """Not a content type GitHub sends: nothing is stored."""


async def _store_failed(
    app: web.Application, event: str, delivery_id: str, raw: str, reason: str
) -> web.Response:
    """Keep a signed delivery hangar cannot use, marked failed, and say why."""
    delivery = Delivery(
        id=delivery_id, event=event, action=None, repo=None, installation_id=None,
        received_at=time.time(), payload={}, state="failed", error=reason)
    await app[WRITER].add(delivery, raw)
    log.warning("delivery refused", extra={"delivery_id": delivery_id, "event": event,
                                           "reason": reason})
    return _reason(400, reason)


def _decode(content_type: str, body: bytes) -> str:
    """The payload's JSON text, from either content type GitHub sends."""
    mime = content_type.split(";")[0].strip().lower()
    if mime not in ("application/json", "application/x-www-form-urlencoded"):
        raise UnsupportedMediaType(
            "Content-Type must be application/json or application/x-www-form-urlencoded")
    try:
        raw = body.decode()
    except UnicodeDecodeError:
        raise UnreadablePayload("the body is not UTF-8") from None
    if mime == "application/x-www-form-urlencoded":
        try:
            return parse_qs(raw)["payload"][0]
        except (KeyError, IndexError):
            raise UnreadablePayload(
                "the body is not a webhook payload: a form body carries it in `payload`"
            ) from None
    return raw


# The answers every delivery gets, encoded once.
_ACCEPTED = json.dumps({"ok": True}).encode()
_PONG = json.dumps({"ok": True, "pong": True}).encode()
_DUPLICATE = json.dumps({"ok": True, "duplicate": True}).encode()


def _answer(body: bytes, status: int) -> web.Response:
    return web.Response(body=body, status=status, content_type="application/json")


def _reason(status: int, message: str) -> web.Response:
    return web.json_response({"ok": False, "message": message}, status=status)


async def healthz(request: web.Request) -> web.Response:
    store = request.app[STORE]
    return web.json_response({"ok": True, "pending_deliveries": store.count_deliveries("stored")})


async def metrics(request: web.Request) -> web.Response:
    metrics_ = request.app[METRICS]
    if ENGINE in request.app:
        gauges.refresh(metrics_, request.app[ENGINE])
    return web.Response(text=metrics_.render(), content_type="text/plain", charset="utf-8")
