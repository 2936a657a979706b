"""The pause: at or above `pause_at_pct` in any window no new agent starts on that model
credential, until the window's reset, a fresh reading below, or a person's resume; where
a 429's retry-after and a window's reset disagree, the later one holds. Verification is
never paused."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from app import render
from app.commands import intents
from app.models import Intent, Job, Run, RunKind, RunState, Thread
from app.runs import agent_stopped, model_facts, model_pause, model_pauses, start_agent
from app.runs.pause import PauseWhy, pause_of
from app.settings import Settings
from app.wiring import command_actions
from proxy.gateway import ModelLedger
from proxy.usage import REFUSED, Reading, Resume
from tests.recording_github import REPO, RecordingGitHub

NOW = 1_800_000_000.0
HOUR = 3600.0


def seen(window: str, utilization: float, reset_in: float | None, *, status: str | None = None,
         at: float = NOW - 60) -> Reading:
    return Reading(window, utilization, None if reset_in is None else NOW + reset_in, status,
                   "anthropic headers", at)


@dataclass
class Case:
    name: str
    readings: list[Reading]
    held: bool
    until: float | None = None  # seconds from NOW
    window: str | None = None  # the one the sentence names
    threshold: float = 90.0
    resume: Resume | None = None
    code: str = PauseWhy.WINDOW_FULL


RESUMED = Resume("PLAN", NOW - 30, "mona", {"7d": NOW + 2 * HOUR})
CASES = [
    Case("below the threshold: agents start", [seen("7d", 0.89, 2 * HOUR)], held=False),
    Case("at the threshold with a reset: held until it", [seen("7d", 0.90, 2 * HOUR)],
         held=True, until=2 * HOUR, window="7d"),
    Case("above it without a reset: held with no end known", [seen("7d", 0.95, None)],
         held=True, until=None, window="7d"),
    Case("a window whose reset passed is over", [seen("7d", 0.95, -1)], held=False),
    Case("any window holds: the 5-hour one here", [seen("7d", 0.5, 2 * HOUR),
                                                    seen("5h", 0.93, HOUR)],
         held=True, until=HOUR, window="5h"),
    Case("a 429's retry-after against a later window reset: the later holds",
         [Reading(REFUSED, 1.0, NOW + 1, "rejected", "429 retry-after", NOW - 1),
          seen("7d", 0.91, HOUR)], held=True, until=HOUR, window="7d"),
    Case("a window reset before a 429's retry-after: the retry-after holds",
         [Reading(REFUSED, 1.0, NOW + 600, "rejected", "429 retry-after", NOW - 1),
          seen("tokens", 0.95, 30)], held=True, until=600, window=REFUSED,
         code=PauseWhy.REFUSED),
    Case("a 429 alone, with its retry-after", [Reading(REFUSED, 1.0, NOW + 30, "rejected",
                                                       "429 retry-after", NOW - 1)],
         held=True, until=30, window=REFUSED, code=PauseWhy.REFUSED),
    Case("one window held with no reset known keeps the pause open",
         [seen("7d", 0.91, HOUR), seen("5h", 0.92, None)], held=True, until=None,
         window="5h"),
    Case("a window the vendor rejected holds below the threshold",
         [seen("7d", 0.5, HOUR, status="rejected")], held=True, until=HOUR, window="7d",
         code=PauseWhy.REFUSED),
    Case("the threshold is a setting: 95% lets 91% start", [seen("7d", 0.91, HOUR)],
         held=False, threshold=95.0),
    Case("the threshold is a setting: 80% holds at 85%", [seen("7d", 0.85, HOUR)],
         held=True, until=HOUR, window="7d", threshold=80.0),
    Case("a person's resume lifts the window it was given for", [seen("7d", 0.91, HOUR)],
         held=False, resume=RESUMED),
    Case("a fresh reading of the lifted window stays lifted until its reset",
         [seen("7d", 0.93, HOUR, at=NOW - 1)], held=False, resume=RESUMED),
    Case("a resume lifts only its windows", [seen("7d", 0.91, HOUR), seen("5h", 0.95, HOUR)],
         held=True, until=HOUR, window="5h", resume=RESUMED),
    Case("after the lifted window's reset a resume lifts nothing",
         [seen("7d", 0.91, HOUR)], held=True, until=HOUR, window="7d",
         resume=Resume("PLAN", NOW - 3 * HOUR, "mona", {"7d": NOW - HOUR})),
    Case("a refusal after the resume pauses again",
         [seen("7d", 1.0, HOUR, status="rejected", at=NOW - 1)], held=True, until=HOUR,
         window="7d", resume=RESUMED, code=PauseWhy.REFUSED),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_pause_rule(case: Case):
    pause = pause_of("PLAN", case.readings, case.resume, case.threshold, NOW)
    if not case.held:
        assert pause is None
        return
    assert pause is not None
    assert pause.until == (None if case.until is None else NOW + case.until)
    assert pause.reading.window == case.window
    assert pause.why.code == case.code
    assert pause.threshold_pct == case.threshold


def test_the_held_line_says_what_it_waits_for():
    reset = time.mktime((2026, 10, 13, 9, 12, 0, 0, 0, 0)) - time.timezone  # Tue, UTC
    pause = pause_of("PLAN", [Reading("7d", 0.91, reset, None, "anthropic headers", reset - 9)],
                     None, 90.0, reset - 3 * 86400)
    assert render.run_line(Run(job_id="j", branch="b", base_branch="main"),
                           paused=pause.why) == (
        "⏸️ waiting for the model: the model's 7-day usage is 91%; hangar pauses new agents "
        "at 90%; resets Tue 09:12 UTC, or `/hangar resume`")
    open_ended = pause_of("PLAN", [Reading("7d", 0.95, None, None, "claude stream", 1.0)],
                          None, 90.0, 2.0)
    assert render.run_line(Run(job_id="j", branch="b", base_branch="main"),
                           paused=open_ended.why) == (
        "⏸️ waiting for the model: the model's 7-day usage is 95%; hangar pauses new agents "
        "at 90%; the model did not say when it resets, so a reading below 90% or "
        "`/hangar resume` starts it")
    refused = pause_of("PLAN", [Reading(REFUSED, 1.0, reset, "rejected", "429 retry-after",
                                        1.0)], None, 90.0, reset - 60)
    assert render.usage.pause_line(refused.why) == (
        "⏸️ waiting for the model: the model refused requests (429); it takes requests "
        "again Tue 09:12 UTC, or `/hangar resume`")


# -- in the engine: the queue, the command, the run's facts ------------------------------

ISSUE = Thread(repo=REPO, number=3, installation_id=1)
CLAUDE = {"harness": "claude", "model_credential_env": "PLAN", "name": "default"}


@pytest.fixture
def paused_world(step_engine):
    """An engine with a model ledger whose 7-day window is at 91% until an hour from now,
    and a job whose agent waits in the queue."""
    def make(*, permissions: dict[str, str] | None = None, **settings: Any):
        gh = RecordingGitHub(permissions=permissions or {"mona": "write", "rick": "read"})
        engine = step_engine(gh, **settings)
        engine.models = ModelLedger(engine.settings.db_path)
        engine.on_command(command_actions())
        engine.models.record_readings("PLAN", [
            Reading("7d", 0.91, time.time() + HOUR, "allowed_warning", "anthropic headers",
                    time.time())])
        job = engine.save_job(Job(thread=ISSUE, requested_by="mona", prompt="fix add()",
                                  clone_url="http://127.0.0.1:9/acme/widgets.git",
                                  base_branch="main"))
        run = engine.save_run(Run(job_id=job.id, branch="hangar/3-x", base_branch="main",
                                  env=dict(CLAUDE)))
        return engine, gh, job, run
    return make


async def test_a_queued_agent_waits_for_the_reset(paused_world):
    engine, _, _, run = paused_world()
    await start_agent(engine, run)
    held = engine.get_run(run.id)
    assert held.state == RunState.QUEUED and held.started_at is None
    assert held.retry_at == pytest.approx(time.time() + HOUR, abs=5)
    why = model_pauses(engine, [held])[run.id]
    assert why.facts["pct"] == pytest.approx(91) and why.facts["threshold"] == 90


async def test_without_a_reset_it_looks_again_for_a_fresh_reading(paused_world):
    engine, _, _, run = paused_world()
    engine.models.record_readings("PLAN", [Reading("7d", 0.95, None, None, "claude stream",
                                                   time.time() + 1)])
    await start_agent(engine, run)
    held = engine.get_run(run.id)
    assert held.state == RunState.QUEUED
    assert held.retry_at == pytest.approx(time.time() + engine.settings.poll_interval_seconds,
                                          abs=5)
    # A fresh reading below the threshold ends it.
    engine.models.record_readings("PLAN", [Reading("7d", 0.5, None, None, "anthropic headers",
                                                   time.time() + 2)])
    assert model_pause(engine, held) is None


async def test_the_threshold_is_the_operators_setting(paused_world):
    engine, _, _, run = paused_world(pause_at_pct=95)
    assert model_pause(engine, run) is None
    with pytest.raises(ValueError):
        Settings(app_id=1, webhook_secret="s", pause_at_pct=0)


async def test_verification_is_never_paused(paused_world):
    engine, _, job, _ = paused_world()
    verify = engine.save_run(Run(job_id=job.id, branch="hangar/3-x", base_branch="main",
                                 kind=RunKind.VERIFY, env=dict(CLAUDE)))
    assert model_pause(engine, verify) is None
    script = engine.save_run(Run(job_id=job.id, branch="hangar/3-x", base_branch="main",
                                 env={"harness": "script", "model_credential_env": "PLAN"}))
    assert model_pause(engine, script) is None  # a script needs no model


def resume_intent(engine, author: str) -> Intent:
    return engine.save_intent(Intent(id=f"comment-9-{author}", thread=ISSUE, comment_id=0,
                                     author=author, command="resume", args={}))


async def test_a_writer_resumes_and_the_agent_may_start(paused_world):
    engine, gh, job, run = paused_world()
    await start_agent(engine, run)
    asked = resume_intent(engine, "mona")
    await intents.process_intent(engine, asked.id)
    assert engine.store.get("intent", asked.id, Intent).outcome == "resumed 1 credential(s)"
    assert model_pause(engine, engine.get_run(run.id)) is None
    assert engine.get_run(run.id).retry_at == 0.0  # it looks again now
    resumed = engine.models.resumed("PLAN")
    assert resumed.by == "mona" and set(resumed.windows) == {"7d"}
    [said] = [c.body["body"] for c in gh.writes("POST") if c.path.endswith("/3/comments")
              and "hangar:reply" in c.body["body"]]
    assert "@mona resumed the agents hangar had paused: the model's 7-day usage was 91% " \
           "(threshold 90%), until it resets" in said
    assert any("resumed PLAN (7d)" in what for _, what in engine.store.notes(job.id))


async def test_a_reader_is_refused_with_the_reason_and_nothing_resumes(paused_world):
    engine, gh, _, run = paused_world()
    asked = resume_intent(engine, "rick")
    await intents.process_intent(engine, asked.id)
    assert engine.store.get("intent", asked.id, Intent).outcome == "refused: no write access"
    [said] = [c.body["body"] for c in gh.writes("POST") if c.path.endswith("/comments")]
    assert "only from people with write access" in said
    assert engine.models.resumed("PLAN") is None
    assert model_pause(engine, run) is not None


async def test_resume_where_nothing_is_paused_says_so(paused_world):
    engine, gh, _, _ = paused_world(pause_at_pct=95)
    asked = resume_intent(engine, "mona")
    await intents.process_intent(engine, asked.id)
    assert engine.store.get("intent", asked.id, Intent).outcome == "nothing paused"
    [said] = [c.body["body"] for c in gh.writes("POST") if c.path.endswith("/comments")]
    assert "Nothing here waits for the model" in said


@dataclass
class StoppedAgent:
    """What a sandbox provider answers when a stopped agent's log is read."""

    log: bytes
    calls: list[Any] = field(default_factory=list)

    async def copy_out(self, sb, path, max_bytes=None):
        return self.log

    async def run(self, sb, argv, **kwargs):
        from sandbox.provider import ExecResult

        return ExecResult(exit_code=1, output="no session store", timed_out=False)


