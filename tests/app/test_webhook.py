"""POST /webhook over real HTTP: signatures, bad bodies, duplicates, restarts, and every
example payload GitHub publishes."""

from __future__ import annotations

import asyncio
import json
from urllib.parse import urlencode

import pytest

from app import commands
from app.intake.deliveries import DeliveryWriter
from app.intake.payloads import HANDLED, IssueCommentEvent, parts_as, read_delivery
from app.store import Delivery, Store
from app.web.keys import DISPATCHER, STORE
from app.wiring import create_app
from tests.app.conftest import sign, webhook_examples, webhook_headers


async def wait_for(predicate, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


def test_signature_matches_githubs_test_vector():
    expected = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    assert sign(b"Hello, World!", "It's a Secret to Everybody") == expected


@pytest.fixture
async def client(aiohttp_client, settings):
    return await aiohttp_client(create_app(settings))


PING = json.dumps({"zen": "Design for failure.", "hook_id": 1}).encode()


async def test_signed_ping_is_answered_and_stored(client):
    headers = webhook_headers("ping", PING, delivery="d-ping")
    response = await client.post("/webhook", data=PING, headers=headers)
    assert response.status == 200
    assert (await response.json())["pong"] is True
    assert client.app[STORE].delivery("d-ping").event == "ping"


@pytest.mark.parametrize(
    ("change", "status", "reason"),
    [
        ({"X-Hub-Signature-256": None}, 401, "X-Hub-Signature-256 is missing"),
        ({"X-Hub-Signature-256": "sha256=" + "0" * 64}, 401, "does not match"),
        ({"X-Hub-Signature-256": sign(PING, "another secret")}, 401, "does not match"),
        ({"X-Hub-Signature-256": "sha1=abc"}, 401, "does not match"),
        ({"X-GitHub-Event": None}, 400, "X-GitHub-Event and X-GitHub-Delivery"),
        ({"X-GitHub-Delivery": None}, 400, "X-GitHub-Event and X-GitHub-Delivery"),
        ({"Content-Type": "text/plain"}, 400, "Content-Type must be"),
    ],
)
async def test_bad_deliveries_get_a_reason_and_are_not_stored(client, change, status, reason):
    headers = webhook_headers("ping", PING, delivery="d-bad")
    for key, value in change.items():
        if value is None:
            headers.pop(key)
        else:
            headers[key] = value
    response = await client.post("/webhook", data=PING, headers=headers)
    assert response.status == status
    assert reason in (await response.json())["message"]
    assert client.app[STORE].delivery("d-bad") is None


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", "not a webhook payload"),
        (b"[1, 2]", "must be a JSON object"),
        (b"\xff\xfe", "not UTF-8"),
        (b'{"n": 1' + b"0" * 5000 + b"}", "not a webhook payload"),
        (b'{"a": ' * 100_000 + b"1" + b"}" * 100_000, "nested too deeply"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ],
)
async def test_malformed_signed_body_is_400_and_stored_as_failed(client, body, reason):
    headers = webhook_headers("push", body, delivery="d-malformed")
    response = await client.post("/webhook", data=body, headers=headers)
    assert response.status == 400
    assert reason in (await response.json())["message"]
    stored = client.app[STORE].delivery("d-malformed")
    assert (stored.state, stored.error) == ("failed", (await response.json())["message"])


@pytest.mark.parametrize("value", [b"NaN", b'"\\ud800"', b"1e400"])
async def test_json_the_fast_parser_refuses_but_json_reads_is_accepted_as_before(client, value):
    body = json.dumps(comment_example()).encode()[:-1] + b', "unread": ' + value + b"}"
    headers = webhook_headers("issue_comment", body, delivery="d-lenient")
    response = await client.post("/webhook", data=body, headers=headers)
    assert response.status == 202
    stored = client.app[STORE].delivery("d-lenient")
    assert stored.event == "issue_comment"
    assert kept_parts(stored) == IssueCommentEvent.model_validate(comment_example())


def kept_parts(stored: Delivery) -> IssueCommentEvent:
    """A comment delivery as its handler reads it back from the store."""
    return parts_as(IssueCommentEvent, stored.payload, None)


def comment_example() -> dict:
    """GitHub's example of a new issue comment: a copy, the examples are read once."""
    return json.loads(json.dumps(next(
        p for e, a, p in webhook_examples() if (e, a) == ("issue_comment", "created"))))


