"""A small MCP server for orchestrator agents, over stdio, in front of hangar's REST API.

    HANGAR_API_URL=https://hangar.example.com HANGAR_API_TOKEN=… hangar mcp

Tools: start_job, get_job (can wait for a change), list_jobs, cancel_job. It holds no
GitHub credential; everything goes through the API, which needs the operator's token.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import aiohttp
from mcp.server.mcpserver import MCPServer

MAX_WAIT_S = 120


class HangarAPI:
    def __init__(self, url: str, token: str):
        self.url = url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {token}"}

    async def call(self, method: str, path: str, body: Any = None) -> Any:
        async with aiohttp.ClientSession() as session, session.request(
            method, f"{self.url}{path}", json=body, headers=self.headers
        ) as response:
            if response.status >= 400:
                raise RuntimeError(f"hangar answered {response.status}: {await response.text()}")
            return await response.json()


def build_server(api: HangarAPI) -> MCPServer:
    server = MCPServer(
        name="hangar",
        instructions=(
            "hangar runs coding agents in sandboxes on GitHub issues, opens verified pull "
            "requests as a GitHub App and lands them after a human approves. Start work "
            "with start_job, follow it with get_job(wait_seconds=…)."),
    )

    @server.tool()
    async def start_job(repo: str, issue: int, prompt: str, attempts: int = 1) -> dict:
        """Start an agent on an issue of repo (owner/name), as if a maintainer had
        commented `/hangar <prompt>` (or `/hangar try <attempts> <prompt>`) on it."""
        return await api.call("POST", "/api/jobs", {"repo": repo, "issue": issue,
                                                    "prompt": prompt, "attempts": attempts})

    @server.tool()
    async def get_job(job_id: str, wait_seconds: int = 0) -> dict:
        """A job's state, its runs (PR, head, verification) and timeline. With
        wait_seconds (at most 120) it returns early as soon as the timeline grows."""
        deadline = asyncio.get_running_loop().time() + min(max(wait_seconds, 0), MAX_WAIT_S)
        first = await _job_or_none(api, job_id)
        while asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(1)
            now = await _job_or_none(api, job_id)
            if first is None or (now and len(now["timeline"]) != len(first["timeline"])):
                return now or {"job": None}
        return first or {"job": None, "note": "no such job yet"}

    @server.tool()
    async def list_jobs(repo: str | None = None) -> list:
        """Jobs, newest last, optionally for one repository (owner/name)."""
        return await api.call("GET", "/api/jobs" + (f"?repo={repo}" if repo else ""))

    @server.tool()
    async def cancel_job(job_id: str) -> dict:
        """Stop a job's running or queued agents."""
        return await api.call("POST", f"/api/jobs/{job_id}/cancel")

    return server


async def _job_or_none(api: HangarAPI, job_id: str) -> dict | None:
    try:
        return await api.call("GET", f"/api/jobs/{job_id}")
    except RuntimeError as exc:
        if "404" in str(exc):
            return None
        raise


def main() -> int:
    url = os.environ.get("HANGAR_API_URL", "http://127.0.0.1:8787")
    token = os.environ.get("HANGAR_API_TOKEN")
    if not token:
        print("hangar mcp: set HANGAR_API_TOKEN to the token hangar serve was given")
        return 2
    build_server(HangarAPI(url, token)).run("stdio")
    return 0
