"""One authorised call: every route is declared once with `route(...)` and the scope it
needs; the declaration drives the enforcement (401 without a known token, 403 naming a
missing scope), the body and query validation (422 with the reason) and the audit trail.
The helpers every resource shares live here too: which repositories a call may reach,
waiting for a change, and recording the intent an acting call asks for.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.changes import Change, Changes
from app.engine import Engine
from app.models import Intent, Job, Thread
from app.redact import public, redact_data
from app.web import access
from app.web.access import Principal, Scope
from app.web.keys import ENGINE, SETTINGS, STORE

CHANGES = web.AppKey("changes", Changes)
MAX_WAIT_S = 120.0


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Query(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WaitQuery(Query):
    after: int | None = Field(None, ge=0, description="a `seq` from an earlier answer: wait "
                                                      "for a change after it")
    wait_seconds: float = Field(0, ge=0, le=MAX_WAIT_S, description="return as soon as "
                                "something changes, or after this long")


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
    conflicts: bool = False  # may answer 409: it cannot be done as things stand


ROUTES: list[Route] = []


def route(method: str, path: str, scope: Scope | None, summary: str, *,
          body: type[BaseModel] | None = None, query: type[BaseModel] | None = None,
          action: str | None = None, success: int = 200, conflicts: bool = False,
          ) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        if method != "GET" and action is None:
            raise ValueError(f"{method} {path} changes something: give it an audit action")
        ROUTES.append(Route(method, path, scope, summary, handler, body, query, action,
                            success, conflicts))
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
    return web.json_response(redact_data(data, public), status=status)

def job_of(call: Call, name: str = "job_id") -> Job:
    job = call.engine.get_job(call.param(name) if name == "job_id" else name)
    if job is None:
        raise ApiError(404, "no job with this id (a job just asked for appears within a "
                            "second; GET /api/intents/{id} says what became of the ask)")
    reach(call, job.thread.repo)
    return job


def reach(call: Call, repo: str) -> None:
    """A token limited to repositories reaches only theirs."""
    if not call.principal.reaches(repo):
        raise ApiError(403, f"token {call.principal.name!r} reaches only "
                            f"{', '.join(sorted(call.principal.repos or ()))}, not {repo}")


def reaches_everything(call: Call) -> None:
    if call.principal.repos is not None:
        raise ApiError(403, f"token {call.principal.name!r} is limited to repositories, and "
                            "this spans every repository; use a token without --repo")


async def wait_as_asked(call: Call, match: Callable[[Change], bool]) -> int:
    """Wait as the query asks; the seq to read rows at (read before the rows)."""
    q: WaitQuery = call.query
    seq = call.changes.seq
    if q.wait_seconds > 0:
        after = seq if q.after is None else q.after
        if not call.changes.missed(after):
            await call.changes.wait(after, match, q.wait_seconds)
        seq = call.changes.seq
    return seq


# -- acting: each records the intent a `/hangar` comment would -----------------------------


def record_ask(call: Call, job: Job, command: str, *, pr: int | None,
               args: dict | None = None, extra: dict | None = None) -> web.Response:
    """Record the intent for `command` on the job's issue (pr None) or one of its PRs; 409
    when hangar may no longer act on the job's repository (the App suspended there, say)."""
    if job.off_limits:
        raise ApiError(409, f"hangar may no longer act on {job.thread.repo} "
                            f"({job.off_limits})")
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


def pr_of(call: Call, job: Job, pr: int | None) -> int:
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
