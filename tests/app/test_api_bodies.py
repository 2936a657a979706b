"""The REST API refuses bodies it cannot read with 422 and a reason, never a 500."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from app.wiring import create_app

TOKEN = "test-api-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


@pytest.fixture
async def client(aiohttp_client, settings):
    settings.api_token = SecretStr(TOKEN)
    return await aiohttp_client(create_app(settings))


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "recursion"),
        (b'{"repo": ' * 50_000 + b"1" + b"}" * 50_000, "recursion"),
        (b'{"repo": "acme/widgets", "issue": 1, "prompt": ', "send JSON"),
        (b"\xff\xfe{}", "send JSON"),
        (b"[1, 2]", "send JSON"),
        (b'{"repo": {"nested": "object"}, "issue": 1, "prompt": "x"}', "repo"),
    ],
)
async def test_unreadable_bodies_get_422_with_a_reason(client, body, reason):
    response = await client.post("/api/jobs", data=body, headers=AUTH)
    assert response.status == 422
    assert reason in await response.text()


async def test_resume_records_the_intent_a_comment_would(client):
    from app.models import Intent, Job, Thread
    from app.web.keys import ENGINE

    engine = client.app[ENGINE]
    job = engine.save_job(Job(thread=Thread(repo="acme/widgets", number=3, installation_id=1),
                              requested_by="mona", prompt="fix", clone_url="x",
                              base_branch="main"))
    response = await client.post(f"/api/jobs/{job.id}/resume", headers=AUTH)
    assert response.status == 202
    intent = engine.store.get("intent", (await response.json())["intent"], Intent)
    assert (intent.command, intent.author_type, intent.thread.number) == ("resume", "Api", 3)
    assert (await client.post("/api/jobs/job-nope/resume", headers=AUTH)).status == 404
