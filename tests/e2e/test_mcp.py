"""An orchestrator on hangar's MCP server, through the `mcp` SDK's own client, over both
transports: streamable HTTP at hangar's /mcp and stdio (`hangar mcp`).

It starts `try 3`, waits for the ranking, picks the best attempt, asks to land it, and
sees the land request wait for a person's approval in fakehub: no tool can approve.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from contextlib import asynccontextmanager

import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from app.web.mcp_http import TRANSPORT
from tests.e2e.conftest import ROOT
from tests.e2e.test_api import call, make_token
from tests.e2e.test_fanout import THREE_WAYS

pytestmark = pytest.mark.slow
TOKEN = "test-api-token-0123456789"
TOOLS = {"start_job", "get_job", "get_ranking", "pick", "follow_up", "verify", "cancel", "resume",
         "request_land", "land_status", "list_land", "cancel_land", "usage", "list_jobs",
         "get_run", "resolve_conflicts", "rank_runs"}


def data(result) -> dict:
    assert not result.is_error, result.content
    return result.structured_content


def refusal(result) -> str:
    assert result.is_error, result
    return result.content[0].text


@asynccontextmanager
async def over_http(world, token: str):
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"},
                                  timeout=httpx2.Timeout(30, read=180)) as http, \
            Client(streamable_http_client(f"{world.hangar.url}/mcp", http_client=http)) as c:
        yield c


@asynccontextmanager
async def over_stdio(world, token: str):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANGAR_")}
    env.update(HANGAR_API_URL=world.hangar.url, HANGAR_API_TOKEN=token,
               PYTHONPATH=str(ROOT))
    params = StdioServerParameters(command=sys.executable, args=["-m", "app.cli", "mcp"],
                                   env=env, cwd=str(ROOT))
    async with Client(params, read_timeout_seconds=180) as c:
        yield c


TRANSPORTS = {"http": over_http, "stdio": over_stdio}


@pytest.fixture
def served(world):
    world.api_token = TOKEN
    world.start_hangar(THREE_WAYS, max_agents=3)
    return world


async def orchestrate(client, world) -> dict:
    """What an orchestrator agent does: try 3, wait, rank, pick, ask to land, follow."""
    assert {t.name for t in (await client.list_tools()).tools} == TOOLS
    issue = world.hub.create_issue(world.repo, "add() is wrong", "It subtracts.",
                                   as_user=world.maintainer)
    started = data(await client.call_tool("start_job", {
        "repo": world.repo, "issue": issue, "prompt": "fix the failing test", "attempts": 3}))
    job = started["job"]
    ranked = {"final": False}
    for _ in range(4):  # each call returns when the ranking is final, or after 60 s
        ranked = data(await client.call_tool("get_ranking", {"job_id": job,
                                                             "wait_seconds": 60}))
        if ranked["final"]:
            break
    assert ranked["final"], ranked
    best = ranked["ranking"][0]
    assert best["attempt"] == 3 and "verified" in best["why"]  # the smallest passing diff
    assert ranked["ranking"][-1]["attempt"] == 1  # it broke the test

    assert [e["eligible"] for e in ranked["ranking"]] == [True, True, False]
    # the same runs, ranked as if started by hand, in another order: the same order out
    by_hand = data(await client.call_tool("rank_runs", {
        "run_ids": [e["run"] for e in reversed(ranked["ranking"])]}))["ranking"]
    assert [e["run"] for e in by_hand] == [e["run"] for e in ranked["ranking"]]
    assert [e["why"] for e in by_hand] == [e["why"] for e in ranked["ranking"]]
    refused = data(await client.call_tool("pick", {"job_id": job, "attempt": 1}))
    assert refused["outcome"] == "attempt 1 not picked: pick_ineligible"

    picked = data(await client.call_tool("pick", {"job_id": job, "attempt": best["attempt"],
                                                  "land": True}))
    assert picked["state"] == "done" and picked["outcome"] == (
        f"picked attempt {best['attempt']}; landing #{best['pr']} asked")
    deadline, listed = time.monotonic() + 60, []
    while not listed and time.monotonic() < deadline:  # the pick's land intent, taken
        listed = [r for r in data(await client.call_tool("list_land", {"repo": world.repo}))[
            "land"] if r["pr_number"] == best["pr"]]
        await asyncio.sleep(0 if listed else 0.5)
    assert listed, "the land request the pick asked for"
    asked = {"land": listed[0]["id"]}
    status = data(await client.call_tool("land_status", {"land_id": asked["land"]}))
    for _ in range(6):
        if status["state"] == "awaiting_approval":
            break
        status = data(await client.call_tool("land_status", {
            "land_id": asked["land"], "wait_seconds": 30, "after": status["seq"]}))
    assert status["state"] == "awaiting_approval", status
    assert "person" in status["awaiting"] and "no API call can approve" in status["awaiting"]
    return {"issue": issue, "job": job, "pr": best["pr"], "land": asked["land"]}


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
async def test_an_orchestrator_runs_try_3_to_a_land_request_awaiting_a_person(served,
                                                                              transport):
    world = served
    token = make_token(world, "orchestrator", ["read", "operate", "land"])
    async with TRANSPORTS[transport](world, token) as client:
        done = await orchestrate(client, world)
    # In fakehub: the kept PR is open and unmerged, waiting for a review; the others closed.
    pr = world.hub.get_pr(world.repo, done["pr"])
    assert pr["state"] == "open" and not pr["merged"]
    others = [p for p in world.hub.list_prs(world.repo) if p["number"] != done["pr"]]
    assert len(others) == 2 and all(
        world.hub.get_pr(world.repo, p["number"])["state"] == "closed" for p in others)
    assert "approv" in world.checks(pr["head"]["sha"])["hangar / land"]["output"]["title"]
    # Who did what is on the audit trail, under the token's name.
    status, trail = call(world, "GET", "/api/audit")
    assert status == 200
    assert [e["action"] for e in trail if e["who"] == "token:orchestrator"] == [
        "job.start", "job.pick", "job.pick"]


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
async def test_tools_refuse_what_the_token_has_no_scope_for(served, transport):
    world = served
    reader = make_token(world, "reader", ["read"])
    async with TRANSPORTS[transport](world, reader) as client:
        text = refusal(await client.call_tool("start_job", {
            "repo": world.repo, "issue": 1, "prompt": "x", "attempts": 3}))
        assert "insufficient_scope:" in text and "'operate'" in text
        text = refusal(await client.call_tool("request_land", {"job_id": "job-x"}))
        assert "insufficient_scope:" in text and "'land'" in text
        assert data(await client.call_tool("list_jobs", {})) == {"jobs": []}
    assert call(world, "GET", "/api/jobs", token=reader)[0] == 200


async def test_mcp_over_http_needs_a_live_token(served):
    world = served
    async with httpx2.AsyncClient() as http:
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            answer = await http.post(f"{world.hangar.url}/mcp", headers=headers, json={
                "jsonrpc": "2.0", "id": 1, "method": "tools/list"})
            assert answer.status_code == 401 and "Bearer" in answer.json()["error"]


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
async def test_tools_describe_their_parameters_and_refuse_bad_ones_in_a_sentence(served,
                                                                                 transport):
    world = served
    token = make_token(world, "orchestrator", ["read", "operate", "land"])
    async with TRANSPORTS[transport](world, token) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        for tool in tools.values():
            for name, schema in tool.input_schema.get("properties", {}).items():
                assert schema.get("description"), (tool.name, name)
            hints = tool.annotations
            assert hints is not None and hints.read_only_hint is not None, tool.name
        start = tools["start_job"].input_schema["properties"]
        assert (start["attempts"]["minimum"], start["attempts"]["maximum"]) == (1, 10)
        assert start["issue"]["minimum"] == 1 and start["repo"]["pattern"]
        assert start["prompt"]["maxLength"] == 8000
        assert tools["get_job"].input_schema["properties"]["wait_seconds"]["maximum"] == 120
        reads = {n for n, t in tools.items() if t.annotations.read_only_hint}
        assert reads == {"get_job", "get_ranking", "land_status", "usage", "list_jobs",
                         "get_run", "list_land", "rank_runs"}
        assert {n for n, t in tools.items() if t.annotations.destructive_hint} == {
            "pick", "cancel", "cancel_land"}

        text = refusal(await client.call_tool("start_job", {"repo": "not a repo",
                                                            "attempts": 11}))
        assert text.startswith("invalid: start_job's arguments:")
        assert "`issue` is required" in text and "`prompt` is required" in text
        assert "`attempts`: input should be less than or equal to 10" in text
        assert "`repo`: string should match pattern" in text
        assert "validation error" not in text and "pydantic" not in text
    status, jobs = call(world, "GET", "/api/jobs")
    assert status == 200 and jobs == []  # nothing was started by the refused call


async def test_mcp_over_http_refuses_a_foreign_origin(served):
    """A page of another site, reaching hangar through DNS rebinding with a token it got
    somehow, is refused; a local page is not."""
    world = served
    async with httpx2.AsyncClient() as http:
        asked = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        headers = {"Authorization": f"Bearer {TOKEN}", "Accept": "application/json, "
                   "text/event-stream"}
        refused = await http.post(f"{world.hangar.url}/mcp", json=asked,
                                  headers={**headers, "Origin": "http://evil.example"})
        assert refused.status_code == 403 and "Origin" in refused.json()["error"]
        # the MCP SDK is loaded by the first call that passes the checks, not at start
        transport = world.hangar.app[TRANSPORT]
        assert transport.asgi is None and transport.task is None
        local = await http.post(f"{world.hangar.url}/mcp", json=asked,
                                headers={**headers, "Origin": "http://localhost:5173"})
        assert local.status_code == 200, local.text
        assert transport.asgi is not None and not transport.task.done()


def test_serve_starts_without_the_mcp_sdk():
    """What `hangar serve` imports before it starts holds nothing of the MCP SDK: the
    SDK takes longer to import than the rest of hangar, and most hangars never serve it."""
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, app.wiring; "
         "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'mcp_types')))"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    assert loaded.stdout.strip() == "[]", loaded.stdout
