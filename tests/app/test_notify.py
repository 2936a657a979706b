"""Operator notifications: who gets which, the backoff, the bodies, the signature."""

from __future__ import annotations

import json
from types import SimpleNamespace

import aiohttp
import pytest
from aiohttp import web

from app import notify
from app.github.reads import GitHubReads
from app.notify import (
    TABLE,
    Notification,
    NotificationDelivery,
    advance_delivery,
    delivery_id,
    emit,
    retry_delay,
    signature,
    wants,
)
from app.render.notify import body
from app.settings import NotifierSettings


def notifier(**fields) -> NotifierSettings:
    return NotifierSettings(**{"name": "ops", "url": "https://hooks.example/x", "secret": "s",
                               **fields})


def test_a_notifier_gets_only_its_events_installations_and_repositories():
    note = Notification(kind="land.landed", dedupe_key="k", repo="acme/widgets",
                        installation_id=7)
    assert wants(notifier(), note)
    assert not wants(notifier(events=["run.lost"]), note)
    assert wants(notifier(installations=[7]), note)
    assert not wants(notifier(installations=[8]), note)
    assert wants(notifier(repositories=["ACME/widgets"]), note)
    assert not wants(notifier(repositories=["acme/gears"]), note)


def test_retries_back_off_doubling_up_to_an_hour():
    assert [retry_delay(30, n) for n in (1, 2, 3, 4, 5)] == [30, 60, 120, 240, 480]
    assert retry_delay(30, 20) == 3600


