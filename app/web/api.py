"""The REST API for scripts and orchestrators: what a person does with `/hangar` on GitHub.

Every route is declared once in `ROUTES` with the scope it needs; the declaration drives
the enforcement (401 without a known token, 403 naming a missing scope), the body and
query validation (422 with the reason), the audit trail (every call that changes
something: who, what, when) and the OpenAPI description at `/api/openapi.json`.

Work asked for here goes through the same rows as a `/hangar` comment: each call that
acts records an intent the engine takes exactly as it takes a comment's, so the same
rules answer. No call approves anything; landing still needs a person's review.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from gidgethub import BadRequest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app import envbuilds, fanout, render
from app.changes import Change, Changes
from app.commands import job_id_for
from app.engine import Engine
from app.github.client import get_or_none
from app.landing import LandRequest, land_id
from app.models import Intent, IntentState, Job, Run, RunKind, Thread
from app.redact import redact_data
from app.runs import credential_key, usage_report
from app.web import access
from app.web.access import Principal, Scope
from app.web.keys import ENGINE, SETTINGS, STORE

CHANGES = web.AppKey("changes", Changes)
MAX_WAIT_S = 120.0
HEARTBEAT_S = 15.0
RUN_HIDDEN = {"env", "watch", "sandbox"}


# -- bodies and queries ------------------------------------------------------------------


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StartJob(Body):
    """Work on an issue, as `/hangar <prompt>` (attempts 1) or `/hangar try N <prompt>`."""

    repo: str = Field(pattern=r"^[\w.-]+/[\w.-]+$", description="owner/name")
    issue: int = Field(ge=1, description="the issue's number")
    prompt: str = Field(min_length=1, max_length=8000,
                        description="what the agents are asked to do, as after `/hangar`")
    attempts: int = Field(1, ge=1, le=10, description="N attempts, ranked (`/hangar try N`)")
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"repo": "acme/widgets", "issue": 7, "prompt": "fix the failing test", "attempts": 3}]})


class FollowUp(Body):
    """A follow-up turn on one of the job's pull requests, as `/hangar <prompt>` there."""

    prompt: str = Field(min_length=1, max_length=8000,
                        description="what the agent is asked to do in this turn")
    pr: int | None = Field(None, ge=1, description="which PR; may be left out when the job "
                                                    "has one PR or a picked attempt")
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"prompt": "also cover the empty list", "pr": 12}]})


class PrChoice(Body):
    """Which of the job's pull requests."""

    pr: int | None = Field(None, ge=1, description="may be left out when the job has one PR "
                                                    "or a picked attempt")
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"pr": 12}]})


class Pick(Body):
    """Keep one attempt of `try N`, as `/hangar pick N`: the others' PRs are closed."""

    attempt: int = Field(ge=1, le=10, description="the attempt's number in the ranking")
    force: bool = Field(False, description="keep it even if the ranking calls it ineligible")
    land: bool = Field(False, description="then ask to land its PR, as `/hangar land` there "
                                          "(needs the land scope too)")
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"attempt": 2}, {"attempt": 2, "land": True}]})


class LandAsk(Body):
    """Ask hangar to land a job's pull request, as `/hangar land` there."""

    job: str = Field(min_length=1, max_length=100)
    pr: int | None = Field(None, ge=1)
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"job": "job-1a2b3c4d", "pr": 12}]})


class NewToken(Body):
    """A named token; its secret is in the answer, once."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,62}$")
    scopes: list[Scope] = Field(min_length=1)
    login: str | None = Field(None, description="the GitHub login whose asks these are: "
                              "their approval then does not count for the work it starts")
    repos: list[str] | None = Field(None, description="the repositories (owner/name) the "
                                    "token reaches; absent: every one")
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"name": "orchestrator", "scopes": ["read", "operate", "land"]}]})


class Query(BaseModel):
    model_config = ConfigDict(extra="forbid")


class JobsQuery(Query):
    repo: str | None = Field(None, description="only this repository (owner/name)")


class WaitQuery(Query):
    after: int | None = Field(None, ge=0, description="a `seq` from an earlier answer: wait "
                                                      "for a change after it")
    wait_seconds: float = Field(0, ge=0, le=MAX_WAIT_S, description="return as soon as "
                                "something changes, or after this long")


class RankQuery(Query):
    runs: str = Field(description="the runs' ids, comma-separated: 2 to 10 agent turns an "
                                  "orchestrator started by hand, each finished")


class LandQuery(Query):
    repo: str | None = Field(None, description="only this repository (owner/name)")
    state: str | None = Field(None, description="only requests in this state, e.g. "
                                                "awaiting_approval, conflict, landed")


class AuditQuery(Query):
    after: int = Field(0, ge=0)
    limit: int = Field(200, ge=1, le=1000)


class EventsQuery(Query):
    after: int | None = Field(None, ge=0, description="replay changes after this seq "
                                                      "(or send Last-Event-ID)")
    job: str | None = Field(None, description="only changes of this job")


# -- routes, declared once ---------------------------------------------------------------


@dataclass
class Call:
    """One authorised request: who asks, the validated body and query, hangar's parts."""

    request: web.Request
    principal: Principal
    body: Any
    query: Any
    audit_target: str | None = None
    audit_detail: str | None = None
    audited: bool = False  # the handler's own module wrote the audit entry

    @property
    def engine(self) -> Engine:
        return self.request.app[ENGINE]

    @property
    def store(self):
        return self.engine.store

    @property
    def changes(self) -> Changes:
        return self.request.app[CHANGES]

    def param(self, name: str) -> str:
        return self.request.match_info[name]


