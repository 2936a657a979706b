"""Intents: what became of an ask, from a comment or from the API."""

from __future__ import annotations

from aiohttp import web

from app.models import Intent, IntentState
from app.web.api.calls import ApiError, Call, WaitQuery, ok, reach, route


@route("GET", "/api/intents/{intent_id}", "read",
       "What became of an ask (state new → done, and the outcome); can wait for it",
       query=WaitQuery)
async def get_intent(call: Call) -> web.Response:
    intent_id = call.param("intent_id")
    seq = call.changes.seq  # before the read: a change after it wakes the wait below
    intent = call.store.get("intent", intent_id, Intent)
    if intent is None:
        raise ApiError(404, "no intent with this id")
    reach(call, intent.thread.repo)
    q: WaitQuery = call.query
    if intent.state != IntentState.DONE and q.wait_seconds > 0:
        await call.changes.wait(seq if q.after is None else q.after,
                                lambda c: c.id == intent_id and c.state == "done",
                                q.wait_seconds)
        intent = call.store.get("intent", intent_id, Intent)
    return ok({"id": intent.id, "command": intent.command, "state": intent.state,
               "outcome": intent.outcome, "thread": intent.thread.model_dump(),
               "created_at": intent.created_at})
