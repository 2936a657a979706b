"""The model gateway: a sandbox's token in, the real credential out, streams unbuffered,
usage and rate limits kept, and every way of being refused said plainly."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import aiohttp
import pytest
from aiohttp import web

from fakehub.model import Fault, ModelServer, StreamFault, fix_calc_script
from proxy import TokenRegistry, gateway
from proxy.gateway import Endpoint, ModelLedger, UsageMeter, price, setup_gateway
from tests.test_render_secrets import leaked

REAL_KEY = "sk-real-credential-1234"
ANTHROPIC_BODY = {
    "model": "claude-sonnet-4-5", "stream": True, "max_tokens": 100,
    "tools": [{"name": "Bash", "input_schema": {"type": "object"}}],
    "messages": [{"role": "user", "content": "hangar Request: fix the failing test"}],
}  # fmt: skip


class Endpoints:
    def __init__(self, base_url: str | None):
        self.base_url = base_url

    def endpoint(self, credential: str) -> Endpoint | None:
        if self.base_url is None or credential == "MISSING_KEY":
            return None
        openai = credential.startswith("OPENAI")
        return Endpoint(self.base_url, REAL_KEY, "bearer" if openai else "x-api-key",
                        "openai" if openai else "anthropic")


@pytest.fixture
async def world(aiohttp_server, aiohttp_client, tmp_path):
    model = ModelServer(fix_calc_script(api_key=REAL_KEY))
    upstream = await aiohttp_server(model.app())
    ledger = ModelLedger(tmp_path / "hangar.db")
    grants = TokenRegistry(tmp_path / "hangar.db")
    endpoints = Endpoints(str(upstream.make_url("")).rstrip("/"))
    app = web.Application()
    setup_gateway(app, ledger=ledger, endpoints=endpoints)
    client = await aiohttp_client(app)

    class World:
        pass

    w = World()
    w.model, w.ledger, w.grants, w.client, w.endpoints = model, ledger, grants, client, endpoints
    grants.issue("sb-1", repo="octo/widgets", branch="hangar/1-ab", installation_id=1)
    w.token = ledger.issue("sb-1", credential="ANTHROPIC_API_KEY", run_id="run-1")
    return w


async def test_relays_with_the_real_key_and_meters_the_stream(world):
    response = await world.client.post("/model/sb-1/v1/messages?beta=true",
                                       json=ANTHROPIC_BODY, headers={"x-api-key": world.token})
    text = await response.text()
    assert response.status == 200
    assert "event: message_start" in text and "tool_use" in text
    sent = world.model.requests[-1]
    assert sent["path"] == "/v1/messages?beta=true"
    assert sent["headers"]["x-api-key"] == REAL_KEY
    assert world.token not in json.dumps(sent)
    usage = world.ledger.usage("run-1")
    assert usage.requests == 1 and usage.input_tokens > 0 and usage.output_tokens > 0
    assert usage.cost_usd == pytest.approx(price("claude-sonnet-4-5", usage.input_tokens,
                                                 usage.output_tokens))
    (tokens,) = world.ledger.readings("ANTHROPIC_API_KEY")
    assert (tokens.window, tokens.source) == ("tokens", "anthropic headers")
    assert tokens.utilization == pytest.approx(0.1)
    assert tokens.reset_at > time.time() + 3000


async def test_openai_responses_use_a_bearer_credential(world):
    world.ledger.issue("sb-2", credential="OPENAI_API_KEY", run_id="run-2")
    token = world.ledger.issue("sb-2", credential="OPENAI_API_KEY", run_id="run-2")
    body = {"model": "gpt-5-codex", "stream": True, "tools": [{"type": "function",
            "name": "exec_command"}], "input": [{"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "hangar Request: fix it"}]}]}
    response = await world.client.post("/model/sb-2/v1/responses", json=body,
                                       headers={"Authorization": f"Bearer {token}"})
    text = await response.text()
    assert response.status == 200 and "response.completed" in text
    assert world.model.requests[-1]["headers"]["Authorization"] == f"Bearer {REAL_KEY}"
    usage = world.ledger.usage("run-2")
    assert usage.input_tokens > 0 and usage.output_tokens > 0
    (tokens,) = world.ledger.readings("OPENAI_API_KEY")
    assert (tokens.window, tokens.source) == ("tokens", "openai headers")
    assert tokens.utilization == pytest.approx(0.1)


@pytest.mark.parametrize("case", ["no token", "wrong token", "other sandbox", "run ended",
                                  "model token revoked"])
async def test_refuses_a_token_that_is_not_this_live_sandboxes(world, case):
    headers = {"x-api-key": world.token}
    path = "/model/sb-1/v1/messages"
    if case == "no token":
        headers = {}
    elif case == "wrong token":
        headers = {"x-api-key": "hgm_guess"}
    elif case == "other sandbox":
        path = "/model/sb-9/v1/messages"
    elif case == "run ended":
        world.grants.revoke("sb-1")
    else:
        world.ledger.revoke("sb-1")
    response = await world.client.post(path, json=ANTHROPIC_BODY, headers=headers)
    assert response.status == 401
    assert "model token" in (await response.json())["error"]["message"]
    assert world.model.requests == []


@pytest.mark.parametrize("end", ["run ended", "model token revoked", "token replaced"])
async def test_a_token_that_worked_is_refused_once_it_ends(world, end):
    # The gateway remembers a checked token; an end written anywhere in hangar counts
    # from the next request, through any registry of the same file.
    async def status() -> int:
        response = await world.client.post("/model/sb-1/v1/messages", json=ANTHROPIC_BODY,
                                           headers={"x-api-key": world.token})
        await response.read()
        return response.status

    assert [await status(), await status()] == [200, 200]
    if end == "run ended":
        TokenRegistry(world.ledger.db_path).revoke("sb-1")
    elif end == "model token revoked":
        ModelLedger(world.ledger.db_path).revoke("sb-1")
    else:
        ModelLedger(world.ledger.db_path).issue("sb-1", credential="ANTHROPIC_API_KEY",
                                                run_id="run-1")
    assert await status() == 401
    assert world.ledger.usage("run-1").requests == 2


async def test_a_credential_without_a_secret_is_a_plain_refusal(world):
    token = world.ledger.issue("sb-3", credential="MISSING_KEY", run_id="run-3")
    response = await world.client.post("/model/sb-3/v1/messages", json=ANTHROPIC_BODY,
                                       headers={"x-api-key": token})
    assert response.status == 401
    assert "sets MISSING_KEY in hangar's environment" in (await response.json())["error"][
        "message"]
    assert world.model.requests == []


async def test_a_429_passes_through_and_marks_the_credential_full_until_retry_after(world):
    world.model.script.fault = Fault(429, "This request would exceed your rate limit.",
                                     retry_after_s=120, times=1)
    world.model.script.reset_in_s = 60  # the tokens window resets before retry-after
    response = await world.client.post("/model/sb-1/v1/messages", json=ANTHROPIC_BODY,
                                       headers={"x-api-key": world.token})
    assert response.status == 429
    assert response.headers["retry-after"] == "120"
    await response.read()  # the limit is written while the answer passes, before its end
    windows = {r.window: r for r in world.ledger.readings("ANTHROPIC_API_KEY")}
    assert windows["429"].utilization == 1.0 and windows["429"].status == "rejected"
    assert windows["429"].reset_at == pytest.approx(time.time() + 120, abs=5)
    assert windows["tokens"].utilization == 1.0
    usage = world.ledger.usage("run-1")
    assert usage.last_status == 429 and "rate limit" in usage.last_error
    # The run waits for the later of retry-after and the full window's reset.
    assert usage.reset_at == pytest.approx(time.time() + 120, abs=5)


async def test_a_429_holds_until_a_full_windows_later_reset(world):
    world.model.script.fault = Fault(429, "This request would exceed your rate limit.",
                                     retry_after_s=1, times=1)
    world.model.script.reset_in_s = 3600
    response = await world.client.post("/model/sb-1/v1/messages", json=ANTHROPIC_BODY,
                                       headers={"x-api-key": world.token})
    await response.read()
    assert world.ledger.usage("run-1").reset_at == pytest.approx(time.time() + 3600, abs=5)


async def test_an_unreachable_endpoint_never_tells_its_credentials(world, unused_tcp_port):
    """A company proxy's URL with userinfo and a query token, down: the 502 the agent
    reads and the error the run keeps name the endpoint without its credentials."""
    password, token = "pr0xy-Passw0rd-x1", "q-tok-9876543210"
    world.endpoints.base_url = (f"http://llmuser:{password}@127.0.0.1:{unused_tcp_port}"
                                f"/llm?key={token}")
    response = await world.client.post("/model/sb-1/v1/messages", json=ANTHROPIC_BODY,
                                       headers={"x-api-key": world.token})
    assert response.status == 502
    said = await response.text()
    assert f"the model endpoint http://127.0.0.1:{unused_tcp_port}/llm:" in said
    stored = world.ledger.usage("run-1").last_error
    for shown in (said, stored):
        for secret in (password, token, REAL_KEY, "llmuser"):
            assert leaked(shown, secret) is None, (secret, shown)


async def test_a_chunked_error_answer_is_masked_whole(aiohttp_server, aiohttp_client,
                                                     tmp_path):
    """The credential echoed in a later chunk of the error answer is masked too."""
    async def echo(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=400, headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(b'{"type": "error", "error": {"type": "invalid_request_error", ')
        await asyncio.sleep(0.05)
        await response.write(f'"message": "bad key {request.headers["x-api-key"]}"}}}}'.encode())
        await response.write_eof()
        return response

    upstream = web.Application()
    upstream.router.add_post("/v1/messages", echo)
    client, ledger, token = await _gateway_to(aiohttp_server, aiohttp_client, tmp_path, upstream)
    response = await client.post("/model/sb-1/v1/messages", json=ANTHROPIC_BODY,
                                 headers={"x-api-key": token})
    said = await response.text()
    assert response.status == 400 and "bad key [redacted]" in said, said
    assert REAL_KEY not in said and REAL_KEY not in ledger.usage("run-1").last_error


async def test_a_misconfigured_endpoint_never_tells_its_credentials(world):
    """The client library's own error spells the whole URL (a port out of range here)."""
    password = "pr0xy-Passw0rd-x2"
    world.endpoints.base_url = f"http://llmuser:{password}@127.0.0.1:99999/llm"
    response = await world.client.post("/model/sb-1/v1/messages", json=ANTHROPIC_BODY,
                                       headers={"x-api-key": world.token})
    said = await response.text()
    assert response.status == 502 and "the model endpoint http://127.0.0.1:99999/llm:" in said
    for shown in (said, world.ledger.usage("run-1").last_error):
        for secret in (password, "llmuser"):
            assert leaked(shown, secret) is None, (secret, shown)


