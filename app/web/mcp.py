"""hangar's MCP server, for orchestrator agents: the REST API's calls as tools.

Two transports:
- stdio: `HANGAR_API_URL=https://hangar.example.com HANGAR_API_TOKEN=… hangar mcp`;
- streamable HTTP at `/mcp` on hangar itself, with the same bearer tokens.

Every tool is one REST call (or two: an ask, then the wait for its outcome) made with
the caller's own token, so the scopes, the rules and the audit trail are the API's:
a tool the token has no scope for answers `insufficient_scope: …`. The waiting tools
return as soon as the engine records a change, not on a timer. No tool approves.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from types import CodeType
from typing import Annotated, Any, TypeVar

import aiohttp
from aiohttp import web
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import ToolAnnotations
from pydantic import Field, ValidationError

from app.web.api import (
    FollowUp,
    JobsQuery,
    LandQuery,
    Pick,
    PrChoice,
    StartJob,
    WaitQuery,
)
from app.web.keys import SETTINGS

MAX_WAIT_S = 120
Result = dict[str, Any]  # a structured tool result: an object, described as such to clients
# An ask is usually taken within a second and its outcome follows; a busy installation
# may wait up to a minute for GitHub's write allowance before it can act.
OUTCOME_WAIT_S = 90

INSTRUCTIONS = """\
hangar runs coding agents in sandboxes on GitHub issues, pushes their branches, opens pull
requests as a GitHub App, verifies them in a clean sandbox, and lands them after a person
approves the exact head in GitHub. You work it like a maintainer commenting `/hangar …`:
1. start_job(repo, issue, prompt, attempts=N): N > 1 runs N attempts that get ranked.
2. get_job(job_id, wait_seconds=60, after=seq) returns as soon as something changes;
   get_ranking(job_id, wait_seconds=…) returns when every attempt is ranked.
3. pick(job_id, attempt) keeps one attempt and closes the others' pull requests; an
   ineligible attempt only with force=true; land=true also asks to land it.
4. follow_up / verify for more turns or another verification on a pull request.
5. request_land(job_id) asks to land; land_status(land_id, wait_seconds=…) follows it.
   It waits in `awaiting_approval` until a person approves the head on GitHub: no tool
   can approve. Tell the user which pull request needs their review.
Facts (commits, checks, verification) come from git and GitHub, not from agents' words."""


# The tools' parameters, described and bounded by the REST API's own models: one schema.
Repo = Annotated[str, StartJob.model_fields["repo"]]
Issue = Annotated[int, StartJob.model_fields["issue"]]
Prompt = Annotated[str, StartJob.model_fields["prompt"]]
Attempts = Annotated[int, StartJob.model_fields["attempts"]]
Attempt = Annotated[int, Pick.model_fields["attempt"]]
Force = Annotated[bool, Pick.model_fields["force"]]
PickLands = Annotated[bool, Pick.model_fields["land"]]
LandStateName = Annotated[str | None, LandQuery.model_fields["state"]]
PrNumber = Annotated[int | None, PrChoice.model_fields["pr"]]
TurnPr = Annotated[int | None, FollowUp.model_fields["pr"]]
ListRepo = Annotated[str | None, JobsQuery.model_fields["repo"]]
After = Annotated[int | None, WaitQuery.model_fields["after"]]
WaitSeconds = Annotated[float, WaitQuery.model_fields["wait_seconds"]]
JobId = Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[\w.-]+$",
                             description="a job's id, as start_job or list_jobs gave it")]
LandId = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[\w.-]+$",
                              description="a land request's id, as request_land gave it")]
RunId = Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[\w.-]+$",
                             description="a run's id, from get_job's runs")]

RunIds = Annotated[list[RunId], Field(min_length=2, max_length=10,
                                      description="2 to 10 finished runs' ids")]