Handler = Callable[[Call], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    scope: Scope | None  # None: no token needed (the description itself)
    summary: str
    handler: Handler
    body: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    action: str | None = None  # what the audit trail calls a successful call
    success: int = 200  # the status of a successful answer


ROUTES: list[Route] = []


def route(method: str, path: str, scope: Scope | None, summary: str, *,
          body: type[BaseModel] | None = None, query: type[BaseModel] | None = None,
          action: str | None = None, success: int = 200) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        if method != "GET" and action is None:
            raise ValueError(f"{method} {path} changes something: give it an audit action")
        ROUTES.append(Route(method, path, scope, summary, handler, body, query, action,
                            success))
        return handler
    return register


class ApiError(web.HTTPException):
    """An answer with a JSON body: {"error": sentence, ...extra}."""

    def __init__(self, status: int, message: str, *, challenge: str | None = None,
                 **extra: Any):
        self.status_code = status
        # RFC 6750: a bearer challenge on 401, and on 403 the scope a client must step up to.
        headers = {"WWW-Authenticate": challenge} if challenge else None
        super().__init__(headers=headers, text=json.dumps({"error": message, **extra}),
                         content_type="application/json")


def setup(app: web.Application) -> None:
    app.cleanup_ctx.append(_changes)
    for r in ROUTES:
        app.router.add_route(r.method, r.path, _guarded(r))


async def _changes(app: web.Application) -> AsyncIterator[None]:
    changes = Changes(asyncio.get_running_loop())
    app[CHANGES] = changes
    app[STORE].listeners.append(changes.record)
    app.on_shutdown.append(lambda _app: _close(changes))
    yield
    changes.close()
    app[STORE].listeners.remove(changes.record)


async def _close(changes: Changes) -> None:
    changes.close()


def caller(request: web.Request) -> Principal:
    """The token behind this request; 503 while the API is off, 401 for no or a bad token."""
    settings, store = request.app[SETTINGS], request.app[STORE]
    if not access.api_enabled(store, settings):
        raise ApiError(503, "the API is off: set HANGAR_API_TOKEN to a long random string, or "
                            "make a token with `hangar token create NAME --scope read,operate`")
    principal = access.authenticate(store, settings, request.headers.get("Authorization", ""))
    if principal is None:
        raise ApiError(401, "send Authorization: Bearer <token> with a live hangar token "
                            "(HANGAR_API_TOKEN or one made by `hangar token create`)",
                       challenge='Bearer realm="hangar"')
    return principal


def require(principal: Principal, scope: Scope) -> None:
    if not principal.allows(scope):
        raise ApiError(403, f"token {principal.name!r} lacks the {scope!r} scope this call "
                            f"needs ({access.SCOPE_MEANING[scope]}); it has "
                            f"{', '.join(sorted(principal.scopes))}", scope=scope,
                       challenge=f'Bearer realm="hangar", error="insufficient_scope", '
                                 f'scope="{scope}"')


def _guarded(r: Route) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handle(request: web.Request) -> web.StreamResponse:
        principal = Principal("anonymous", frozenset())
        if r.scope is not None:
            principal = caller(request)
            require(principal, r.scope)
        call = Call(request, principal, await _body(request, r.body), _query(request, r.query))
        response = await r.handler(call)
        if r.action is not None and response.status < 400 and not call.audited:
            call.store.audit(principal.who, r.action, call.audit_target or request.path,
                             call.audit_detail)
        return response

    handle.__name__ = r.handler.__name__
    return handle


async def _body(request: web.Request, model: type[BaseModel] | None) -> Any:
    if model is None:
        return None
    raw = await request.read()
    try:
        return model.model_validate_json(raw or b"{}")
    except ValidationError as exc:
        raise ApiError(422, f"send JSON that fits {model.__name__} (/api/openapi.json "
                            f"describes it): {_reasons(exc)}",
                       details=json.loads(exc.json(include_url=False, include_input=False))
                       ) from None
    except RecursionError:  # too deep for the parser
        raise ApiError(422, "send JSON nested less deeply: the body exceeds the recursion "
                            "limit") from None


def _query(request: web.Request, model: type[BaseModel] | None) -> Any:
    if model is None:
        return None
    try:
        return model.model_validate(dict(request.query))
    except ValidationError as exc:
        raise ApiError(422, f"the query does not fit: {_reasons(exc)}") from None


def _reasons(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}"
                     for e in exc.errors())