async def test_an_error_answer_is_masked_of_the_credential_it_echoes(
        aiohttp_server, aiohttp_client, tmp_path):
    async def echo(request: web.Request) -> web.Response:
        key = request.headers["x-api-key"]
        return web.json_response({"type": "error", "error": {
            "type": "authentication_error", "message": f"invalid x-api-key {key}"}},
            status=401)

    upstream = web.Application()
    upstream.router.add_post("/v1/messages", echo)
    client, ledger, token = await _gateway_to(aiohttp_server, aiohttp_client, tmp_path, upstream)
    response = await client.post("/model/sb-1/v1/messages", json=ANTHROPIC_BODY,
                                 headers={"x-api-key": token})
    said = await response.text()
    assert response.status == 401 and "invalid x-api-key [redacted]" in said
    assert REAL_KEY not in said and REAL_KEY not in ledger.usage("run-1").last_error


@pytest.mark.parametrize("path", [
    "v1/messages/../../admin", "v1/../../etc", "..", "%2e%2e/admin", "v1/%2e%2e/%2e%2e/x",
    "..%2fadmin", "v1%2f..%2f..%2fadmin", "%252e%252e/admin", "%25252e%25252e%25252fadmin",
    "v1\\..\\admin", "v1/messages%5c..%5cx", "./v1/messages", "v1//messages",
    "v1/messages/", "v1/messages%00", "v1/models/..", "v1/models/%2e%2e",
])
async def test_no_path_leaves_the_configured_base(world, path):
    world.endpoints.base_url += "/llm"
    # Sent as written: a client library would tidy the dots away before hangar saw them.
    status, said = await raw_post(world, f"/model/sb-1/{path}", world.token)
    assert status == 403, (path, status)
    if status == 403:
        assert b"hangar" in said
    assert world.model.requests == []