READS = ToolAnnotations(readOnlyHint=True, openWorldHint=False)
# Starts or changes work on GitHub, adds and never removes.
ADDS = ToolAnnotations(readOnlyHint=False, destructiveHint=False, openWorldHint=True)
# Stops work or closes others' pull requests.
ENDS = ToolAnnotations(readOnlyHint=False, destructiveHint=True, openWorldHint=True)


def argument_sentence(tool: str, exc: ValidationError) -> str:
    """A tool's refused arguments, as a sentence an agent can act on."""
    said = []
    for error in exc.errors(include_url=False, include_input=False):
        name = ".".join(str(part) for part in error["loc"]) or "the arguments"
        if error["type"] == "missing":
            said.append(f"`{name}` is required")
        elif error["type"] == "extra_forbidden":
            said.append(f"`{name}` is not a parameter of {tool}")
        else:
            message = error["msg"]
            said.append(f"`{name}`: {message[:1].lower()}{message[1:]}")
    return f"invalid: {tool}'s arguments: {'; '.join(said)}."


class Server(MCPServer):
    """The SDK's server, with bad arguments answered in a sentence, not pydantic's dump."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                raise ToolError(argument_sentence(name, exc.__cause__)) from None
            raise


class ApiCallError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class HangarAPI:
    """hangar's REST API with one token."""

    def __init__(self, url: str, token: str):
        self.url = url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {token}"}

    async def call(self, method: str, path: str, body: Any = None,
                   query: dict[str, Any] | None = None) -> Any:
        params = {k: str(v) for k, v in (query or {}).items() if v is not None}
        timeout = aiohttp.ClientTimeout(total=MAX_WAIT_S + 30)
        async with aiohttp.ClientSession(timeout=timeout) as session, session.request(
            method, f"{self.url}{path}", json=body, params=params, headers=self.headers
        ) as response:
            if response.status >= 400:
                text = await response.text()
                try:
                    text = (await response.json()).get("error", text)
                except (aiohttp.ContentTypeError, ValueError, AttributeError):
                    pass
                raise ApiCallError(response.status, text)
            return await response.json()


def tool_error(exc: ApiCallError) -> ToolError:
    """What the agent reads when a call is refused: the API's sentence, with a prefix."""
    prefix = {401: "unauthorized", 403: "insufficient_scope", 404: "not_found",
              422: "invalid", 409: "conflict", 503: "unavailable"}.get(exc.status, "error")
    return ToolError(f"{prefix}: {exc}")


