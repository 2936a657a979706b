"""A scripted model server: Anthropic Messages and OpenAI Responses, streamed, on loopback.

It stands in for a model so that the real Claude Code and Codex CLIs can run without a
key: each request is answered with the next step of a script, found from the
conversation the CLI sends (how many tool results follow the request's prompt). A step
reads a file, writes a file, runs a command, or answers in words and ends the turn.

A scene is picked by a substring of the prompt (`when`); `needs_history` makes a scene
refuse (in words, with no tool calls) unless the conversation carries an earlier turn,
which is how tests show that a follow-up resumed the agent's session.

Faults for tests: `status` 429 (with rate-limit headers and retry-after), 401, 500, 529
(overloaded); and a stream that breaks after some events (`StreamFault`): cut (the
connection closed mid-answer), an error event in the middle of the stream, or a stall
(the answer stops and never ends).
Every answer carries rate-limit headers: an API key's (Anthropic's
`anthropic-ratelimit-tokens-*`, OpenAI's `x-ratelimit-*`), or with `subscription` set a
subscription's (Anthropic's `anthropic-ratelimit-unified-{5h,7d}-*`, Codex's
`x-codex-{primary,secondary}-*`), at the utilization the script says.
Every request is kept in `requests` (method, path, headers, body) for assertions.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

API_KEY_HEADERS = ("x-api-key", "authorization")


@dataclass
class Step:
    """One answer: `read`, `write` (with `content`), `run`, or `say` (ends the turn)."""

    read: str | None = None
    write: str | None = None
    content: str = ""
    run: str | None = None
    say: str | None = None


@dataclass
class Scene:
    when: str
    steps: list[Step]
    needs_history: bool = False


@dataclass
class Fault:
    status: int
    message: str
    retry_after_s: int = 60
    times: int = 1_000_000


@dataclass
class StreamFault:
    """A streamed answer that breaks after `after_events` events: `cut` closes the
    connection, `error_event` sends an error event (`error_type`) and ends the stream,
    `stall` sends nothing more and never ends."""

    kind: str
    after_events: int = 2
    error_type: str = "overloaded_error"
    times: int = 1_000_000


class _StreamBroken(Exception):
    """The scripted stream fault happened: the handler stops here."""


@dataclass
class ModelScript:
    scenes: list[Scene]
    # The key a request must carry (x-api-key or Authorization: Bearer); None accepts any.
    api_key: str | None = None
    fault: Fault | None = None
    stream_fault: StreamFault | None = None
    # Rate-limit utilization reported on every answer, 0..1.
    utilization: float = 0.1
    reset_in_s: int = 3600
    # A subscription's windows instead of an API key's limits: utilization 0..1 by
    # window ("5h", "7d"), each resetting reset_in_s from now.
    subscription: dict[str, float] | None = None
    # Seconds to wait between streamed events (for throughput and TTFB benchmarks).
    event_delay_s: float = 0.0
    # Extra text streamed in the final answer, in chunks (for benchmarks).
    filler_chunks: int = 0


def fix_calc_script(api_key: str | None = None) -> ModelScript:
    """The demo's script: fix add() in calc.py, run the tests, commit; a follow-up adds a
    docstring and needs the first turn's session."""
    fixed = '"""A tiny calculator."""\n\n\ndef add(a, b):\n    return a + b\n'
    documented = ('"""A tiny calculator."""\n\n\ndef add(a, b):\n'
                  '    """The sum of a and b."""\n    return a + b\n')
    return ModelScript(api_key=api_key, scenes=[
        Scene(when="Request for turn", needs_history=True, steps=[
            Step(write="calc.py", content=documented),
            Step(run="python3 -m unittest -q && git commit -qam 'Document add()'"),
            Step(say="I documented add() in calc.py, as asked in the follow-up."),
        ]),
        Scene(when="", steps=[
            Step(read="calc.py"),
            Step(write="calc.py", content=fixed),
            Step(run="python3 -m unittest -q && git commit -qam "
                     "'Fix add(): it subtracted instead of adding'"),
            Step(say="I fixed add() in calc.py; the tests pass."),
        ]),
    ])