async def raw_post(world, target: str, token: str) -> tuple[int, bytes]:
    body = json.dumps(ANTHROPIC_BODY).encode()
    reader, writer = await asyncio.open_connection(world.client.host, world.client.port)
    writer.write(f"POST {target} HTTP/1.1\r\nHost: x\r\nx-api-key: {token}\r\n"
                 f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                 "Connection: close\r\n\r\n".encode() + body)
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return int(answer.split(b" ", 2)[1]), answer


@pytest.mark.parametrize(("method", "path"), [
    ("POST", "v1/messages/batches"), ("GET", "v1/messages/batches/msgbatch_1/results"),
    ("POST", "v1/files"), ("GET", "v1/files"), ("GET", "v1/organizations/api_keys"),
    ("POST", "v1/complete"), ("GET", "v1/messages"), ("DELETE", "v1/models/claude-x"),
    ("POST", "v1/responses"),  # an OpenAI path, for an Anthropic credential
])
async def test_only_what_the_cli_uses_is_relayed_with_the_key(world, method, path):
    response = await world.client.request(method, f"/model/sb-1/{path}", json=ANTHROPIC_BODY,
                                          headers={"x-api-key": world.token})
    assert response.status == 403
    assert "hangar relays" in (await response.json())["error"]["message"]
    assert world.model.requests == []