def with_part(payload: dict, path: str, value) -> dict:
    """A deep copy of the payload with the part at `a.b.c` replaced."""
    payload = json.loads(json.dumps(payload))
    *parents, last = path.split(".")
    node = payload
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return payload


WRONG_SHAPES = [
    ("issue_comment", "issue", "a string where an object belongs", "issue"),
    ("issue_comment", "comment.user", ["a", "list"], "comment.user"),
    ("issue_comment", "issue.number", 2**64, "issue.number"),
    ("issue_comment", "installation.id", 2**63, "installation.id"),
    ("issue_comment", "installation.id", "12", None),  # GitHub never sends this, but it fits
    ("star", "action", {"an": "object"}, "action"),
    ("star", "repository", "octo/widgets", "repository"),
    ("star", "repository.full_name", 42, "repository.full_name"),
    ("star", "installation", {"id": -(2**63) - 1}, "installation.id"),
]


@pytest.mark.parametrize(("event", "path", "value", "where"), WRONG_SHAPES)
async def test_a_payload_of_the_wrong_shape_is_400_with_the_reason_and_stored_as_failed(
    client, event, path, value, where
):
    payload = with_part(comment_example(), path, value)
    body = json.dumps(payload).encode()
    response = await client.post(
        "/webhook", data=body, headers=webhook_headers(event, body, delivery="d-shape"))
    stored = client.app[STORE].delivery("d-shape")
    if where is None:
        assert response.status == 202 and stored.installation_id == 12
        return
    assert response.status == 400
    message = (await response.json())["message"]
    assert f"this {event} payload does not have the shape GitHub sends" in message
    assert where in message
    assert (stored.state, stored.error) == ("failed", message)