@dataclass
class _Turn:
    prompt: str
    done: int  # tool results after the prompt
    has_history: bool
    tools: set[str]
    cwd: str | None


@dataclass
class ModelServer:
    script: ModelScript
    requests: list[dict[str, Any]] = field(default_factory=list)
    _ids: Any = field(default_factory=lambda: itertools.count(1))

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_post("/v1/messages", self.messages)
        app.router.add_post("/v1/messages/count_tokens", self.count_tokens)
        app.router.add_post("/v1/responses", self.responses)
        app.router.add_get("/v1/models", self.models)
        app.router.add_route("*", "/{tail:.*}", self.unknown)
        return app

    # ---- shared ------------------------------------------------------------------

    def _record(self, request: web.Request, body: Any) -> None:
        self.requests.append({"method": request.method, "path": request.path_qs,
                              "headers": dict(request.headers), "body": body})

    def _refusal(self, request: web.Request, kind: str) -> web.Response | None:
        key = self.script.api_key
        if key is not None:
            given = request.headers.get("x-api-key") or request.headers.get(
                "Authorization", "").removeprefix("Bearer ").strip()
            if given != key:
                return _error(401, kind, "authentication_error", "invalid x-api-key")
        fault = self.script.fault
        if fault is not None and fault.times > 0:
            fault.times -= 1
            headers = self._limit_headers(kind, remaining_fraction=0.0)
            headers["retry-after"] = str(fault.retry_after_s)
            error_type = {429: "rate_limit_error", 401: "authentication_error",
                          529: "overloaded_error"}.get(fault.status, "api_error")
            if fault.status == 429 and kind == "openai" and self.script.subscription:
                # A ChatGPT plan's limit, as Codex reads it: the type and when it resets.
                return web.json_response({"error": {
                    "type": "usage_limit_reached", "message": fault.message,
                    "plan_type": "plus", "resets_in_seconds": self.script.reset_in_s,
                    "resets_at": int(time.time() + self.script.reset_in_s)}},
                    status=429, headers=headers)
            return _error(fault.status, kind, error_type, fault.message, headers)
        return None

    def _limit_headers(self, kind: str, remaining_fraction: float | None = None) -> dict:
        if self.script.subscription is not None:
            return self._subscription_headers(kind, refused=remaining_fraction == 0.0)
        limit = 100_000
        left = 1 - self.script.utilization if remaining_fraction is None else remaining_fraction
        remaining = int(limit * left)
        reset = time.time() + self.script.reset_in_s
        if kind == "anthropic":
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(reset))
            return {"anthropic-ratelimit-tokens-limit": str(limit),
                    "anthropic-ratelimit-tokens-remaining": str(remaining),
                    "anthropic-ratelimit-tokens-reset": stamp}
        return {"x-ratelimit-limit-tokens": str(limit),
                "x-ratelimit-remaining-tokens": str(remaining),
                "x-ratelimit-reset-tokens": f"{self.script.reset_in_s}s"}

    def _subscription_headers(self, kind: str, *, refused: bool) -> dict:
        """What a subscription's answers say: per window its utilization and its reset
        (epoch seconds), as Claude Code and Codex read them."""
        windows = dict(self.script.subscription or {})
        reset = str(int(time.time() + self.script.reset_in_s))
        if kind == "anthropic":
            claims = {"5h": "five_hour", "7d": "seven_day"}
            top = max(windows, key=windows.get) if windows else "7d"
            status = "rejected" if refused or max(windows.values(), default=0) >= 1 else (
                "allowed_warning" if max(windows.values(), default=0) >= 0.75 else "allowed")
            headers = {"anthropic-ratelimit-unified-status": status,
                       "anthropic-ratelimit-unified-reset": reset,
                       "anthropic-ratelimit-unified-representative-claim": claims.get(top, top)}
            for window, used in windows.items():
                prefix = f"anthropic-ratelimit-unified-{window}"
                headers[f"{prefix}-utilization"] = f"{used:g}"
                headers[f"{prefix}-reset"] = reset
                headers[f"{prefix}-status"] = (
                    "rejected" if used >= 1 else "allowed_warning" if used >= 0.75 else "allowed")
            return headers
        minutes = {"5h": 300, "7d": 10080}
        headers = {}
        shortest_first = sorted(windows, key=lambda w: minutes.get(w, 0))
        for slot, window in zip(("primary", "secondary"), shortest_first, strict=False):
            headers[f"x-codex-{slot}-used-percent"] = f"{windows[window] * 100:g}"
            headers[f"x-codex-{slot}-window-minutes"] = str(minutes.get(window, 0))
            headers[f"x-codex-{slot}-reset-at"] = reset
        return headers

    def _turn(self, items: list[dict], *, kind: str, tools: list) -> _Turn:
        """Where the conversation stands: the last prompt and the tool results after it."""
        prompt_at = None
        for index, item in enumerate(items):
            if _prompt_text(item, kind):
                prompt_at = index
        prompt = _prompt_text(items[prompt_at], kind) if prompt_at is not None else ""
        after = items[prompt_at + 1:] if prompt_at is not None else items
        done = sum(_tool_results(item, kind) for item in after)
        before = items[:prompt_at] if prompt_at is not None else []
        has_history = any(_is_assistant(item, kind) for item in before)
        names = {_tool_name(t) for t in tools}
        return _Turn(prompt=prompt, done=done, has_history=has_history, tools=names,
                     cwd=_cwd_of(items, kind))

    def _step(self, turn: _Turn) -> Step:
        for scene in self.script.scenes:
            if scene.when in turn.prompt:
                if scene.needs_history and not turn.has_history:
                    return Step(say="I do not see our earlier conversation, so I changed "
                                    "nothing (the session was not resumed).")
                if turn.done < len(scene.steps):
                    return scene.steps[turn.done]
                return Step(say="Done.")
        return Step(say="I have no script for this request.")

    async def _pace(self) -> None:
        if self.script.event_delay_s:
            await asyncio.sleep(self.script.event_delay_s)

    def _filler(self) -> list[str]:
        return [f"filler {i:06d} " * 8 for i in range(self.script.filler_chunks)]

    async def unknown(self, request: web.Request) -> web.Response:
        self._record(request, None)
        return web.json_response({"error": {"type": "not_found_error",
                                            "message": f"no route {request.path}"}}, status=404)

    async def models(self, request: web.Request) -> web.Response:
        self._record(request, None)
        return web.json_response({"data": [], "object": "list"})

    # ---- Anthropic Messages ------------------------------------------------------

    async def count_tokens(self, request: web.Request) -> web.Response:
        body = await request.json()
        self._record(request, body)
        return web.json_response({"input_tokens": len(json.dumps(body)) // 4})

    async def _faulty(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Run a streaming handler, breaking its stream as `stream_fault` says."""
        fault = self.script.stream_fault
        if fault is None or fault.times <= 0:
            return await handler(request, _sse)
        fault.times -= 1
        sent: list[web.StreamResponse] = []
        body = await request.json()  # kept by aiohttp: the handler reads it again
        if fault.kind == "cut" and not body.get("stream"):
            # An answer in one piece is cut too: half its bytes, then the connection goes.
            whole = await handler(request, _sse)
            data = whole.body if isinstance(whole.body, bytes) else b"{}"
            cut = web.StreamResponse(status=whole.status, headers={
                "Content-Type": "application/json", "Content-Length": str(len(data))})
            await cut.prepare(request)
            await cut.write(data[: len(data) // 2])
            if request.transport is not None:
                request.transport.close()
            return cut

        async def send(response: web.StreamResponse, event: str, data: dict) -> None:
            if len(sent) >= fault.after_events:
                if fault.kind == "error_event":
                    await _sse(response, "error", {"type": "error", "error": {
                        "type": fault.error_type, "message": "Overloaded"}})
                    await response.write_eof()
                elif fault.kind == "stall":
                    while True:  # nothing more, until the client goes (no event says so)
                        transport = request.transport
                        if transport is None or transport.is_closing():
                            break
                        await asyncio.sleep(0.2)
                elif request.transport is not None:
                    request.transport.close()  # cut: the connection, mid-answer
                raise _StreamBroken
            sent.append(response)
            await _sse(response, event, data)

        try:
            return await handler(request, send)
        except _StreamBroken:
            return sent[-1]  # the stream that broke: nothing more is sent on it

    async def messages(self, request: web.Request) -> web.StreamResponse:
        return await self._faulty(request, self._messages)

    async def _messages(self, request: web.Request, _sse: Any) -> web.StreamResponse:
        body = await request.json()
        self._record(request, body)
        refused = self._refusal(request, "anthropic")
        if refused is not None:
            return refused
        tools = body.get("tools") or []
        if not tools:
            step = Step(say="hangar scripted model")  # side requests: titles, quotas
        else:
            turn = self._turn(body.get("messages") or [], kind="anthropic", tools=tools)
            step = self._step(turn)
        blocks = self._anthropic_blocks(step, turn.cwd if tools else None)
        usage_in = len(json.dumps(body)) // 4
        usage_out = sum(len(json.dumps(b)) for b in blocks) // 4 + 1
        message_id = f"msg_scripted_{next(self._ids):04d}"
        stop = "tool_use" if blocks[-1]["type"] == "tool_use" else "end_turn"
        headers = self._limit_headers("anthropic")
        if not body.get("stream"):
            return web.json_response({
                "id": message_id, "type": "message", "role": "assistant",
                "model": body.get("model", "scripted"), "content": blocks,
                "stop_reason": stop, "stop_sequence": None,
                "usage": {"input_tokens": usage_in, "output_tokens": usage_out}},
                headers=headers)
        response = await _sse_start(request, headers)
        await _sse(response, "message_start", {
            "type": "message_start",
            "message": {"id": message_id, "type": "message", "role": "assistant",
                        "model": body.get("model", "scripted"), "content": [],
                        "stop_reason": None, "stop_sequence": None,
                        "usage": {"input_tokens": usage_in, "output_tokens": 1,
                                  "cache_creation_input_tokens": 0,
                                  "cache_read_input_tokens": 0}}})
        for index, block in enumerate(blocks):
            await self._pace()
            if block["type"] == "text":
                await _sse(response, "content_block_start", {
                    "type": "content_block_start", "index": index,
                    "content_block": {"type": "text", "text": ""}})
                for chunk in [*self._filler(), block["text"]]:
                    await self._pace()
                    await _sse(response, "content_block_delta", {
                        "type": "content_block_delta", "index": index,
                        "delta": {"type": "text_delta", "text": chunk}})
            else:
                await _sse(response, "content_block_start", {
                    "type": "content_block_start", "index": index,
                    "content_block": {**block, "input": {}}})
                await _sse(response, "content_block_delta", {
                    "type": "content_block_delta", "index": index,
                    "delta": {"type": "input_json_delta",
                              "partial_json": json.dumps(block["input"])}})
            await _sse(response, "content_block_stop",
                       {"type": "content_block_stop", "index": index})
        await _sse(response, "message_delta", {
            "type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": usage_out}})
        await _sse(response, "message_stop", {"type": "message_stop"})
        await response.write_eof()
        return response

    def _anthropic_blocks(self, step: Step, cwd: str | None) -> list[dict]:
        if step.say is not None:
            return [{"type": "text", "text": step.say}]
        tool_id = f"toolu_scripted_{next(self._ids):04d}"
        base = cwd or "."
        if step.read is not None:
            call = {"name": "Read", "input": {"file_path": f"{base}/{step.read}"}}
        elif step.write is not None:
            call = {"name": "Write", "input": {"file_path": f"{base}/{step.write}",
                                               "content": step.content}}
        else:
            call = {"name": "Bash", "input": {"command": step.run,
                                              "description": "Run a command"}}
        return [{"type": "text", "text": "Working on it."},
                {"type": "tool_use", "id": tool_id, **call}]

    # ---- OpenAI Responses --------------------------------------------------------

    async def responses(self, request: web.Request) -> web.StreamResponse:
        return await self._faulty(request, self._responses)

    async def _responses(self, request: web.Request, _sse: Any) -> web.StreamResponse:
        body = await request.json()
        self._record(request, body)
        refused = self._refusal(request, "openai")
        if refused is not None:
            return refused
        tools = body.get("tools") or []
        items = body.get("input") or []
        if isinstance(items, str):
            items = [{"type": "message", "role": "user", "content": items}]
        if tools:
            step = self._step(self._turn(items, kind="openai", tools=tools))
            tool_names = {_tool_name(t) for t in tools}
        else:
            step, tool_names = Step(say="hangar scripted model"), set()
        output = self._openai_items(step, tool_names)
        usage_in = len(json.dumps(body)) // 4
        usage_out = sum(len(json.dumps(i)) for i in output) // 4 + 1
        response_id = f"resp_scripted_{next(self._ids):04d}"
        usage = {"input_tokens": usage_in, "input_tokens_details": {"cached_tokens": 0},
                 "output_tokens": usage_out, "output_tokens_details": {"reasoning_tokens": 0},
                 "total_tokens": usage_in + usage_out}
        shell = {"id": response_id, "object": "response", "created_at": int(time.time()),
                 "model": body.get("model", "scripted"), "output": [], "status": "in_progress"}
        headers = self._limit_headers("openai")
        if not body.get("stream"):
            return web.json_response({**shell, "status": "completed", "output": output,
                                      "usage": usage}, headers=headers)
        response = await _sse_start(request, headers)
        seq = itertools.count()
        await _sse(response, "response.created", {
            "type": "response.created", "sequence_number": next(seq), "response": shell})
        for index, item in enumerate(output):
            await self._pace()
            started = {**item, "status": "in_progress"}
            if item["type"] == "message":
                started["content"] = []
            await _sse(response, "response.output_item.added", {
                "type": "response.output_item.added", "sequence_number": next(seq),
                "output_index": index, "item": started})
            if item["type"] == "message":
                text = item["content"][0]["text"]
                for chunk in [*self._filler(), text]:
                    await self._pace()
                    await _sse(response, "response.output_text.delta", {
                        "type": "response.output_text.delta", "sequence_number": next(seq),
                        "item_id": item["id"], "output_index": index, "content_index": 0,
                        "delta": chunk})
            await _sse(response, "response.output_item.done", {
                "type": "response.output_item.done", "sequence_number": next(seq),
                "output_index": index, "item": item})
        await _sse(response, "response.completed", {
            "type": "response.completed", "sequence_number": next(seq),
            "response": {**shell, "status": "completed", "output": output, "usage": usage}})
        await response.write_eof()
        return response

    def _openai_items(self, step: Step, tools: set[str]) -> list[dict]:
        n = next(self._ids)
        if step.say is not None:
            return [{"type": "message", "id": f"msg_scripted_{n:04d}", "status": "completed",
                     "role": "assistant",
                     "content": [{"type": "output_text", "text": step.say, "annotations": []}]}]
        if step.read is not None:
            command = f"cat {step.read}"
        elif step.write is not None:
            command = f"cat > {step.write} <<'HANGAR_EOF'\n{step.content}HANGAR_EOF"
        else:
            command = step.run or "true"
        if "exec_command" in tools:
            name, arguments = "exec_command", {"cmd": command}
        else:
            name, arguments = "shell", {"command": ["bash", "-lc", command]}
        return [{"type": "function_call", "id": f"fc_scripted_{n:04d}",
                 "call_id": f"call_scripted_{n:04d}", "name": name,
                 "arguments": json.dumps(arguments), "status": "completed"}]


class ModelThread:
    """A ModelServer on loopback, served from its own thread and event loop, for callers
    that are not async (a script, a sync test, the demo). `with ModelThread(model) as
    served:` starts it; `served.url` is its address; leaving the block stops it."""

    def __init__(self, model: ModelServer, port: int = 0):
        self.model = model
        self.port = port  # 0: the kernel picks one while binding, so nothing takes it first
        self._loop = asyncio.new_event_loop()
        self._runner = web.AppRunner(model.app(), access_log=None)
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="scripted-model")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ModelThread:
        self._thread.start()
        try:
            self._call(self._start())
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    async def _start(self) -> None:
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        self.port = self._runner.addresses[0][1]

    def stop(self) -> None:
        """Closes the listener and its connections, then ends the loop and its thread."""
        try:
            self._call(self._runner.cleanup())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            if not self._thread.is_alive():
                self._loop.close()

    def _call(self, coroutine: Any) -> None:
        asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(10)


# ---- conversation reading ---------------------------------------------------------


def _prompt_text(item: Any, kind: str) -> str:
    """The text of a person's prompt (not a tool result, not hangar-less boilerplate)."""
    if not isinstance(item, dict) or item.get("role") != "user":
        return ""
    if kind == "openai" and item.get("type", "message") != "message":
        return ""
    content = item.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    texts = []
    for block in content:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "tool_result":
            return ""
        if block.get("type") in ("text", "input_text"):
            texts.append(block.get("text") or "")
    text = "\n".join(texts)
    # The CLIs add context messages of their own; a prompt is what asks for a change.
    return text if "Request" in text or "hangar" in text.lower() else ""


def _tool_results(item: Any, kind: str) -> int:
    if not isinstance(item, dict):
        return 0
    if kind == "openai":
        return int(item.get("type") in ("function_call_output", "custom_tool_call_output"))
    content = item.get("content")
    if item.get("role") != "user" or not isinstance(content, list):
        return 0
    return sum(1 for b in content if isinstance(b, dict) and b.get("type") == "tool_result")


def _is_assistant(item: Any, kind: str) -> bool:
    if not isinstance(item, dict):
        return False
    if kind == "openai" and item.get("type") in ("function_call", "custom_tool_call"):
        return True
    return item.get("role") == "assistant"


def _tool_name(tool: Any) -> str:
    if not isinstance(tool, dict):
        return ""
    return str(tool.get("name") or (tool.get("function") or {}).get("name") or "")


def _cwd_of(items: list, kind: str) -> str | None:
    """The working directory the CLI announces in its context, for absolute file paths."""
    import re

    text = json.dumps(items)
    for pattern in (r"Working directory: (/[^\\\"\s]+)", r"<cwd>(/[^<]+)</cwd>"):
        found = re.search(pattern, text)
        if found:
            return found.group(1)
    return None


# ---- wire helpers -----------------------------------------------------------------


def _error(status: int, kind: str, error_type: str, message: str,
           headers: dict | None = None) -> web.Response:
    if kind == "anthropic":
        body = {"type": "error", "error": {"type": error_type, "message": message}}
    else:
        body = {"error": {"type": error_type, "message": message, "code": error_type}}
    return web.json_response(body, status=status, headers=headers or {})


async def _sse_start(request: web.Request, headers: dict) -> web.StreamResponse:
    response = web.StreamResponse(headers={**headers, "Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache"})
    await response.prepare(request)
    return response


async def _sse(response: web.StreamResponse, event: str, data: dict) -> None:
    await response.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