async def test_model_listing_is_relayed_and_metered(world):
    response = await world.client.get("/model/sb-1/v1/models",
                                      headers={"x-api-key": world.token})
    assert response.status == 200 and "data" in await response.json()
    assert world.model.requests[-1]["path"] == "/v1/models"
    assert world.ledger.usage("run-1").requests == 1


async def test_an_unreachable_endpoint_is_a_502_that_names_it(world, unused_tcp_port):
    world.endpoints.base_url = f"http://127.0.0.1:{unused_tcp_port}"
    response = await world.client.post("/model/sb-1/v1/messages", json=ANTHROPIC_BODY,
                                       headers={"x-api-key": world.token})
    assert response.status == 502
    message = (await response.json())["error"]["message"]
    assert f"could not reach the model endpoint http://127.0.0.1:{unused_tcp_port}" in message
    usage = world.ledger.usage("run-1")
    assert usage.last_status is None and "could not reach" in usage.last_error


async def _gateway_to(aiohttp_server, aiohttp_client, tmp_path, upstream_app):
    """A gateway in front of `upstream_app`, and a live token for sandbox sb-1."""
    upstream = await aiohttp_server(upstream_app)
    ledger = ModelLedger(tmp_path / "hangar.db")
    app = web.Application()
    setup_gateway(app, ledger=ledger, endpoints=Endpoints(str(upstream.make_url("")).rstrip("/")))
    client = await aiohttp_client(app)
    return client, ledger, ledger.issue("sb-1", credential="ANTHROPIC_API_KEY", run_id="run-1")


async def test_the_stream_is_not_buffered(aiohttp_server, aiohttp_client, tmp_path,
                                          monkeypatch):
    # The model holds the rest of its answer until the agent has the first event: a
    # gateway that waited for more than the bytes at hand would wait for ever.
    agent_has_it = asyncio.Event()
    monkeypatch.setattr(gateway, "LIMITS_AFTER_S", 0.0)

    async def answer(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={
            "Content-Type": "text/event-stream", "anthropic-ratelimit-tokens-limit": "100",
            "anthropic-ratelimit-tokens-remaining": "25"})
        await response.prepare(request)
        await response.write(b'event: message_start\ndata: {"type":"message_start","message":'
                             b'{"model":"claude-haiku-4-5","usage":{"input_tokens":9}}}\n\n')
        await agent_has_it.wait()
        await response.write(b'event: message_delta\ndata: {"type":"message_delta",'
                             b'"usage":{"output_tokens":4}}\n\n')
        await response.write_eof()
        return response

    upstream = web.Application()
    upstream.router.add_post("/v1/messages", answer)
    client, ledger, token = await _gateway_to(aiohttp_server, aiohttp_client, tmp_path, upstream)
    response = await client.post("/model/sb-1/v1/messages", json=ANTHROPIC_BODY,
                                 headers={"x-api-key": token})
    first = await asyncio.wait_for(response.content.readany(), 10)
    assert b"message_start" in first and b"message_delta" not in first
    # A long answer's limits are written while it streams, not only at its end.
    for _ in range(200):
        if ledger.readings("ANTHROPIC_API_KEY"):
            break
        await asyncio.sleep(0.05)
    assert ledger.readings("ANTHROPIC_API_KEY")[0].utilization == pytest.approx(0.75)
    assert ledger.usage("run-1") is None
    agent_has_it.set()
    assert b"message_delta" in await response.read()
    usage = ledger.usage("run-1")
    assert (usage.input_tokens, usage.output_tokens) == (9, 4)