def ok(data: Any, status: int = 200) -> web.Response:
    # An answer carries others' words (an agent's, git's): masked of every secret.
    return web.json_response(redact_data(data), status=status)


# -- reading -----------------------------------------------------------------------------


def run_view(run: Run) -> dict:
    return run.model_dump(mode="json", exclude=RUN_HIDDEN)


def job_view(engine, job: Job) -> dict:
    runs = engine.runs_of(job.id)
    prs = sorted({r.pr_number for r in runs if r.pr_number})
    lands = [engine.store.get("land", land_id(job.thread.repo, n), LandRequest) for n in prs]
    return {
        "job": job.model_dump(mode="json", exclude={"rendered"}),
        "runs": [run_view(r) for r in runs],
        "prs": prs,
        "land_requests": [land_view(r) for r in lands if r is not None],
        "timeline": [{"at": at, "what": what} for at, what in engine.store.notes(job.id)],
    }


def ranking_view(engine, job: Job) -> dict:
    """The attempts of `try N`: the ranking once every attempt finished, else their states."""
    latest = render.latest_turns(engine.runs_of(job.id))
    attempts = [{
        "attempt": r.attempt, "run": r.id, "state": r.state.value, "stage": r.stage.value,
        "finished": r.finished, "pr": r.pr_number, "head_sha": r.head_sha,
        "verified": None if r.verification is None else r.verification.passed,
    } for r in sorted(latest, key=lambda r: r.attempt)]
    return {"job": job.id, "attempts_asked": job.attempts, "final": bool(job.ranking),
            "ranking": job.ranking, "winner": job.winner, "attempts": attempts,
            "grading": job.grading or None}


def land_view(request: LandRequest) -> dict:
    view = request.model_dump(mode="json", exclude={"shown", "explained", "version", "due_at"})
    view["awaiting"] = ("a person's approving review of the head on GitHub; no API call can "
                        "approve" if request.state == "awaiting_approval" else None)
    return view


def usage_view(runs: list[Run], max_agents: int, report: dict[str, dict] | None = None) -> dict:
    """Per model credential: agents running and queued against the cap, turns and the sum
    of their own costs (a turn whose price is unknown is counted, not priced), the last
    rate-limit report an agent gave, and from the ledger (`report`, app.runs.usage_report)
    its usage windows and its pause."""
    out: dict[str, dict] = {}

    def entry(credential: str) -> dict:
        return out.setdefault(credential, {
            "running": 0, "queued": 0, "max_concurrent": max_agents, "turns": 0,
            "agent_turns": 0, "cost_usd": 0.0, "cost_unknown_turns": 0,
            "input_tokens": 0, "output_tokens": 0, "rate_limit": None,
            "windows": [], "paused": None, "resumed": None})

    for run in sorted(runs, key=lambda r: r.started_at or r.queued_at):
        if run.kind == RunKind.VERIFY:
            continue
        u = entry(credential_key(run))
        if not run.finished and run.state.value in ("running", "queued"):
            u[run.state.value] += 1
        if run.started_at is not None:
            u["turns"] += 1
        u["agent_turns"] += run.agent.get("turns") or 0
        cost = run.agent.get("cost_usd")
        if isinstance(cost, int | float):
            u["cost_usd"] = round(u["cost_usd"] + cost, 6)
        elif run.agent.get("input_tokens") or run.agent.get("output_tokens"):
            u["cost_unknown_turns"] += 1
        u["input_tokens"] += run.agent.get("input_tokens") or 0
        u["output_tokens"] += run.agent.get("output_tokens") or 0
        if run.agent.get("rate_limit"):
            u["rate_limit"] = run.agent["rate_limit"]
    for credential, usage in (report or {}).items():
        entry(credential).update(usage)
    return {"credentials": out}


def _job(call: Call, name: str = "job_id") -> Job:
    job = call.engine.get_job(call.param(name) if name == "job_id" else name)
    if job is None:
        raise ApiError(404, "no job with this id (a job just asked for appears within a "
                            "second; GET /api/intents/{id} says what became of the ask)")
    _reach(call, job.thread.repo)
    return job