def test_the_signature_is_githubs_scheme_with_the_operators_secret():
    # The vector GitHub documents for X-Hub-Signature-256, the same HMAC-SHA256 scheme.
    assert signature("It's a Secret to Everybody", b"Hello, World!") == (
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17")


def test_bodies_carry_hangars_facts_in_json_or_slack_form():
    note = Notification(kind="land.conflict", dedupe_key="k", repo="acme/widgets",
                        facts={"pr": 4, "base": "main", "head_sha": "abcdef1234"})
    sent = json.loads(body("json", "notify-1", note))
    assert sent["title"] == "PR #4 conflicts with main"
    assert sent["id"] == "notify-1" and sent["facts"]["head_sha"] == "abcdef1234"
    slack = json.loads(body("slack", "notify-1", note))
    assert slack == {"text": "acme/widgets: PR #4 conflicts with main\nhead abcdef1 cannot be "
                             "brought up to date with main; a person resolves it or asks "
                             "hangar for a turn"}


class Receiver:
    """A webhook receiver on loopback: what each POST said, its signature checked."""

    def __init__(self, secret: str) -> None:
        self.secret = secret
        self.got: list[dict] = []

    async def handle(self, request: web.Request) -> web.Response:
        raw = await request.read()
        self.got.append({"body": json.loads(raw), "event": request.headers["X-Hangar-Event"],
                         "signed": request.headers["X-Hangar-Signature"]
                         == signature(self.secret, raw)})
        return web.Response(status=200)


class Clock:
    def __init__(self) -> None:
        self.at = 1_000_000.0

    def time(self) -> float:
        return self.at


@pytest.fixture
async def receiver(aiohttp_server):
    got = Receiver("s")
    app = web.Application()
    app.router.add_post("/hook", got.handle)
    server = await aiohttp_server(app)
    got.url = str(server.make_url("/hook"))
    return got


async def sent_through(step_engine, receiver, clock, monkeypatch, *, fmt="json", **settings):
    monkeypatch.setattr(notify, "time", clock)
    engine = step_engine(None, notifiers=[notifier(url=receiver.url, format=fmt)], **settings)
    session = aiohttp.ClientSession()
    engine.github = GitHubReads(SimpleNamespace(session=session), engine.settings)
    return engine, session


def runs_lost(engine, *numbers: int) -> list[str]:
    """A `run.lost` notification for each run number, in order: their delivery ids."""
    for n in numbers:
        emit(engine, Notification(kind="run.lost", dedupe_key=f"run.lost:{n}",
                                  repo="acme/widgets",
                                  facts={"run": f"run-{n}", "issue": n, "pr": None}))
    return [delivery_id("ops", f"run.lost:{n}") for n in numbers]


async def test_a_notifier_over_its_rate_limit_waits_its_turn_and_loses_nothing(
        step_engine, receiver, monkeypatch):
    clock = Clock()
    engine, session = await sent_through(step_engine, receiver, clock, monkeypatch,
                                         notify_rate_limit=2, notify_rate_window_seconds=60)
    try:
        rows = runs_lost(engine, 1, 2, 3)
        for row_id in rows:
            await advance_delivery(engine, row_id)
            clock.at += 1
        assert [g["body"]["facts"]["run"] for g in receiver.got] == ["run-1", "run-2"]
        waiting = engine.store.get(TABLE, rows[2], NotificationDelivery)
        # it waits until the first send leaves the window, still pending, nothing tried yet
        assert (waiting.state, waiting.attempts) == ("pending", [])
        assert waiting.next_at == 1_000_000.0 + 60
        await advance_delivery(engine, rows[2])  # woken early: still waits
        assert len(receiver.got) == 2
        clock.at = waiting.next_at
        await advance_delivery(engine, rows[2])
        assert [g["body"]["facts"]["run"] for g in receiver.got] == ["run-1", "run-2", "run-3"]
        assert engine.store.get(TABLE, rows[2], NotificationDelivery).state == "delivered"
    finally:
        await session.close()


async def test_a_slack_notifier_posts_slacks_text_body_signed(
        step_engine, receiver, monkeypatch):
    engine, session = await sent_through(step_engine, receiver, Clock(), monkeypatch,
                                         fmt="slack")
    try:
        emit(engine, Notification(kind="land.landed", dedupe_key="k", repo="acme/widgets",
                                  facts={"pr": 4, "base": "main", "head_sha": "abcdef1234",
                                         "merge_sha": "1234567abc"}))
        await advance_delivery(engine, delivery_id("ops", "k"))
    finally:
        await session.close()
    [got] = receiver.got
    assert got["signed"] and got["event"] == "land.landed"
    assert list(got["body"]) == ["text"] and got["body"]["text"].startswith("acme/widgets: ")


async def test_a_notifier_hears_its_notifications_in_the_order_they_were_made(
        step_engine, receiver, monkeypatch):
    """A retry, or a notification the rate limit held, goes before a newer one due at the
    same moment: an operator never reads "landed" before the approval it followed."""
    clock = Clock()
    engine, session = await sent_through(step_engine, receiver, clock, monkeypatch,
                                         notify_rate_limit=1, notify_rate_window_seconds=60)
    try:
        rows = runs_lost(engine, 1, 2)
        clock.at += 61  # both due, the window free: the newer is stepped first
        await advance_delivery(engine, rows[1])
        assert receiver.got == []
        behind = engine.store.get(TABLE, rows[1], NotificationDelivery)
        assert (behind.state, behind.attempts) == ("pending", [])
        await advance_delivery(engine, rows[0])
        clock.at = max(clock.at, behind.next_at)
        await advance_delivery(engine, rows[1])  # its turn; the window holds it now
        clock.at = engine.store.get(TABLE, rows[1], NotificationDelivery).next_at
        await advance_delivery(engine, rows[1])
        assert [g["body"]["facts"]["run"] for g in receiver.got] == ["run-1", "run-2"]
    finally:
        await session.close()


async def test_a_newer_notification_waits_behind_an_older_ones_retry(
        step_engine, receiver, monkeypatch):
    """An older notification waiting out its retry delay still goes first: the newer one,
    due now, is held until after it."""
    clock = Clock()
    engine, session = await sent_through(step_engine, receiver, clock, monkeypatch)
    try:
        rows = runs_lost(engine, 1, 2)
        older = engine.store.get(TABLE, rows[0], NotificationDelivery)
        engine.store.put(TABLE, rows[0], older.model_copy(update={  # its first send failed
            "next_at": clock.at + 30, "attempts": [{"at": clock.at, "status": 500}]}),
                         active=True)
        await advance_delivery(engine, rows[1])
        assert receiver.got == []
        behind = engine.store.get(TABLE, rows[1], NotificationDelivery)
        assert behind.state == "pending" and behind.next_at > clock.at + 30
        clock.at += 30
        await advance_delivery(engine, rows[0])
        clock.at = behind.next_at
        await advance_delivery(engine, rows[1])
        assert [g["body"]["facts"]["run"] for g in receiver.got] == ["run-1", "run-2"]
    finally:
        await session.close()
