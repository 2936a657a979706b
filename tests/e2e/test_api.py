"""The REST API and the MCP server in front of it, against a running hangar."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from mcp import Client

from app.mcp_server import HangarAPI, build_server
from tests.e2e.conftest import wait_until

pytestmark = pytest.mark.slow
TOKEN = "test-api-token-0123456789"


def result(tool_result) -> dict:
    assert not tool_result.is_error, tool_result
    return json.loads(tool_result.content[0].text)


def call(world, method: str, path: str, body=None, token: str | None = TOKEN):
    request = urllib.request.Request(
        f"{world.hangar.url}{path}", method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Content-Type": "application/json",
                 **({"Authorization": f"Bearer {token}"} if token else {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture
def served(world):
    world.api_token = TOKEN
    world.start_hangar()
    return world


def test_start_follow_and_list_a_job(served):
    world = served
    issue = world.hub.create_issue(world.repo, "add() is wrong", "", as_user=world.maintainer)
    status, started = call(world, "POST", "/api/jobs",
                           {"repo": world.repo, "issue": issue, "prompt": "fix the test"})
    assert status == 202
    pr = wait_until(lambda: world.verified(issue), 60, "a verified PR")
    status, view = call(world, "GET", f"/api/jobs/{started['job']}")
    assert status == 200 and view["job"]["requested_by"] == "api"
    assert view["runs"][0]["pr_number"] == pr["number"]
    assert any("opened PR" in t["what"] for t in view["timeline"])
    status, jobs = call(world, "GET", f"/api/jobs?repo={world.repo}")
    assert [j["id"] for j in jobs] == [started["job"]]
    assert len(world.status_comments(issue)) == 1  # the same status comment as for a comment


@pytest.mark.parametrize(
    ("body", "token", "status", "reason"),
    [
        ({"repo": "acme/widgets", "issue": 1, "prompt": "x"}, None, 401, "Bearer"),
        ({"repo": "acme/widgets", "issue": 1, "prompt": "x"}, "wrong", 401, "Bearer"),
        ({"repo": "acme", "issue": 1, "prompt": "x"}, TOKEN, 422, "repo"),
        ({"repo": "acme/widgets", "issue": 0, "prompt": "x"}, TOKEN, 422, "issue"),
        ({"repo": "acme/widgets", "issue": 1, "prompt": ""}, TOKEN, 422, "prompt"),
        ({"repo": "acme/elsewhere", "issue": 1, "prompt": "x"}, TOKEN, 404, "not installed"),
    ],
)
def test_bad_requests_get_a_reason(served, body, token, status, reason):
    got, text = call(served, "POST", "/api/jobs", body, token=token)
    assert got == status and reason in str(text)


def test_api_is_off_without_a_token(world):
    world.start_hangar()
    status, text = call(world, "GET", "/api/jobs")
    assert status == 503 and "HANGAR_API_TOKEN" in text


async def test_mcp_tools_start_and_follow_a_job(served):
    world = served
    issue = world.hub.create_issue(world.repo, "add() is wrong", "", as_user=world.maintainer)
    server = build_server(HangarAPI(world.hangar.url, TOKEN))
    async with Client(server) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert names == {"start_job", "get_job", "list_jobs", "cancel_job"}
        started = await client.call_tool("start_job", {"repo": world.repo, "issue": issue,
                                                       "prompt": "fix the failing test"})
        job_id = result(started)["job"]
        for _ in range(30):
            view = result(await client.call_tool("get_job", {"job_id": job_id,
                                                             "wait_seconds": 5}))
            runs = view.get("runs") or []
            if runs and runs[0].get("verification"):
                break
        assert runs[0]["verification"]["passed"] is True
        assert runs[0]["pr_number"] is not None
