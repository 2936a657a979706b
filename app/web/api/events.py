"""A server-sent-events stream of changes, resumable after Last-Event-ID."""

from __future__ import annotations

import asyncio
import json

from aiohttp import web
from pydantic import Field

from app.changes import Change
from app.web.api.calls import Call, Query, route

HEARTBEAT_S = 15.0


class EventsQuery(Query):
    after: int | None = Field(None, ge=0, description="replay changes after this seq "
                                                      "(or send Last-Event-ID)")
    job: str | None = Field(None, description="only changes of this job")


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
        repo = repos[job_id]
        return repo is not None and call.principal.reaches(repo)

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
