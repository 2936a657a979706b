"""Intake reads a payload's JSON once, into the parts its handlers read: the whole payload
is parsed only when someone looks past its action."""

from __future__ import annotations

import json

import pytest
from gidgethub import sansio

from app.intake.payloads import (
    HANDLED,
    IssueCommentEvent,
    Payload,
    StatusEvent,
    UnreadablePayload,
    check_delivery,
    parts_as,
    read_delivery,
)
from handlers import router
from tests.app.conftest import webhook_examples


def example(event: str, action: str | None) -> dict:
    return next(p for e, a, p in webhook_examples() if (e, a) == (event, action))


def test_routing_a_delivery_to_handlers_that_read_its_parts_parses_nothing_more():
    raw = json.dumps(example("issue_comment", "created"))
    envelope, parts, payload = read_delivery("issue_comment", raw)
    assert type(parts) is IssueCommentEvent and envelope.action == "created"
    handlers = router.fetch(sansio.Event(payload, event="issue_comment", delivery_id="d-1"))
    assert {h.__name__ for h in handlers} >= {"new_comment"}
    assert parts_as(IssueCommentEvent, payload, parts) is parts
    assert not payload.parsed


def test_every_example_reads_as_the_parsed_payload_does():
    """The one pass over the text files and checks every example as validating the parsed
    payload does, and the payload reads as the parsed one."""
    for event, action, example_payload in webhook_examples():
        raw = json.dumps(example_payload)
        envelope, parts, payload = read_delivery(event, raw)
        parsed_envelope, parsed_parts = check_delivery(event, json.loads(raw))
        assert (envelope.action, envelope.repository and envelope.repository.full_name,
                envelope.installation and envelope.installation.id) == (
            parsed_envelope.action,
            parsed_envelope.repository and parsed_envelope.repository.full_name,
            parsed_envelope.installation and parsed_envelope.installation.id), (event, action)
        assert parts == parsed_parts, (event, action)
        assert ("action" in payload) == ("action" in example_payload)
        assert payload.get("action") == example_payload.get("action")
        assert payload == example_payload and dict(payload) == example_payload


def test_the_action_is_known_unparsed_even_when_absent_or_null():
    status = json.dumps(example("status", "#0"))
    _, parts, payload = read_delivery("status", status)
    assert type(parts) is StatusEvent
    assert "action" not in payload and payload.get("action") is None
    with pytest.raises(KeyError):
        payload["action"]
    assert not payload.parsed
    _, _, payload = read_delivery("star", '{"action": null, "starred_at": null}')
    assert "action" in payload and payload["action"] is None and not payload.parsed
    assert payload["starred_at"] is None and payload.parsed


def test_a_payload_read_back_validates_its_parts_from_the_text():
    raw = json.dumps(example("issue_comment", "created"))
    payload = Payload(raw)
    assert parts_as(IssueCommentEvent, payload, None) == IssueCommentEvent.model_validate_json(
        raw)
    assert not payload.parsed


def test_an_action_no_handler_reads_needs_only_its_envelope():
    deleted = example("issue_comment", "deleted")
    deleted["comment"]["user"] = ["not", "an", "account"]
    assert ("issue_comment", "deleted") not in HANDLED
    envelope, parts, _ = read_delivery("issue_comment", json.dumps(deleted))
    assert (envelope.action, parts) == ("deleted", None)
    created = {**deleted, "action": "created"}
    with pytest.raises(ValueError, match=r"comment\.user"):
        read_delivery("issue_comment", json.dumps(created))


@pytest.mark.parametrize(("text", "accepted"), [
    ('{"a": ' * 300 + "1" + "}" * 300, True),  # deeper than pydantic's parser goes
    ('{"n": "\\ud800"}', True),  # a lone surrogate escape
    ('{"n": NaN, "m": 1e400}', True),
    ('{"n": 1' + "0" * 5000 + "}", False),
    ("[1]", False),
    ('{"n": 1,}', False),
])
def test_what_json_reads_as_an_object_is_a_payload(text, accepted):
    if accepted:
        _, _, payload = read_delivery("star", text)
        assert dict(payload) == json.loads(text)
    else:
        with pytest.raises(UnreadablePayload):
            read_delivery("star", text)
