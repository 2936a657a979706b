"""The model gateway's routes, the pure part: what is relayed with hangar's key, by tables
and by hypothesis (whatever a sandbox writes, only the CLIs' own paths come out)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.model_routes import ALLOWED, Refuse, Relay, decide


@pytest.mark.parametrize(("kind", "method", "raw", "relayed"), [
    ("anthropic", "POST", "v1/messages", "v1/messages"),
    ("anthropic", "POST", "v1/messages/count_tokens", "v1/messages/count_tokens"),
    ("anthropic", "GET", "v1/models", "v1/models"),
    ("anthropic", "GET", "v1/models/claude-sonnet-4-5", "v1/models/claude-sonnet-4-5"),
    ("openai", "POST", "v1/responses", "v1/responses"),
    ("openai", "GET", "v1/models/gpt-5-codex", "v1/models/gpt-5-codex"),
    ("anthropic", "post", "v1/%6Dessages", "v1/messages"),  # an encoded letter is a letter
    ("anthropic", "POST", "v1/messages/batches", None),
    ("anthropic", "POST", "v1/files", None),
    ("anthropic", "GET", "v1/organizations/users", None),
    ("anthropic", "POST", "v1/responses", None),
    ("openai", "POST", "v1/messages", None),
    ("openai", "POST", "v1/batches", None),
    ("openai", "POST", "v1/chat/completions", None),
    ("openai", "GET", "v1/responses", None),
    ("anthropic", "POST", "v1/messages/../../admin", None),
    ("anthropic", "POST", "%2e%2e/v1/messages", None),
    ("anthropic", "POST", "v1/messages%2f..%2fbatches", None),
    ("anthropic", "POST", "v1/messages%252f..%252fbatches", None),
    ("anthropic", "POST", "v1\\messages", None),
    ("anthropic", "GET", "v1/models/..", None),
    ("anthropic", "GET", "v1/models/a/b", None),
    ("unknown", "POST", "v1/messages", None),
])
def test_what_is_relayed(kind, method, raw, relayed):
    decision = decide(kind, method, raw)
    if relayed is None:
        assert isinstance(decision, Refuse) and decision.reason
    else:
        assert decision == Relay(relayed)


ALLOWED_PATHS = {kind: [re.compile(re.escape(p).replace(r"\{id\}", "[^/]+"))
                        for _, p in routes] for kind, routes in ALLOWED.items()}
PIECES = ["v1", "messages", "models", "responses", "batches", "count_tokens", "..", ".",
          "%2e", "%2E", "%2f", "%2F", "%25", "%5c", "\\", "/", "//", "x", "claude-3", "?",
          "%00", "%252e", "%c0%ae"]


@settings(max_examples=400, deadline=None)
@given(kind=st.sampled_from(["anthropic", "openai"]),
       method=st.sampled_from(["GET", "POST", "PUT", "DELETE"]),
       raw=st.lists(st.sampled_from(PIECES) | st.text(max_size=3), max_size=10).map("".join))
def test_whatever_the_sandbox_writes_only_an_allowed_path_is_relayed(kind, method, raw):
    decision = decide(kind, method, raw)
    if isinstance(decision, Relay):
        path = decision.path
        assert any(p.fullmatch(path) for p in ALLOWED_PATHS[kind]), path
        assert ".." not in path.split("/") and "%" not in path and "\\" not in path


@pytest.mark.parametrize("raw", ["v1/messages/../../admin", "v1/models/%2e%2e",
                                 "v1%2f..%2fmessages", "v1/%252e%252e/messages", "./v1/models",
                                 "v1//messages"])
def test_a_path_that_would_leave_the_base_is_refused_for_that(raw):
    """Refused as leaving the base, before the allowlist is looked at: the reason says so,
    whatever the allowlist would have made of it."""
    decision = decide("anthropic", "POST", raw)
    assert isinstance(decision, Refuse) and "`..` segment" in decision.reason, decision
