"""Usage per model credential, across every repository."""

from __future__ import annotations

from aiohttp import web

from app.models import Run
from app.runs import usage_report
from app.web.api.calls import Call, ok, reaches_everything, route
from app.web.api.views import usage_view


@route("GET", "/api/usage", "read",
       "Per model credential: agents running and queued against the cap, turns, their "
       "cost, the usage windows the model reported and whether new agents are paused")
async def get_usage(call: Call) -> web.Response:
    reaches_everything(call)
    return ok(usage_view(call.store.all("run", Run), call.engine.settings.max_concurrent_agents,
                         usage_report(call.engine)))