def _reach(call: Call, repo: str) -> None:
    """A token limited to repositories reaches only theirs."""
    if not call.principal.reaches(repo):
        raise ApiError(403, f"token {call.principal.name!r} reaches only "
                            f"{', '.join(sorted(call.principal.repos or ()))}, not {repo}")


def _reaches_everything(call: Call) -> None:
    if call.principal.repos is not None:
        raise ApiError(403, f"token {call.principal.name!r} is limited to repositories, and "
                            "this spans every repository; use a token without --repo")


async def _wait(call: Call, match: Callable[[Change], bool]) -> int:
    """Wait as the query asks; the seq to read rows at (read before the rows)."""
    q: WaitQuery = call.query
    seq = call.changes.seq
    if q.wait_seconds > 0:
        after = seq if q.after is None else q.after
        if not call.changes.missed(after):
            await call.changes.wait(after, match, q.wait_seconds)
        seq = call.changes.seq
    return seq


@route("GET", "/api/jobs", "read", "Jobs, oldest first", query=JobsQuery)
async def list_jobs(call: Call) -> web.Response:
    repo = call.query.repo
    return ok([
        {"id": j.id, "repo": j.thread.repo, "issue": j.thread.number, "state": j.state,
         "attempts": j.attempts, "requested_by": j.requested_by, "created_at": j.created_at}
        for j in call.store.all("job", Job)
        if (repo is None or j.thread.repo == repo) and call.principal.reaches(j.thread.repo)
    ])


@route("GET", "/api/jobs/{job_id}", "read",
       "A job: its runs, PRs, land requests and timeline; can wait for a change",
       query=WaitQuery)
async def get_job(call: Call) -> web.Response:
    job_id = _job(call).id
    seq = await _wait(call, lambda c: c.job == job_id)
    return ok({"seq": seq, **job_view(call.engine, _job(call))})


@route("GET", "/api/jobs/{job_id}/ranking", "read",
       "The ranking of a fan-out (`try N`); can wait until it is final", query=WaitQuery)
async def get_ranking(call: Call) -> web.Response:
    job = _job(call)
    seq = call.changes.seq
    if not job.ranking and call.query.wait_seconds > 0:
        deadline = asyncio.get_running_loop().time() + call.query.wait_seconds
        after = seq if call.query.after is None else call.query.after
        # Woken by each change of this job; done when the ranking is there.
        while not (job := _job(call)).ranking:
            left = deadline - asyncio.get_running_loop().time()
            found = await call.changes.wait(after, lambda c: c.job == job.id, left)
            if not found:
                break
            after = found[-1].seq
        seq = call.changes.seq
    return ok({"seq": seq, **ranking_view(call.engine, _job(call))})


@route("GET", "/api/rank", "read",
       "Rank runs started by hand by the rules that rank `try N`'s attempts: best first, "
       "each with `eligible`, the gates it failed and why", query=RankQuery)
async def rank_runs(call: Call) -> web.Response:
    ids = list(dict.fromkeys(r.strip() for r in call.query.runs.split(",") if r.strip()))
    if not 2 <= len(ids) <= 10:
        raise ApiError(422, "runs: give 2 to 10 run ids, comma-separated")
    runs = []
    for n, run_id in enumerate(ids, start=1):
        run = call.engine.get_run(run_id)
        if run is None:
            raise ApiError(404, f"no run {run_id}")
        if run.kind == RunKind.VERIFY:
            raise ApiError(422, f"{run_id} is a verification, not an agent's turn")
        if not run.finished:
            raise ApiError(409, f"{run_id} has not finished; rank it once it has")
        runs.append(run.model_copy(update={"attempt": n}))  # its place in the list
    return ok({"ranking": await fanout.ranking_of(call.engine, runs)})


@route("GET", "/api/runs/{run_id}", "read", "One run: branch, PR, head, verification, agent")
async def get_run(call: Call) -> web.Response:
    run = call.engine.get_run(call.param("run_id"))
    if run is None:
        raise ApiError(404, "no run with this id")
    _job(call, run.job_id)
    return ok(run_view(run))


@route("GET", "/api/intents/{intent_id}", "read",
       "What became of an ask (state new → done, and the outcome); can wait for it",
       query=WaitQuery)
