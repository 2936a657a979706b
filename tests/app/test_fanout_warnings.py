"""`/hangar try N` warns in its reply when the attempts will queue behind the concurrency
cap, or the model credential they use is already past 70% in a window (N attempts cost
about N times one)."""

from __future__ import annotations

import time

import pytest
import yaml

from app.commands import intents
from app.models import Intent, Thread
from app.wiring import command_actions
from proxy.gateway import ModelLedger
from proxy.usage import Reading
from tests.recording_github import REPO, RecordingGitHub

ISSUE = Thread(repo=REPO, number=3, installation_id=1)


@pytest.fixture
def fanout(step_engine, tmp_path):
    envs = tmp_path / "envs"
    envs.mkdir()
    (envs / "default.yaml").write_text(yaml.safe_dump({
        "name": "default", "harness": "claude", "model_credential_env": "PLAN"}))

    async def ask(n: int, used: float | None) -> list[str]:
        gh = RecordingGitHub(permissions={"mona": "write"})
        engine = step_engine(gh, envs_dir=envs, max_concurrent_agents=3)
        engine.models = ModelLedger(engine.settings.db_path)
        engine.on_command(command_actions())
        if used is not None:
            engine.models.record_readings("PLAN", [Reading(
                "7d", used, time.time() + 3600, None, "anthropic headers", time.time())])
        asked = engine.save_intent(Intent(
            id=f"comment-1-{n}", thread=ISSUE, comment_id=0, author="mona", command="try",
            args={"n": n, "prompt": "fix it"}, default_branch="main"))
        await intents.process_intent(engine, asked.id)
        return [c.body["body"] for c in gh.writes("POST")
                if c.path.endswith("/comments") and "hangar:reply" in c.body["body"]]
    return ask


async def test_more_attempts_than_agents_at_once_warn(fanout):
    [said] = await fanout(5, None)
    assert ("5 attempts and hangar runs at most 3 agents at once per model credential: 2 of "
            "them wait in the queue") in said


async def test_usage_above_seventy_percent_warns(fanout):
    [said] = await fanout(2, 0.75)
    assert ("the model's 7-day usage is already 75% (above 70%): 2 attempts cost about 2 "
            "times one, and hangar pauses new agents at 90%.") in said


async def test_a_fanout_within_bounds_starts_without_a_word(fanout):
    assert await fanout(3, 0.7) == []