async def test_a_wrong_shaped_delivery_among_good_ones_fails_alone(client):
    good = json.dumps(comment_example()).encode()
    bad_payloads = [with_part(comment_example(), "installation.id", 2**64),
                    with_part(comment_example(), "action", ["created"]),
                    with_part(comment_example(), "issue", "#1")]

    async def post(n: int) -> int:
        body = good if n % 7 else json.dumps(bad_payloads[n // 7 % 3]).encode()
        response = await client.post(
            "/webhook", data=body, headers=webhook_headers("issue_comment", body,
                                                           delivery=f"d-{n}"))
        return response.status

    statuses = await asyncio.gather(*(post(n) for n in range(60)))
    assert statuses == [202 if n % 7 else 400 for n in range(60)]
    store = client.app[STORE]
    assert [store.delivery(f"d-{n}").state == "failed" for n in range(0, 60, 7)] == [True] * 9
    await wait_for(lambda: store.count_deliveries("stored") == 0)


async def test_a_row_the_database_refuses_fails_only_its_own_request(settings):
    # Behind check_delivery, the group commit still keeps one bad row from the others.
    settings.data_dir.mkdir(parents=True)
    store = Store(settings.db_path)
    writer = DeliveryWriter(store)

    def delivery(n: int, installation_id: int) -> Delivery:
        return Delivery(id=f"w-{n}", event="star", action="created", repo="octo/widgets",
                        installation_id=installation_id, received_at=1.0, payload={},
                        state="stored", error=None)

    results = await asyncio.gather(
        *(writer.add(delivery(n, 2**64 if n == 3 else n), None) for n in range(8)),
        return_exceptions=True)
    assert isinstance(results[3], OverflowError)
    assert results[:3] + results[4:] == [True] * 7
    assert store.count_deliveries("stored") == 7
    writer.close()
    store.close()


async def test_dispatch_outcomes_ride_with_the_next_delivery_or_are_written_alone_soon(
    settings, monkeypatch
):
    from app.intake import deliveries

    settings.data_dir.mkdir(parents=True)
    store = Store(settings.db_path)
    writer = DeliveryWriter(store)
    transactions = []
    write_deliveries = store.write_deliveries

    def counting(items, outcomes):
        transactions.append(([d.id for d, _ in items], [o[0] for o in outcomes]))
        return write_deliveries(items, outcomes)

    store.write_deliveries = counting

    def delivery(delivery_id: str) -> Delivery:
        return Delivery(id=delivery_id, event="star", action="created", repo="octo/widgets",
                        installation_id=1, received_at=1.0, payload={}, state="stored",
                        error=None)

    linger = deliveries.OUTCOME_LINGER_S
    monkeypatch.setattr(deliveries, "OUTCOME_LINGER_S", 3600)  # no linger ends in this part
    assert await writer.add(delivery("o-1"), None)
    writer.record([("o-1", "dispatched", None)])
    for _ in range(10):  # the loop turns: nothing is written for the outcome alone
        await asyncio.sleep(0)
    assert await writer.add(delivery("o-2"), None)
    # One transaction stored o-2 and o-1's outcome: a busy service writes each delivery once.
    assert transactions == [(["o-1"], []), (["o-2"], ["o-1"])]
    assert store.delivery("o-1").state == "dispatched"

    # With no delivery after it, an outcome is still written, on its own, soon.
    monkeypatch.setattr(deliveries, "OUTCOME_LINGER_S", linger)
    writer.record([("o-2", "dispatched", None)])
    await wait_for(lambda: store.delivery("o-2").state == "dispatched", timeout=30)
    assert transactions[2:] == [([], ["o-2"])]
    writer.close()
    store.close()


def test_every_handled_event_has_a_payload_shape_checked_at_intake():
    from handlers import router

    routed = {(event, action) for event, by_key in router._deep_routes.items()
              for key, by_value in by_key.items() if key == "action" for action in by_value}
    routed |= {(event, None) for event in router._shallow_routes}
    routed -= {("installation", None), ("installation_repositories", None)}  # reads nothing
    assert routed == set(HANDLED)


async def test_form_encoded_delivery_is_accepted(client):
    payload = comment_example()
    body = urlencode({"payload": json.dumps(payload)}).encode()
    headers = webhook_headers("issue_comment", body, delivery="d-form")
    headers["Content-Type"] = "application/x-www-form-urlencoded"
    response = await client.post("/webhook", data=body, headers=headers)
    assert response.status == 202
    assert kept_parts(client.app[STORE].delivery("d-form")) == IssueCommentEvent.model_validate(
        payload)


def dispatches(client) -> list[Delivery]:
    """Each delivery the client's dispatcher dispatches from now on, in order."""
    dispatcher = client.app[DISPATCHER]
    original, seen = dispatcher.dispatch, []

    async def keeping(delivery):
        seen.append(delivery)
        return await original(delivery)

    dispatcher.dispatch = keeping
    return seen


async def test_duplicate_delivery_is_acknowledged_and_dispatched_once(client):
    calls = dispatches(client)
    body = json.dumps(comment_example()).encode()
    for _ in range(3):
        response = await client.post(
            "/webhook", data=body,
            headers=webhook_headers("issue_comment", body, delivery="d-dup"))
        assert response.status in (200, 202)
    await wait_for(lambda: client.app[STORE].delivery("d-dup").state == "dispatched")
    await asyncio.sleep(0.1)
    assert [d.id for d in calls] == ["d-dup"]
    metrics = await (await client.get("/metrics")).text()
    assert 'hangar_webhook_deliveries_total{result="duplicate"} 2' in metrics
    assert 'hangar_webhook_deliveries_total{result="accepted"} 1' in metrics


async def test_a_handler_gets_the_parts_intake_checked_instead_of_validating_again(
    client, monkeypatch
):
    dispatched, recorded = dispatches(client), []

    def record_comment(engine, event):
        recorded.append(event)

    monkeypatch.setattr(commands, "record_comment", record_comment)
    body = json.dumps(comment_example()).encode()
    response = await client.post(
        "/webhook", data=body, headers=webhook_headers("issue_comment", body, delivery="d-parts"))
    assert response.status == 202
    await wait_for(lambda: recorded)
    assert isinstance(dispatched[0].parts, IssueCommentEvent)
    assert recorded == [dispatched[0].parts] and recorded[0] is dispatched[0].parts
    # Read back from the store (a restart), a delivery has no parts: the handler checks it.
    assert client.app[STORE].delivery("d-parts").parts is None


async def test_a_command_cut_before_dispatch_reaches_its_handler_after_a_restart_as_sent(
    aiohttp_client, settings, monkeypatch
):
    payload = comment_example()
    payload["comment"]["body"] = "/hangar fix the flaky login test"
    payload["installation"] = {"id": 7}
    body = json.dumps(payload).encode()
    first = await aiohttp_client(create_app(settings))
    monkeypatch.setattr(first.app[DISPATCHER], "submit", lambda delivery: None)  # cut here
    response = await first.post(
        "/webhook", data=body, headers=webhook_headers("issue_comment", body, delivery="d-cut"))
    assert response.status == 202
    await first.close()

    recorded = []
    monkeypatch.setattr(commands, "record_comment", lambda engine, event: recorded.append(event))
    second = await aiohttp_client(create_app(settings))
    await wait_for(lambda: second.app[STORE].delivery("d-cut").state == "dispatched")
    assert recorded == [IssueCommentEvent.model_validate(payload)]
    # What was kept is what the handler reads, not GitHub's whole body.
    assert len(json.dumps(second.app[STORE].delivery("d-cut").payload)) < len(body) / 5


async def test_a_delivery_no_handler_hears_is_stored_done_and_never_dispatched(client):
    dispatched = dispatches(client)
    edited = {**comment_example(), "action": "edited"}  # GitHub sends it; no handler hears it
    for delivery_id, event, payload in (("d-star", "star", {"action": "created"}),
                                        ("d-edited", "issue_comment", edited),
                                        ("d-heard", "issue_comment", comment_example())):
        body = json.dumps(payload).encode()
        response = await client.post(
            "/webhook", data=body, headers=webhook_headers(event, body, delivery=delivery_id))
        assert response.status == 202
    store = client.app[STORE]
    await wait_for(lambda: store.delivery("d-heard").state == "dispatched")
    assert [store.delivery(d).state for d in ("d-star", "d-edited")] == ["ignored"] * 2
    assert [d.id for d in dispatched] == ["d-heard"]
    assert store.count_deliveries("stored") == 0  # nothing left for a rescan either


async def test_restart_dispatches_what_was_stored_but_not_dispatched(aiohttp_client, settings):
    settings.data_dir.mkdir(parents=True)
    store = Store(settings.db_path)
    body = {"action": "created", "starred_at": None}
    store.add_delivery("d-left", "star", body)
    store.close()
    client = await aiohttp_client(create_app(settings))
    await wait_for(lambda: client.app[STORE].delivery("d-left").state == "dispatched")


async def test_a_failing_handler_marks_the_delivery_failed_and_others_still_run(client):
    from gidgethub.routing import Router

    from handlers import Handlers

    ran = []
    router = Router()

    @router.register("star")
    async def broken(event, **_):
        raise RuntimeError("boom")

    @router.register("star")
    async def healthy(event, **_):
        ran.append(event.delivery_id)

    client.app[DISPATCHER].router = Handlers(router)
    body = json.dumps({"action": "created"}).encode()
    await client.post("/webhook", data=body, headers=webhook_headers("star", body,
                                                                       delivery="d-fail"))
    store = client.app[STORE]
    await wait_for(lambda: store.delivery("d-fail").state == "failed")
    assert "boom" in store.delivery("d-fail").error
    assert ran == ["d-fail"]
    metrics = await (await client.get("/metrics")).text()
    assert 'hangar_handler_errors_total{handler="test_webhook.broken"} 1' in metrics


async def test_every_github_example_payload_is_accepted_stored_and_dispatched(client):
    examples = webhook_examples()
    assert len(examples) > 200  # the package really was installed and read
    store = client.app[STORE]
    for n, (event, _action, payload) in enumerate(examples):
        body = json.dumps(payload).encode()
        response = await client.post(
            "/webhook", data=body, headers=webhook_headers(event, body, delivery=f"ex-{n}"))
        assert response.status in (200, 202), (event, await response.text())
    await wait_for(lambda: store.count_deliveries("stored") == 0, timeout=30)
    failed = [
        (store.delivery(f"ex-{n}").event, store.delivery(f"ex-{n}").error)
        for n in range(len(examples)) if store.delivery(f"ex-{n}").state == "failed"
    ]
    assert failed == []
    # Each reads back from the store (as after a restart) as its handlers read it when sent.
    for n, (event, _action, payload) in enumerate(examples):
        envelope, parts, _ = read_delivery(event, json.dumps(payload))
        stored = store.delivery(f"ex-{n}")
        assert (stored.action, stored.repo) == (
            envelope.action, envelope.repository and envelope.repository.full_name)
        if parts is not None:
            assert parts_as(type(parts), stored.payload, None) == parts, (event, _action)
        if event == "installation":  # what its handler logs, read past the parts
            assert stored.payload["installation"]["account"]["login"] \
                == payload["installation"]["account"]["login"]


async def test_healthz_and_metrics(client):
    health = await client.get("/healthz")
    assert health.status == 200 and (await health.json())["ok"] is True
    text = await (await client.get("/metrics")).text()
    assert "# TYPE hangar_webhook_ack_seconds histogram" in text
    assert "hangar_handler_errors_total" in text