async def get_intent(call: Call) -> web.Response:
    intent_id = call.param("intent_id")
    seq = call.changes.seq  # before the read: a change after it wakes the wait below
    intent = call.store.get("intent", intent_id, Intent)
    if intent is None:
        raise ApiError(404, "no intent with this id")
    _reach(call, intent.thread.repo)
    q: WaitQuery = call.query
    if intent.state != IntentState.DONE and q.wait_seconds > 0:
        await call.changes.wait(seq if q.after is None else q.after,
                                lambda c: c.id == intent_id and c.state == "done",
                                q.wait_seconds)
        intent = call.store.get("intent", intent_id, Intent)
    return ok({"id": intent.id, "command": intent.command, "state": intent.state,
               "outcome": intent.outcome, "thread": intent.thread.model_dump(),
               "created_at": intent.created_at})


@route("GET", "/api/land", "read", "Land requests", query=LandQuery)
async def list_land(call: Call) -> web.Response:
    q = call.query
    return ok([land_view(r) for r in call.store.all("land", LandRequest)
               if (q.repo is None or r.repo == q.repo) and (q.state is None or r.state == q.state)
               and call.principal.reaches(r.repo)])


@route("GET", "/api/land/{land_id}", "read",
       "A land request: state, reason, history; can wait for a change", query=WaitQuery)
async def get_land(call: Call) -> web.Response:
    land_id = call.param("land_id")
    request = call.store.get("land", land_id, LandRequest)
    if request is None:
        raise ApiError(404, "no land request with this id")
    _reach(call, request.repo)
    seq = await _wait(call, lambda c: c.kind == "land" and c.id == land_id)
    return ok({"seq": seq, **land_view(call.store.get("land", land_id, LandRequest))})


@route("GET", "/api/usage", "read",
       "Per model credential: agents running and queued against the cap, turns, their "
       "cost, the usage windows the model reported and whether new agents are paused")
async def get_usage(call: Call) -> web.Response:
    _reaches_everything(call)
    return ok(usage_view(call.store.all("run", Run), call.engine.settings.max_concurrent_agents,
                         usage_report(call.engine)))


@route("GET", "/api/events", "read",
       "A server-sent-events stream of changes (event `change`, id = seq); resumes after "
       "Last-Event-ID", query=EventsQuery)
async def events(call: Call) -> web.StreamResponse:
    q: EventsQuery = call.query
    last = call.request.headers.get("Last-Event-ID", "")
    after = q.after if q.after is not None else int(last) if last.isdigit() else call.changes.seq
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache"})
    await response.prepare(call.request)
    changes = call.changes

    repos: dict[str, str | None] = {}  # job id → its repository, for a limited token

    def reached(job_id: str | None) -> bool:
        if call.principal.repos is None:
            return True
        if job_id is None:
            return False
        if job_id not in repos:
            job = call.engine.get_job(job_id)
            repos[job_id] = job.thread.repo if job else None
        return repos[job_id] is not None and call.principal.reaches(repos[job_id])

    def match(c: Change) -> bool:
        return (q.job is None or c.job == q.job) and reached(c.job)

    try:
        if changes.missed(after):
            await response.write(f"event: missed\ndata: {json.dumps({'after': after})}\n\n"
                                 .encode())
        await response.write(b": hangar changes\n\n")
        while not changes.closed:
            found = await changes.wait(after, match, HEARTBEAT_S)
            if not found:
                await response.write(b": keep-alive\n\n")
                continue
            for change in found:
                await response.write(f"id: {change.seq}\nevent: change\n"
                                     f"data: {json.dumps(change.as_dict())}\n\n".encode())
            after = found[-1].seq
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    return response


# -- acting: each records the intent a `/hangar` comment would -----------------------------


def _ask(call: Call, job: Job, command: str, *, pr: int | None, args: dict | None = None,
         extra: dict | None = None) -> web.Response:
    """Record the intent for `command` on the job's issue (pr None) or one of its PRs."""
    thread = job.thread if pr is None else Thread(
        repo=job.thread.repo, number=pr, installation_id=job.thread.installation_id, is_pr=True)
    intent = Intent(id=f"api-{uuid.uuid4().hex[:12]}", thread=thread, comment_id=0,
                    author=call.principal.asker, author_type="Api", command=command,
                    args={**(args or {}), "job": job.id})
    call.engine.save_intent(intent)
    call.engine.wake()
    call.audit_target = f"{job.id}" + (f" #{pr}" if pr else "")
    call.audit_detail = f"intent {intent.id}"
    return ok({"intent": intent.id, "job": job.id, "pr": pr, **(extra or {})}, status=202)