async def test_a_429s_reset_is_the_later_of_retry_after_and_the_windows(paused_world):
    engine, _, _, run = paused_world()
    engine.models.record(run.id, "PLAN", status=429, error="rate limited",
                         reset_at=time.time() + 1,
                         limits=[Reading(REFUSED, 1.0, time.time() + 1, "rejected",
                                         "429 retry-after", time.time())])
    facts = model_facts(engine, run, {})
    assert facts["model"]["reset_at"] == pytest.approx(time.time() + HOUR, abs=5)
    assert facts["failure"] == "rate_limit"


async def test_a_stopped_agents_stream_readings_reach_the_ledger(step_engine, tmp_path):
    from pathlib import Path

    from sandbox.provider import Sandbox

    log = (Path(__file__).parents[1] / "sandbox" / "fixtures" / "agents"
           / "claude-subscription.log").read_bytes()
    provider = StoppedAgent(log)
    engine = step_engine(RecordingGitHub(), provider=provider)
    engine.models = ModelLedger(engine.settings.db_path)
    job = engine.save_job(Job(thread=ISSUE, requested_by="mona", prompt="fix add()",
                              clone_url="http://127.0.0.1:9/acme/widgets.git",
                              base_branch="main"))
    run = engine.save_run(Run(job_id=job.id, branch="hangar/3-x", base_branch="main",
                              state=RunState.RUNNING, env=dict(CLAUDE)))
    sb = Sandbox(id="sb-1", provider="local", labels={}, ref={})
    await agent_stopped(engine, run, sb, RunState.EXITED, 0)
    windows = {r.window: r for r in engine.models.readings("PLAN")}
    assert (windows["7d"].utilization, windows["7d"].source) == (0.91, "claude stream")
    agent = engine.get_run(run.id).agent
    assert agent["cost_usd"] == pytest.approx(0.10455)  # the CLI's own: no gateway metering
    assert (agent["input_tokens"], agent["output_tokens"]) == (51395, 176)


