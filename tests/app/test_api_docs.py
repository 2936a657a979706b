"""docs/api.md documents every REST call and MCP tool, each with its scope."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from mcp import Client

from app.web.api import ROUTES
from app.web.mcp import build_server

DOC = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()


def rows() -> dict[str, list[str]]:
    """Table rows by what their first code span names: `GET /api/jobs`, `start_job`."""
    found: dict[str, list[str]] = {}
    for line in DOC.splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in line.split("|")[1:-1]]
            name = re.match(r"`([^`]+)`", cells[0]).group(1)
            name = name.split("[")[0].split("(")[0]
            found.setdefault(name, []).extend(cells[1:2])
    return found


def test_every_route_is_documented_with_its_scope():
    documented = {k: v for k, v in rows().items() if k.split(" ")[0] in ("GET", "POST",
                                                                         "DELETE")}
    assert documented == {f"{r.method} {r.path}": [r.scope or "none"] for r in ROUTES}


def test_every_mcp_tool_is_documented_with_a_scope():
    async def names() -> set[str]:
        async with Client(build_server(lambda _ctx: None)) as client:
            return {t.name for t in (await client.list_tools()).tools}

    documented = rows()
    for name in asyncio.run(names()):
        assert documented.get(name) in (["read"], ["operate"], ["land"]), name