def _pr_of(call: Call, job: Job, pr: int | None) -> int:
    """The PR a call means: the one given (it must be the job's), else the only one or the
    picked attempt's."""
    runs = call.engine.runs_of(job.id)
    prs = sorted({r.pr_number for r in runs if r.pr_number})
    if pr is not None:
        if pr not in prs:
            raise ApiError(422, f"#{pr} is not a pull request of {job.id}; its PRs: "
                                f"{', '.join(f'#{n}' for n in prs) or 'none yet'}")
        return pr
    if len(prs) == 1:
        return prs[0]
    picked = [r.pr_number for r in runs if r.attempt == job.winner and r.pr_number]
    if picked:
        return picked[0]
    raise ApiError(422, f"{job.id} has {len(prs) or 'no'} pull requests"
                        + (f" ({', '.join(f'#{n}' for n in prs)}): say which with `pr`, or "
                           "pick an attempt first" if prs else " yet; wait for one"))


@route("POST", "/api/jobs", "operate",
       "Work on an issue, as `/hangar <prompt>` or `/hangar try N <prompt>`",
       body=StartJob, action="job.start", success=202)
async def start_job(call: Call) -> web.Response:
    body: StartJob = call.body
    _reach(call, body.repo)
    auth = call.engine.auth
    installation = await get_or_none(await auth.client_for_app(),
                                     f"/repos/{body.repo}/installation", jwt=auth.jwt())
    if installation is None:
        raise ApiError(404, f"the App is not installed on {body.repo}")
    gh = await auth.client(installation["id"])
    try:
        repo = await gh.getitem(f"/repos/{body.repo}")
        issue = await gh.getitem(f"/repos/{body.repo}/issues/{body.issue}")
    except BadRequest as exc:
        raise ApiError(404, f"{body.repo}#{body.issue}: {exc}") from None
    if issue.get("pull_request"):
        raise ApiError(422, "give an issue number; a follow-up turn on a hangar PR is "
                            "POST /api/jobs/{job_id}/turns")
    intent = Intent(
        id=f"api-{uuid.uuid4().hex[:12]}", comment_id=0, author=call.principal.asker,
        author_type="Api",
        thread=Thread(repo=body.repo, number=body.issue, installation_id=installation["id"]),
        command="run" if body.attempts == 1 else "try",
        args={"prompt": body.prompt, "n": body.attempts},
        title=issue.get("title") or "", body=issue.get("body") or "",
        clone_url=repo["clone_url"], default_branch=repo["default_branch"],
    )
    call.engine.save_intent(intent)
    call.engine.wake()
    job_id = job_id_for(intent.id)
    call.audit_target = f"{body.repo}#{body.issue} {job_id}"
    call.audit_detail = f"attempts {body.attempts}"
    return ok({"job": job_id, "intent": intent.id}, status=202)


@route("POST", "/api/jobs/{job_id}/turns", "operate",
       "A follow-up turn on one of the job's PRs, as `/hangar <prompt>` there",
       body=FollowUp, action="job.follow_up", success=202)
async def follow_up(call: Call) -> web.Response:
    job = _job(call)
    return _ask(call, job, "run", pr=_pr_of(call, job, call.body.pr),
                args={"prompt": call.body.prompt})


@route("POST", "/api/jobs/{job_id}/verify", "operate",
       "Verify a PR's head again in a clean sandbox, as `/hangar verify`",
       body=PrChoice, action="job.verify", success=202)
async def verify_again(call: Call) -> web.Response:
    job = _job(call)
    return _ask(call, job, "verify", pr=_pr_of(call, job, call.body.pr))


@route("POST", "/api/jobs/{job_id}/pick", "operate",
       "Keep one attempt of `try N`, as `/hangar pick N`", body=Pick, action="job.pick",
       success=202)
async def pick(call: Call) -> web.Response:
    if call.body.land:
        require(call.principal, "land")  # a pick that lands is a land request too
    job = _job(call)
    if job.attempts < 2:
        raise ApiError(422, f"{job.id} has one attempt; pick chooses among the attempts of "
                            "a job started with attempts ≥ 2")
    if call.body.attempt > job.attempts:
        raise ApiError(422, f"{job.id} has attempts 1 to {job.attempts}")
    return _ask(call, job, "pick", pr=None, args={
        "n": call.body.attempt, "force": call.body.force, "land": call.body.land})


@route("POST", "/api/jobs/{job_id}/resolve", "operate",
       "A turn on one of the job's PRs that merges the base and resolves the conflicts, as "
       "`/hangar resolve` there; its head is verified again", body=PrChoice,
       action="job.resolve", success=202)
async def resolve_conflicts(call: Call) -> web.Response:
    job = _job(call)
    return _ask(call, job, "resolve", pr=_pr_of(call, job, call.body.pr), args={})


@route("POST", "/api/jobs/{job_id}/cancel", "operate",
       "Stop the job's queued and running agents, as `/hangar cancel`", action="job.cancel",
       success=202)
