"""Usage from every source, per credential: each header family the vendors send and each
stream event the pinned CLIs print become readings of the same windows in one ledger.

Header fixtures are the vendors' documented names (a captured Anthropic API answer, the
headers the pinned Claude Code and Codex read for a subscription); the stream fixtures
were printed by the pinned CLIs (scripts/capture-agent-fixtures.py) against the scripted
model sending those headers.
"""

from __future__ import annotations

import calendar
import time
from pathlib import Path

import pytest

from fakehub.model import ModelScript, ModelServer
from proxy.gateway import ModelLedger
from proxy.usage import REFUSED, Reading, from_claude_event, from_codex_message, from_headers
from sandbox.harness import ClaudeHarness, CodexHarness

FIXTURES = Path(__file__).parents[1] / "sandbox" / "fixtures" / "agents"
NOW = 1796159800.0  # the fixtures were captured a few seconds before this
RESET = 1796163342.0  # what the scripted model said the windows reset at


def entry(reading: Reading) -> tuple:
    """What the ledger keeps of a window, but its source and time."""
    return (reading.window, round(reading.utilization, 6), reading.reset_at, reading.status)


def stamp(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


# (name, headers, status, the windows read)
HEADER_CASES = [
    ("anthropic api key", {  # as api.anthropic.com answers an API key, all four limits
        "anthropic-ratelimit-requests-limit": "1000",
        "anthropic-ratelimit-requests-remaining": "999",
        "anthropic-ratelimit-requests-reset": stamp(NOW + 1),
        "anthropic-ratelimit-tokens-limit": "96000",
        "anthropic-ratelimit-tokens-remaining": "8640",
        "anthropic-ratelimit-tokens-reset": stamp(NOW + 60),
        "anthropic-ratelimit-input-tokens-limit": "80000",
        "anthropic-ratelimit-input-tokens-remaining": "72000",
        "anthropic-ratelimit-input-tokens-reset": stamp(NOW + 30),
        "anthropic-ratelimit-output-tokens-limit": "16000",
        "anthropic-ratelimit-output-tokens-remaining": "16000",
        "anthropic-ratelimit-output-tokens-reset": stamp(NOW + 2),
    }, 200, {("requests", 0.001, NOW + 1, None), ("tokens", 0.91, NOW + 60, None),
             ("input-tokens", 0.1, NOW + 30, None), ("output-tokens", 0.0, NOW + 2, None)}),
    ("anthropic subscription", {  # what the pinned Claude Code reads on a plan
        "anthropic-ratelimit-unified-status": "allowed_warning",
        "anthropic-ratelimit-unified-reset": str(int(RESET)),
        "anthropic-ratelimit-unified-representative-claim": "seven_day",
        "anthropic-ratelimit-unified-5h-utilization": "0.34",
        "anthropic-ratelimit-unified-5h-reset": str(int(RESET)),
        "anthropic-ratelimit-unified-5h-status": "allowed",
        "anthropic-ratelimit-unified-7d-utilization": "0.91",
        "anthropic-ratelimit-unified-7d-reset": str(int(RESET)),
        "anthropic-ratelimit-unified-7d-status": "allowed_warning",
        "anthropic-ratelimit-unified-overage-utilization": "0.5",  # paid extra, not the plan
    }, 200, {("5h", 0.34, RESET, "allowed"), ("7d", 0.91, RESET, "allowed_warning")}),
    ("anthropic subscription refused", {
        "anthropic-ratelimit-unified-status": "rejected",
        "anthropic-ratelimit-unified-reset": str(int(RESET)),
        "anthropic-ratelimit-unified-representative-claim": "seven_day",
        "anthropic-ratelimit-unified-7d-utilization": "1",
        "anthropic-ratelimit-unified-7d-reset": str(int(RESET)),
        "anthropic-ratelimit-unified-7d-status": "rejected",
        "retry-after": "3542",
    }, 429, {("7d", 1.0, RESET, "rejected"), (REFUSED, 1.0, NOW + 3542, "rejected")}),
    ("openai api key", {  # OpenAI's documented names: a duration for the reset
        "x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "54",
        "x-ratelimit-reset-requests": "1s", "x-ratelimit-limit-tokens": "150000",
        "x-ratelimit-remaining-tokens": "13500", "x-ratelimit-reset-tokens": "6m0s",
    }, 200, {("requests", 0.1, NOW + 1, None),
             ("tokens", 0.91, NOW + 360, None)}),
    ("codex subscription", {  # what the pinned Codex reads on a ChatGPT plan
        "x-codex-primary-used-percent": "34", "x-codex-primary-window-minutes": "300",
        "x-codex-primary-reset-at": str(int(RESET)),
        "x-codex-secondary-used-percent": "91", "x-codex-secondary-window-minutes": "10080",
        "x-codex-secondary-reset-at": str(int(RESET)),
    }, 200, {("5h", 0.34, RESET, None), ("7d", 0.91, RESET, None)}),
    ("a 429 with retry-after seconds", {"retry-after": "30"}, 429,
     {(REFUSED, 1.0, NOW + 30, "rejected")}),
    ("a 429 with retry-after a date", {"retry-after": "Wed, 02 Dec 2026 07:28:00 GMT"}, 429,
     {(REFUSED, 1.0, calendar.timegm((2026, 12, 2, 7, 28, 0)), "rejected")}),
    ("a 429 that says nothing", {}, 429, {(REFUSED, 1.0, None, "rejected")}),
    ("no rate-limit headers", {"content-type": "text/event-stream"}, 200, set()),
    ("garbage", {"anthropic-ratelimit-tokens-limit": "0",
                 "anthropic-ratelimit-tokens-remaining": "x",
                 "anthropic-ratelimit-unified-7d-utilization": "nan",
                 "x-codex-primary-used-percent": "lots"}, 200, set()),
]  # fmt: skip


@pytest.mark.parametrize(("headers", "status", "windows"),
                         [case[1:] for case in HEADER_CASES], ids=[c[0] for c in HEADER_CASES])
def test_every_header_family_is_read_per_window(headers, status, windows):
    readings = from_headers(headers, status, NOW)
    assert {entry(r) for r in readings} == windows
    assert all(r.at == NOW for r in readings)


def test_header_names_are_read_whatever_their_case():
    readings = from_headers({"Anthropic-RateLimit-Unified-7d-Utilization": "0.91"}, 200, NOW)
    assert [entry(r) for r in readings] == [("7d", 0.91, None, None)]


def test_the_scripted_models_subscription_headers_are_what_the_clis_read():
    # The headers the e2e tests' model sends are the ones the table above reads.
    server = ModelServer(ModelScript(scenes=[], subscription={"5h": 0.34, "7d": 0.91}))
    for kind in ("anthropic", "openai"):
        readings = from_headers(server._limit_headers(kind), 200, time.time())
        assert {(r.window, r.utilization) for r in readings} == {("5h", 0.34), ("7d", 0.91)}


# (fixture, harness, the windows its stream reported)
STREAM_CASES = [
    ("claude-subscription", ClaudeHarness(),
     {("5h", 0.34, RESET, "allowed"), ("7d", 0.91, RESET, "allowed_warning")}),
    ("claude-usage-limit", ClaudeHarness(),
     {("5h", 0.34, RESET + 1, "allowed"), ("7d", 1.0, RESET + 1, "rejected")}),
    # Codex prints its plan's limit only when it is used up: "…try again at 10:17 PM."
    ("codex-usage-limit", CodexHarness(),
     {(REFUSED, 1.0, calendar.timegm((2026, 12, 1, 22, 17, 0)), "rejected")}),
    ("codex-subscription", CodexHarness(), set()),
    ("claude-ok", ClaudeHarness(), set()),  # an API key: Claude Code reports no windows
]  # fmt: skip


@pytest.mark.parametrize(("fixture", "harness", "windows"), STREAM_CASES,
                         ids=[c[0] for c in STREAM_CASES])
def test_the_pinned_clis_streams_are_read_per_window(fixture, harness, windows):
    facts = harness.parse((FIXTURES / f"{fixture}.log").read_text(), at=NOW)
    readings = [Reading(**r) for r in facts.rate_limits]
    assert {entry(r) for r in readings} == windows
    assert all(r.at == NOW for r in readings)


def test_headers_and_claudes_stream_of_one_answer_make_the_same_ledger_entry(tmp_path):
    # The gateway reads the answer's headers; the run's end reads the CLI's account of the
    # same answer. Both land on the same windows with the same figures.
    ledger = ModelLedger(tmp_path / "hangar.db")
    _, headers, status, _ = HEADER_CASES[1]
    ledger.record_readings("PLAN", from_headers(headers, status, NOW))
    from_gateway = {entry(r) for r in ledger.readings("PLAN")}
    facts = ClaudeHarness().parse((FIXTURES / "claude-subscription.log").read_text(),
                                  at=NOW + 1)
    ledger.record_readings("PLAN", [Reading(**r) for r in facts.rate_limits])
    assert {entry(r) for r in ledger.readings("PLAN")} == from_gateway
    assert {r.source for r in ledger.readings("PLAN")} == {"claude stream"}


def test_the_ledger_keeps_the_newest_reading_of_each_window(tmp_path):
    ledger = ModelLedger(tmp_path / "hangar.db")
    newer = Reading("7d", 0.93, RESET, None, "anthropic headers", NOW + 10)
    older = Reading("7d", 0.91, RESET, "allowed_warning", "claude stream", NOW)
    ledger.record_readings("PLAN", [newer])
    ledger.record_readings("PLAN", [older])  # a run's stream read after a later answer
    ledger.record_readings("OTHER", [older])
    assert ledger.readings("PLAN") == [newer]
    assert ledger.all_readings() == {"OTHER": [older], "PLAN": [newer]}


def test_claude_events_name_a_single_window_too():
    # An older shape: one window, its utilization beside its type.
    info = {"status": "allowed_warning", "resetsAt": RESET, "rateLimitType": "five_hour",
            "utilization": 0.8}
    assert [entry(r) for r in from_claude_event(info, NOW)] == [
        ("5h", 0.8, RESET, "allowed_warning")]
    rejected = {"status": "rejected", "resetsAt": RESET, "rateLimitType": "seven_day"}
    assert [entry(r) for r in from_claude_event(rejected, NOW)] == [
        ("7d", 1.0, RESET, "rejected")]
    for garbage in (None, [], {"unifiedWindows": {"five_hour": "x"}}, {"rateLimitType": 3}):
        assert from_claude_event(garbage, NOW) == []


@pytest.mark.parametrize(("message", "reset"), [
    ("You’ve hit your usage limit. Upgrade to Pro (https://chatgpt.com/explore/pro), or "
     "try again at 10:17 PM.", calendar.timegm((2026, 12, 1, 22, 17, 0))),
    # Past the day's end: tomorrow's.
    ("You've hit your usage limit. Try again at 9:05 AM.",
     calendar.timegm((2026, 12, 2, 9, 5, 0))),
    ("You've hit your usage limit. Try again at Dec 5th, 2026 3:04 PM.",
     calendar.timegm((2026, 12, 5, 15, 4, 0))),
    ("exceeded retry limit, last status: 429 Too Many Requests", None),
])  # fmt: skip
def test_codex_usage_limit_messages(message, reset):
    readings = from_codex_message(message, NOW)
    if reset is None:
        assert readings == []
    else:
        assert [entry(r) for r in readings] == [(REFUSED, 1.0, reset, "rejected")]