async def test_an_answer_reaches_the_agent_before_its_usage_is_written(
        aiohttp_server, aiohttp_client, tmp_path, monkeypatch):
    # Metering is never between the model's bytes and the agent; only the end of the
    # answer waits for its commit (the run's facts are read once its agent stops).
    async def answer(request: web.Request) -> web.Response:
        return web.json_response({"model": "claude-haiku-4-5",
                                  "usage": {"input_tokens": 3, "output_tokens": 4}})

    upstream = web.Application()
    upstream.router.add_post("/v1/messages", answer)
    client, ledger, token = await _gateway_to(aiohttp_server, aiohttp_client, tmp_path, upstream)
    writing, may_write = threading.Event(), threading.Event()
    record = ledger.record

    def held_record(*args, **kwargs):
        writing.set()
        may_write.wait(10)
        record(*args, **kwargs)

    monkeypatch.setattr(ledger, "record", held_record)
    response = await client.post("/model/sb-1/v1/messages", json=ANTHROPIC_BODY,
                                 headers={"x-api-key": token})
    try:
        assert await asyncio.to_thread(writing.wait, 10)
        first = await asyncio.wait_for(response.content.readany(), 10)
        assert b'"output_tokens": 4' in first
        assert ledger.usage("run-1") is None and not response.content.at_eof()
    finally:
        may_write.set()
    await response.read()
    assert ledger.usage("run-1").output_tokens == 4


async def test_upstream_connections_are_kept_alive_and_carry_no_other_runs_cookies(
        aiohttp_server, aiohttp_client, tmp_path):
    seen = []

    async def answer(request: web.Request) -> web.Response:
        seen.append((request.transport.get_extra_info("peername"),
                     request.headers.get("Cookie")))
        response = web.json_response({"usage": {"input_tokens": 1, "output_tokens": 1}})
        response.set_cookie("session", f"of-request-{len(seen)}")
        return response

    upstream_app = web.Application()
    upstream_app.router.add_post("/v1/messages", answer)
    upstream = await aiohttp_server(upstream_app)
    ledger = ModelLedger(tmp_path / "hangar.db")
    app = web.Application()
    # A name, not an address: a cookie jar keeps cookies for names only.
    setup_gateway(app, ledger=ledger, endpoints=Endpoints(f"http://localhost:{upstream.port}"))
    client = await aiohttp_client(app)
    for sandbox in ("sb-1", "sb-2", "sb-2"):
        token = ledger.issue(sandbox, credential="ANTHROPIC_API_KEY", run_id=f"run-{sandbox}")
        client.session.cookie_jar.clear()  # the sandbox's own client keeps none
        response = await client.post(f"/model/{sandbox}/v1/messages", json=ANTHROPIC_BODY,
                                     headers={"x-api-key": token})
        assert response.status == 200
        assert response.cookies["session"].value == f"of-request-{len(seen)}"
    # One connection for every request, and a cookie reaches upstream only if the
    # sandbox's own client sends it.
    assert len({peer for peer, _ in seen}) == 1
    assert [cookie for _, cookie in seen] == [None, None, None]


def test_usage_meter_reads_split_sse_and_json():
    meter = UsageMeter("text/event-stream")
    stream = (b'event: message_start\ndata: {"type":"message_start","message":{"model":'
              b'"claude-haiku-4-5","usage":{"input_tokens":10,"cache_read_input_tokens":5}}}'
              b'\n\nevent: message_delta\ndata: {"type":"message_delta","usage":'
              b'{"output_tokens":7}}\n\n')
    # Text that spells the keys the meter looks for is only text.
    text = json.dumps({"type": "content_block_delta", "index": 0, "delta": {
        "type": "text_delta", "text": '"usage": {"output_tokens": 999}, "model": "x"'}})
    stream = stream.replace(b"event: message_delta",
                            b"event: content_block_delta\ndata: " + text.encode()
                            + b"\n\nevent: message_delta")
    for i in range(0, len(stream), 7):
        meter.feed(stream[i:i + 7])
    meter.finish()
    assert (meter.model, meter.input_tokens, meter.output_tokens) == ("claude-haiku-4-5", 15, 7)
    # Haiku 4.5: $1 a million fresh input tokens, $0.10 cache reads, $5 output.
    assert meter.cost_usd == pytest.approx((10 * 1 + 5 * 0.1 + 7 * 5) / 1e6)
    meter = UsageMeter("application/json")
    meter.feed(b'{"model":"unknown-model","usage":{"input_tokens":3,"output_tokens":4}}')
    meter.finish()
    assert (meter.input_tokens, meter.output_tokens, meter.cost_usd) == (3, 4, None)