async def cancel_job(call: Call) -> web.Response:
    return _ask(call, _job(call), "cancel", pr=None)


@route("POST", "/api/jobs/{job_id}/resume", "operate",
       "Start the job's agents that the model's usage paused, as `/hangar resume`: the "
       "pause stays lifted until that usage resets", action="job.resume", success=202)
async def resume_job(call: Call) -> web.Response:
    return _ask(call, _job(call), "resume", pr=None)


@route("POST", "/api/land", "land",
       "Ask hangar to land a job's PR, as `/hangar land`: it lands once a person approves "
       "the head on GitHub and the required checks pass", body=LandAsk, action="land.request",
       success=202)
async def request_land(call: Call) -> web.Response:
    job = _job(call, call.body.job)
    pr = _pr_of(call, job, call.body.pr)
    return _ask(call, job, "land", pr=pr, args={"ack_sensitive": False},
                extra={"land": land_id(job.thread.repo, pr)})


@route("POST", "/api/land/{land_id}/cancel", "land",
       "Withdraw a land request, as `/hangar land cancel`", action="land.cancel", success=202)
async def cancel_land(call: Call) -> web.Response:
    request = call.store.get("land", call.param("land_id"), LandRequest)
    if request is None:
        raise ApiError(404, "no land request with this id")
    _reach(call, request.repo)
    job = call.engine.get_job(request.job_id)
    return _ask(call, job, "land_cancel", pr=request.pr_number, extra={"land": request.id})


# -- admin -------------------------------------------------------------------------------


@route("GET", "/api/tokens", "admin", "Named tokens (never their secrets)")
async def list_tokens(call: Call) -> web.Response:
    return ok([t.model_dump(mode="json", exclude={"token_hash"})
               for t in access.list_tokens(call.store)])


@route("POST", "/api/tokens", "admin", "Make a named token; its secret is answered once",
       body=NewToken, action="token.create", success=201)
async def create_token(call: Call) -> web.Response:
    try:
        secret = access.create_token(call.store, call.body.name, call.body.scopes,
                                     who=call.principal.who, login=call.body.login,
                                     repos=call.body.repos)
    except access.AccessError as exc:
        raise ApiError(409, str(exc)) from None
    call.audited = True  # by access.create_token, as from the CLI
    # The one answer that carries a secret, once, to the admin who asked for it: not masked.
    return web.json_response({"name": call.body.name, "scopes": call.body.scopes,
                              "login": call.body.login, "repos": call.body.repos,
                              "token": secret}, status=201)


@route("DELETE", "/api/tokens/{name}", "admin", "Revoke a named token", action="token.revoke")
async def revoke_token(call: Call) -> web.Response:
    try:
        token = access.revoke_token(call.store, call.param("name"), who=call.principal.who)
    except access.AccessError as exc:
        raise ApiError(404, str(exc)) from None
    call.audited = True
    return ok({"name": token.name, "revoked_at": token.revoked_at})


@route("GET", "/api/audit", "admin",
       "Who changed what, when: every API call that acted, and token changes from the CLI",
       query=AuditQuery)
async def audit_trail(call: Call) -> web.Response:
    return ok(call.store.audit_trail(after=call.query.after, limit=call.query.limit))


@route("GET", "/api/envs/{owner}/{repo}/builds", "admin",
       "A repository's environment builds per lane: versions, the active one, the pin")
async def env_builds(call: Call) -> web.Response:
    repo = f"{call.param('owner')}/{call.param('repo')}"
    lanes = []
    for lid in envbuilds.lanes_of(call.store, repo):
        current = envbuilds.active(call.store, lid)
        lanes.append({
            "lane": lid, "pinned": envbuilds.lane(call.store, lid).pinned_id,
            "active": current.id if current else None,
            "builds": [b.model_dump(mode="json", exclude={"log_tail"})
                       for b in envbuilds.history(call.store, lid)],
        })
    return ok({"repo": repo, "lanes": lanes})


@route("POST", "/api/envs/builds/{build_id}/rollback", "admin",
       "Make a build that succeeded the active one, pinned (as `hangar env rollback`)",
       action="env.rollback")
async def env_rollback(call: Call) -> web.Response:
    try:
        envbuilds.find(call.store, call.param("build_id"))
    except envbuilds.BuildError as exc:
        raise ApiError(404, str(exc)) from None
    try:
        row = envbuilds.rollback(call.store, call.param("build_id"), who=call.principal.who)
    except envbuilds.BuildError as exc:  # it did not succeed: nothing to roll back to
        raise ApiError(409, str(exc)) from None
    call.audited = True  # by envbuilds.rollback, as from the CLI
    call.audit_target = f"{row.repo} {row.id} v{row.version}"
    return ok({"repo": row.repo, "active": row.id, "version": row.version, "pinned": True})


