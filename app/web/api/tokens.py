"""Named tokens and the audit trail: the admin's part of the API."""

from __future__ import annotations

from aiohttp import web
from pydantic import ConfigDict, Field

from app.web import access
from app.web.access import Scope
from app.web.api.calls import ApiError, Body, Call, Query, ok, route


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

class AuditQuery(Query):
    after: int = Field(0, ge=0)
    limit: int = Field(200, ge=1, le=1000)


@route("GET", "/api/tokens", "admin", "Named tokens (never their secrets)")
async def list_tokens(call: Call) -> web.Response:
    return ok([t.model_dump(mode="json", exclude={"token_hash"})
               for t in access.list_tokens(call.store)])


@route("POST", "/api/tokens", "admin", "Make a named token; its secret is answered once",
       body=NewToken, action="token.create", success=201, conflicts=True)
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