def build_server(api_for: Callable[[Context | None], HangarAPI]) -> MCPServer:
    """The tools; `api_for(ctx)` is the API with the caller's token (per request over
    HTTP, the one from the environment over stdio)."""
    tools: list[Tool] = []

    def tool(annotations: ToolAnnotations) -> Callable[[ToolFunction], ToolFunction]:
        def add(fn: ToolFunction) -> ToolFunction:
            tools.append(tool_of(fn, annotations))
            return fn
        return add

    async def call(ctx: Context | None, method: str, path: str, body: Any = None,
                   query: dict[str, Any] | None = None) -> Any:
        try:
            return await api_for(ctx).call(method, path, body, query)
        except ApiCallError as exc:
            raise tool_error(exc) from None

    async def ask(ctx: Context | None, path: str, body: dict) -> Result:
        """An ask, then its outcome: the same words a comment's ask ends with."""
        asked = await call(ctx, "POST", path, body)
        done = await call(ctx, "GET", f"/api/intents/{asked['intent']}",
                          query={"wait_seconds": OUTCOME_WAIT_S})
        return {**asked, "state": done["state"], "outcome": done["outcome"]}

    @tool(annotations=ADDS)
    async def start_job(repo: Repo, issue: Issue, prompt: Prompt, attempts: Attempts = 1,
                        ctx: Context | None = None) -> Result:
        """Start coding agents on a GitHub issue, as a maintainer's `/hangar <prompt>`
        comment would (or `/hangar try N <prompt>` when attempts > 1: N independent
        attempts, each with its own pull request, ranked when all finish).
        repo is owner/name; issue is the issue's number; attempts is 1 to 10.
        Returns job (the id to follow with get_job) and intent. Needs scope operate."""
        return await call(ctx, "POST", "/api/jobs", {"repo": repo, "issue": issue,
                                                     "prompt": prompt, "attempts": attempts})

    @tool(annotations=READS)
    async def get_job(job_id: JobId, wait_seconds: WaitSeconds = 0, after: After = None,
                      ctx: Context | None = None) -> Result:
        """A job: its runs (state, stage, branch, PR, head, verification), its PRs, land
        requests and timeline, and `seq`. With wait_seconds (at most 120) it returns as
        soon as anything of the job changes after `after` (pass the seq of your last
        answer, so nothing between two calls is missed), or when the time is up.
        Needs scope read."""
        return await call(ctx, "GET", f"/api/jobs/{job_id}",
                          query={"wait_seconds": min(max(wait_seconds, 0), MAX_WAIT_S),
                                 "after": after})

    @tool(annotations=READS)
    async def get_ranking(job_id: JobId, wait_seconds: WaitSeconds = 0,
                          ctx: Context | None = None) -> Result:
        """The ranking of a job started with attempts > 1: best first, each with the
        attempt number, its PR and why it placed there (verification, CI, diff size).
        `final` is false while attempts still run; then `attempts` shows each one's state.
        With wait_seconds (at most 120) it returns as soon as the ranking is final.
        Needs scope read."""
        return await call(ctx, "GET", f"/api/jobs/{job_id}/ranking",
                          query={"wait_seconds": min(max(wait_seconds, 0), MAX_WAIT_S)})

    @tool(annotations=READS)
    async def rank_runs(run_ids: RunIds, ctx: Context | None = None) -> Result:
        """Rank 2 to 10 finished runs you started yourself (separate jobs on one task) by
        the rules that rank `try N`: best first, each with `run`, `eligible`, the gates it
        failed and why; `attempt` is its place in run_ids. Needs scope read."""
        return await call(ctx, "GET", "/api/rank", query={"runs": ",".join(run_ids)})

    @tool(annotations=ENDS)
    async def pick(job_id: JobId, attempt: Attempt, force: Force = False, land: PickLands = False,
                   ctx: Context | None = None) -> Result:
        """Keep one attempt of a ranked job, as `/hangar pick N`: the other attempts'
        pull requests are closed. An attempt the ranking calls ineligible is kept only
        with force=true. land=true also asks to land the kept PR (a person still
        approves it on GitHub). Returns the outcome. Needs scope operate."""
        return await ask(ctx, f"/api/jobs/{job_id}/pick",
                         {"attempt": attempt, "force": force, "land": land})

    @tool(annotations=ADDS)
    async def resolve_conflicts(job_id: JobId, pr: PrNumber = None,
                                ctx: Context | None = None) -> Result:
        """A turn on one of the job's pull requests that merges the base and resolves the
        conflicts, as `/hangar resolve`; the new head is verified again and needs its own
        approval. Needs scope operate."""
        return await ask(ctx, f"/api/jobs/{job_id}/resolve", {"pr": pr})

    @tool(annotations=ADDS)
    async def follow_up(job_id: JobId, prompt: Prompt, pr: TurnPr = None,
                        ctx: Context | None = None) -> Result:
        """Another agent turn on one of the job's pull requests, on the same branch, as
        `/hangar <prompt>` commented there. pr may be left out when the job has one PR
        or a picked attempt. If a turn is running, this one starts when it ends.
        Needs scope operate."""
        return await ask(ctx, f"/api/jobs/{job_id}/turns", {"prompt": prompt, "pr": pr})

    @tool(annotations=ADDS)
    async def verify(job_id: JobId, pr: PrNumber = None, ctx: Context | None = None) -> Result:
        """Verify a pull request's current head again in a clean sandbox, as
        `/hangar verify`. Follow the result with get_job. Needs scope operate."""
        return await ask(ctx, f"/api/jobs/{job_id}/verify", {"pr": pr})

    @tool(annotations=ENDS)
    async def cancel(job_id: JobId, ctx: Context | None = None) -> Result:
        """Stop a job's queued and running agents, as `/hangar cancel`. Needs scope
        operate."""
        return await ask(ctx, f"/api/jobs/{job_id}/cancel", {})

    @tool(annotations=ADDS)
    async def resume(job_id: JobId, ctx: Context | None = None) -> Result:
        """Start a job's agents that hangar paused because the model's usage reached its
        threshold (usage shows the windows and the pause), as `/hangar resume`: the pause
        stays lifted until that usage resets. Needs scope operate."""
        return await ask(ctx, f"/api/jobs/{job_id}/resume", {})

    @tool(annotations=ADDS)
    async def request_land(job_id: JobId, pr: PrNumber = None,
                           ctx: Context | None = None) -> Result:
        """Ask hangar to land a job's pull request, as `/hangar land`. hangar brings the
        branch up to date, waits for the required checks on the exact head, and merges
        once a person with write access approves that head in GitHub. No tool can
        approve: when land_status says awaiting_approval, tell the user to review the PR.
        Returns land (the id for land_status). Needs scope land."""
        return await ask(ctx, "/api/land", {"job": job_id, "pr": pr})

    @tool(annotations=READS)
    async def land_status(land_id: LandId, wait_seconds: WaitSeconds = 0, after: After = None,
                          ctx: Context | None = None) -> Result:
        """A land request: state (queued, updating, waiting_ci, awaiting_approval,
        merging, landed, conflict, ci_failed, rejected, cancelled, failed), the reason,
        its history and what it awaits. With wait_seconds (at most 120) it returns as
        soon as it changes after `after` (the seq of your last answer). Needs scope read."""
        return await call(ctx, "GET", f"/api/land/{land_id}",
                          query={"wait_seconds": min(max(wait_seconds, 0), MAX_WAIT_S),
                                 "after": after})

    @tool(annotations=READS)
    async def list_land(repo: ListRepo = None, state: LandStateName = None,
                        ctx: Context | None = None) -> Result:
        """Land requests (id, repo, pr_number, state, reason), optionally of one
        repository (owner/name) or in one state. Needs scope read."""
        return {"land": await call(ctx, "GET", "/api/land",
                                   query={"repo": repo, "state": state})}

    @tool(annotations=ENDS)
    async def cancel_land(land_id: LandId, ctx: Context | None = None) -> Result:
        """Withdraw a land request, as `/hangar land cancel`. Needs scope land."""
        return await ask(ctx, f"/api/land/{land_id}/cancel", {})

    @tool(annotations=READS)
    async def usage(ctx: Context | None = None) -> Result:
        """Per model credential: agents running and queued against the concurrency cap,
        turns and their cost so far, the usage windows the model reported (utilization
        0..1 and reset), and `paused` when new agents wait for the usage to reset (resume
        lifts it). Check it before starting many attempts. Needs scope read."""
        return await call(ctx, "GET", "/api/usage")

    @tool(annotations=READS)
    async def list_jobs(repo: ListRepo = None, ctx: Context | None = None) -> Result:
        """Jobs (id, repo, issue, state, attempts), oldest first, optionally of one
        repository (owner/name). Needs scope read."""
        return {"jobs": await call(ctx, "GET", "/api/jobs", query={"repo": repo})}

    @tool(annotations=READS)
    async def get_run(run_id: RunId, ctx: Context | None = None) -> Result:
        """One run (an agent turn or a verification): commits and diff from GitHub,
        the PR, verification, and the agent's own summary (a claim, unverified).
        Needs scope read."""
        return await call(ctx, "GET", f"/api/runs/{run_id}")

    return Server(name="hangar", instructions=INSTRUCTIONS, tools=tools)