async def test_an_answer_taken_after_a_refusal_ends_it(world):
    # A 429 that named no reset holds until the model takes a request again.
    world.model.script.fault = Fault(429, "overloaded", retry_after_s=60, times=1)
    world.model.script.reset_in_s = 1
    refused = await world.client.post("/model/sb-1/v1/messages", json=ANTHROPIC_BODY,
                                      headers={"x-api-key": world.token})
    await refused.read()
    assert "429" in {r.window for r in world.ledger.readings("ANTHROPIC_API_KEY")}
    taken = await world.client.post("/model/sb-1/v1/messages", json=ANTHROPIC_BODY,
                                    headers={"x-api-key": world.token})
    assert taken.status == 200
    await taken.read()
    assert {r.window for r in world.ledger.readings("ANTHROPIC_API_KEY")} == {"tokens"}


# -- how each request ended: metered from its first byte ---------------------------------


async def _outcomes(ledger: ModelLedger, run_id: str = "run-1", *, settled: bool = True):
    """The run's requests as the gateway recorded them, once none is open (the end is
    written just after the answer's last byte)."""
    for _ in range(100):
        rows = ledger.requests_of(run_id)
        if rows and (not settled or all(r["outcome"] != "open" for r in rows)):
            return rows
        await asyncio.sleep(0.05)
    return ledger.requests_of(run_id)


@pytest.mark.parametrize(("fault", "outcome", "status", "error_type"), [
    (None, "ok", 200, None),
    (Fault(529, "Overloaded"), "status", 529, "overloaded_error"),
    (StreamFault("error_event", after_events=2), "error_event", 200, "overloaded_error"),
    (StreamFault("cut", after_events=2), "cut", 200, None),
])
async def test_each_request_is_recorded_with_how_it_ended(world, fault, outcome, status,
                                                          error_type):
    if isinstance(fault, Fault):
        world.model.script.fault = fault
    elif fault is not None:
        world.model.script.stream_fault = fault
    response = await world.client.post("/model/sb-1/v1/messages", json=ANTHROPIC_BODY,
                                       headers={"x-api-key": world.token})
    try:
        text = await response.text()
    except aiohttp.ClientPayloadError:
        text = None  # the cut reached the agent as a broken answer
    [row] = await _outcomes(world.ledger)
    assert (row["outcome"], row["status"], row["error_type"]) == (outcome, status, error_type)
    assert row["ended_at"] >= row["started_at"]
    if outcome == "cut":
        assert text is None  # not relayed as an answer that ended well
    elif outcome == "ok":
        assert "message_stop" in text


async def test_an_answer_that_goes_quiet_is_metered_while_open_then_ended_as_stalled(
        aiohttp_server, aiohttp_client, tmp_path, monkeypatch):
    monkeypatch.setattr(gateway, "UPSTREAM_TIMEOUT", aiohttp.ClientTimeout(
        total=None, sock_connect=5, sock_read=1.5))
    model = ModelServer(fix_calc_script())
    model.script.stream_fault = StreamFault("stall", after_events=2)
    client, ledger, token = await _gateway_to(aiohttp_server, aiohttp_client, tmp_path,
                                              model.app())
    response = await client.post("/model/sb-1/v1/messages", json=ANTHROPIC_BODY,
                                 headers={"x-api-key": token})
    first = await asyncio.wait_for(response.content.readany(), 10)
    assert b"message_start" in first
    # From the first byte the request is in the run's record, open.
    [row] = await _outcomes(ledger, settled=False)
    assert row["outcome"] == "open" and row["status"] == 200
    with pytest.raises(aiohttp.ClientPayloadError):
        await asyncio.wait_for(response.read(), 20)  # hangar closed it: broken, not ended
    [row] = await _outcomes(ledger)
    assert row["outcome"] == "stalled"


@pytest.mark.parametrize("server", ["the gate's own (no handler cancellation)",
                                    "a server that cancels the handler"])
