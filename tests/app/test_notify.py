"""Operator notifications: who gets which, the backoff, the bodies, the signature."""

from __future__ import annotations

import json

from app.notify import Notification, retry_delay, signature, wants
from app.render.notify import body
from app.settings import NotifierSettings


def notifier(**fields) -> NotifierSettings:
    return NotifierSettings(name="ops", url="https://hooks.example/x", secret="s", **fields)


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