@route("POST", "/api/envs/{owner}/{repo}/unpin", "admin",
       "Let new builds take over again in every lane of a repository (`hangar env unpin`)",
       action="env.unpin")
async def env_unpin(call: Call) -> web.Response:
    repo = f"{call.param('owner')}/{call.param('repo')}"
    released = envbuilds.unpin(call.store, repo, who=call.principal.who)
    call.audit_target = repo
    call.audited = True  # by envbuilds.unpin, as from the CLI
    return ok({"repo": repo, "unpinned": released})


@route("POST", "/api/envs/{owner}/{repo}/builds", "admin",
       "Build a repository's environment now, even after a failed build with the same key "
       "(`hangar env build-repo`); 202 with the queued build, or 200 when one is already "
       "queued or running", action="env.build", success=202)
async def env_build(call: Call) -> web.Response:
    repo = f"{call.param('owner')}/{call.param('repo')}"
    try:
        row = await envbuilds.request_build(call.engine, repo, who=call.principal.who)
    except envbuilds.BuildError as exc:
        raise ApiError(409, str(exc)) from None
    call.audit_target = repo
    call.audited = row is not None  # envbuilds.queue_build wrote env.build
    if row is None:
        return ok({"repo": repo, "queued": None,
                   "message": "a build of this repository is already queued or running"})
    return ok({"repo": repo, "queued": row.id, "version": row.version}, status=202)


@route("GET", "/api/envs/builds/{build_id}", "admin",
       "One environment build: its config, state and the end of its install output "
       "(`hangar env build-show`)")
async def env_build_show(call: Call) -> web.Response:
    try:
        row = envbuilds.find(call.store, call.param("build_id"))
    except envbuilds.BuildError as exc:
        raise ApiError(404, str(exc)) from None
    return ok(row.model_dump(mode="json"))


# -- the description ---------------------------------------------------------------------


@route("GET", "/api/openapi.json", None, "This description (no token needed)")
async def openapi_json(call: Call) -> web.Response:
    return ok(openapi())


def openapi() -> dict:
    """OpenAPI 3.1 from the route declarations and their pydantic models."""
    components: dict[str, Any] = {}

    def ref(model: type[BaseModel]) -> dict:
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(schema.pop("$defs", {}))
        components[model.__name__] = schema
        return {"$ref": f"#/components/schemas/{model.__name__}"}

    paths: dict[str, dict] = {}
    for r in ROUTES:
        op: dict[str, Any] = {
            "operationId": r.handler.__name__,
            "summary": r.summary,
            "description": (f"Needs scope `{r.scope}` ({access.SCOPE_MEANING[r.scope]})."
                            if r.scope else "Needs no token."),
            "x-hangar-scope": r.scope,
            "security": [{"bearer": [r.scope]}] if r.scope else [],
            "parameters": [
                {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
                for name in _path_params(r.path)
            ],
            "responses": _responses(r),
        }
        if r.query is not None:
            for name, schema in r.query.model_json_schema()["properties"].items():
                op["parameters"].append({"name": name, "in": "query", "required": False,
                                         "schema": schema})
        if r.body is not None:
            op["requestBody"] = {"required": True,
                                 "content": {"application/json": {"schema": ref(r.body)}}}
        paths.setdefault(r.path, {})[r.method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "hangar", "version": "1",
                 "description": "Work on GitHub issues with coding agents, through the same "
                                "rows and rules as `/hangar` comments. No call approves."},
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def _path_params(path: str) -> list[str]:
    return [part[1:-1] for part in path.split("/") if part.startswith("{")]


def _responses(r: Route) -> dict:
    error = {"content": {"application/json": {"schema": {
        "type": "object", "properties": {"error": {"type": "string"}}, "required": ["error"]}}}}
    answers: dict[str, Any] = {str(r.success): {
        "description": "accepted: the engine takes the intent" if r.success == 202 else "done"}}
    if r.scope is None:
        return answers
    answers["401"] = {"description": "no token or an unknown one", **error}
    answers["403"] = {"description": f"the token lacks scope {r.scope}", **error}
    answers["404"] = {"description": "no such row (or repository, issue); the reason", **error}
    if r.action in ("token.create", "env.rollback"):
        answers["409"] = {"description": "it cannot be done as things stand; the reason",
                          **error}
    if r.body is not None or r.query is not None:
        answers["422"] = {"description": "the body or query does not fit; the reason", **error}
    answers["503"] = {"description": "the API is off: no token is configured", **error}
    return answers