async def test_closing_the_sandbox_side_closes_the_request_upstream(
        aiohttp_server, aiohttp_client, tmp_path, server):
    upstream_closed = asyncio.Event()

    async def endless(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b'event: message_start\ndata: {"type":"message_start",'
                             b'"message":{"model":"claude-haiku-4-5"}}\n\n')
        try:
            while True:  # quiet, until its client (hangar) goes away
                transport = request.transport
                if transport is None or transport.is_closing():
                    upstream_closed.set()
                    return response
                await asyncio.sleep(0.05)
        except asyncio.CancelledError:  # a test server cancels a handler whose client went
            upstream_closed.set()
            raise

    upstream = web.Application()
    upstream.router.add_post("/v1/messages", endless)
    if server.startswith("a server"):
        client, ledger, token = await _gateway_to(aiohttp_server, aiohttp_client, tmp_path,
                                                  upstream)
        response = await client.post("/model/sb-1/v1/messages", json=ANTHROPIC_BODY,
                                     headers={"x-api-key": token})
    else:  # as app/web/sandbox_gate.py serves it: a plain runner
        served = await aiohttp_server(upstream)
        ledger = ModelLedger(tmp_path / "hangar.db")
        gate = web.Application()
        setup_gateway(gate, ledger=ledger,
                      endpoints=Endpoints(str(served.make_url("")).rstrip("/")))
        runner = web.AppRunner(gate, access_log=None, shutdown_timeout=2)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        token = ledger.issue("sb-1", credential="ANTHROPIC_API_KEY", run_id="run-1")
        session = aiohttp.ClientSession()
        response = await session.post(f"http://127.0.0.1:{port}/model/sb-1/v1/messages",
                                      json=ANTHROPIC_BODY, headers={"x-api-key": token})
    try:
        assert b"message_start" in await asyncio.wait_for(response.content.readany(), 10)
        response.close()  # the agent is stopped: its connection goes
        await asyncio.wait_for(upstream_closed.wait(), 10)
        [row] = await _outcomes(ledger)
        assert row["outcome"] == "aborted"
    finally:
        if not server.startswith("a server"):
            await session.close()
            await runner.cleanup()


async def test_a_request_open_when_hangar_starts_again_was_cut_by_the_restart(
        aiohttp_server, aiohttp_client, tmp_path):
    ledger = ModelLedger(tmp_path / "hangar.db")
    cut = ledger.begin("run-1", "ANTHROPIC_API_KEY", status=200, started_at=time.time())
    # A new hangar (a new gateway on the same file) starts.
    await _gateway_to(aiohttp_server, aiohttp_client, tmp_path, web.Application())
    [row] = ledger.requests_of("run-1")
    assert row["id"] == cut and row["outcome"] == "restart"


async def test_an_endpoint_not_reached_is_recorded_too(world):
    world.endpoints.base_url = "http://127.0.0.1:9"
    response = await world.client.post("/model/sb-1/v1/messages", json=ANTHROPIC_BODY,
                                       headers={"x-api-key": world.token})
    assert response.status == 502
    [row] = await _outcomes(world.ledger)
    assert (row["outcome"], row["status"]) == ("unreachable", None)


async def test_a_stream_hangar_stops_serving_is_recorded_as_cut_by_its_restart(
        aiohttp_server, aiohttp_client, tmp_path):
    """hangar stopping (a deploy, a restart) while an answer streams: the request is not
    the agent's doing nor the model's, and says so (written as hangar stops when it can,
    else found open when it starts again)."""
    model = ModelServer(fix_calc_script())
    model.script.stream_fault = StreamFault("stall", after_events=2)
    served = await aiohttp_server(model.app())
    ledger = ModelLedger(tmp_path / "hangar.db")
    gate = web.Application()
    setup_gateway(gate, ledger=ledger,
                  endpoints=Endpoints(str(served.make_url("")).rstrip("/")))
    runner = web.AppRunner(gate, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    token = ledger.issue("sb-1", credential="ANTHROPIC_API_KEY", run_id="run-1")
    async with aiohttp.ClientSession() as session:
        response = await session.post(f"http://127.0.0.1:{port}/model/sb-1/v1/messages",
                                      json=ANTHROPIC_BODY, headers={"x-api-key": token})
        assert b"message_start" in await asyncio.wait_for(response.content.readany(), 10)
        await runner.cleanup()  # hangar stops; the agent is still there
        [row] = ledger.requests_of("run-1")
        assert row["outcome"] in ("restart", "open")  # never the agent's side, nor the model
    await _gateway_to(aiohttp_server, aiohttp_client, tmp_path, web.Application())
    [row] = ledger.requests_of("run-1")
    assert row["outcome"] == "restart"