async def test_the_apis_resume_is_taken_as_a_maintainers(paused_world):
    engine, _, _, run = paused_world(permissions={})  # nobody has write access on GitHub
    asked = engine.save_intent(Intent(id="api-1", thread=ISSUE, comment_id=0, author="api:ops",
                                      author_type="Api", command="resume", args={}))
    await intents.process_intent(engine, asked.id)
    assert engine.store.get("intent", asked.id, Intent).outcome == "resumed 1 credential(s)"
    assert model_pause(engine, run) is None


def test_the_running_agents_line_carries_its_credentials_latest_reading():
    running = Run(job_id="j", branch="b", base_branch="main", state=RunState.RUNNING,
                  started_at=60.0)
    assert render.run_line(running, reading=("7d", 0.913)) == (
        "🛠️ the agent is working in a sandbox (since 00:01:00 UTC); the model's 7-day "
        "usage: 91%")
    assert render.run_line(running) == "🛠️ the agent is working in a sandbox (since 00:01:00 UTC)"


async def test_a_running_agents_reading_reaches_its_status_line(paused_world):
    engine, _, job, run = paused_world()
    engine.patch_run(run.id, state=RunState.RUNNING, started_at=time.time())
    from app.runs import model_readings

    [(run_id, reading)] = model_readings(engine, engine.runs_of(job.id)).items()
    assert (run_id, reading.window, reading.utilization) == (run.id, "7d", 0.91)