ToolFunction = TypeVar("ToolFunction", bound=Callable[..., Any])
# What the SDK reads from a tool's signature (its argument model and JSON schemas, a few
# milliseconds of pydantic per tool) is the same for every server a process builds: each
# web application builds one (tests build dozens), so it is read once per tool.
_TOOL_SHAPES: dict[CodeType, Tool] = {}


def tool_of(fn: ToolFunction, annotations: ToolAnnotations) -> Tool:
    """The SDK's tool for `fn`, its signature's models read at most once per process."""
    shape = _TOOL_SHAPES.get(fn.__code__)
    if shape is None or shape.annotations != annotations:
        shape = _TOOL_SHAPES[fn.__code__] = Tool.from_function(fn, annotations=annotations)
    return shape.model_copy(update={"fn": fn})


# -- streamable HTTP at /mcp, on hangar's own port ---------------------------------------

def own_url(app: web.Application) -> str:
    settings = app[SETTINGS]
    host = settings.host if settings.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
    return f"http://{host}:{settings.port}"


def http_transport(app: web.Application) -> tuple[MCPServer, Any]:
    """The server behind /mcp (app.web.mcp_http) and its ASGI transport. Each tool call
    goes to this hangar's API with the token of the HTTP request that carried it: one
    place checks scopes, and a session never outlives or widens its token (stateless: no
    session ids to steal)."""

    def api_for(ctx: Context | None) -> HangarAPI:
        headers = (ctx.headers if ctx is not None else None) or {}
        authorization = headers.get("authorization") or headers.get("Authorization") or ""
        return HangarAPI(own_url(app), authorization.partition(" ")[2].strip())

    server = build_server(api_for)
    asgi = server.streamable_http_app(
        streamable_http_path="/mcp", stateless_http=True, json_response=True,
        # hangar checks the bearer token itself; a Host check would refuse a proxy's name.
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
    return server, asgi


async def serve_asgi(asgi: Any, request: web.Request, body: bytes) -> web.StreamResponse:
    """Answer an aiohttp request with an ASGI application (the SDK's transport)."""
    finished = asyncio.Event()
    response: web.StreamResponse | None = None
    sent_body = False

    async def receive() -> Result:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": body, "more_body": False}
        await finished.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        nonlocal response
        if message["type"] == "http.response.start":
            response = web.StreamResponse(status=message["status"])
            for name, value in message.get("headers", []):
                response.headers.add(name.decode("latin-1"), value.decode("latin-1"))
            await response.prepare(request)
        elif message["type"] == "http.response.body" and response is not None:
            await response.write(message.get("body", b""))
            if not message.get("more_body", False):
                await response.write_eof()

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
        "method": request.method, "scheme": request.scheme, "path": request.path,
        "raw_path": request.raw_path.split("?")[0].encode(), "root_path": "",
        "query_string": request.query_string.encode(),
        "headers": [(k.lower(), v) for k, v in request.raw_headers],
        "client": (request.remote or "", 0), "server": None, "state": {},
    }
    try:
        await asgi(scope, receive, send)
    finally:
        finished.set()
    if response is None:
        raise web.HTTPInternalServerError(text="the MCP transport gave no answer")
    return response


# -- stdio ---------------------------------------------------------------------------------


def main() -> int:
    url = os.environ.get("HANGAR_API_URL", "http://127.0.0.1:8787")
    token = os.environ.get("HANGAR_API_TOKEN")
    if not token:
        print("hangar mcp: set HANGAR_API_TOKEN to a hangar token (`hangar token create NAME "
              "--scope read,operate,land`) and HANGAR_API_URL to hangar's address",
              file=sys.stderr)
        return 2
    api = HangarAPI(url, token)
    build_server(lambda _ctx: api).run("stdio")
    return 0
