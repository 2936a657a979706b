"""A running agent's progress: every `status_edit_interval_seconds` at most, hangar reads
the tail of the agent's log, takes its steps through the harness, and when they changed
shows them in the `hangar / agent` check run; the status comment shows them at its next
(folded) edit. Each update is a write GitHub counts: unchanged steps cost none."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from app.models import Run
from app.redact import redact
from app.render.progress import agent_check_progress
from app.runs.sandbox import AGENT_CHECK, upsert_check
from sandbox.envspec import EnvSpec
from sandbox.harness import harness_for
from sandbox.provider import SandboxError

if TYPE_CHECKING:
    from app.runs.context import RunsContext

log = logging.getLogger(__name__)

# The log's tail read for progress: enough for the last steps, bounded whatever it holds.
PROGRESS_LOG_BYTES = 256 * 1024
STEPS_KEPT = 12
EDITED_KEPT = 50
EDIT_VERBS = ("edited", "wrote", "added", "deleted", "changed")


def progress_of(steps: list[Any], before: dict, now: float) -> dict:
    """What `run.agent["progress"]` holds: the last steps, the files edited so far (those
    seen at earlier readings kept: the tail read may have lost them), when it was read."""
    edited = list(before.get("edited") or [])
    more = bool(before.get("edited_more"))
    for step in steps:
        if step.verb in EDIT_VERBS and step.subject and step.subject not in edited:
            if len(edited) < EDITED_KEPT:
                edited.append(step.subject)
            else:
                more = True
    return {"at": now, "steps": [s.model_dump() for s in steps[-STEPS_KEPT:]],
            "steps_seen": max(len(steps), int(before.get("steps_seen") or 0)),
            "edited": edited, "edited_more": more}


def last_steps(harness: Any, log_text: str) -> list[dict]:
    """The agent's last steps from its whole log, redacted: kept when its turn ends."""
    return [s.model_dump() for s in harness.steps(redact(log_text))[-STEPS_KEPT:]]


async def show_progress(engine: RunsContext, run: Run, sb: Any, log_path: str, now: float,
                        *, timeout: float) -> None:
    """Read the agent's steps from its log (`log_path` in the sandbox) if the last reading
    is older than the interval; show them in `hangar / agent` when they changed."""
    before = (run.agent or {}).get("progress") or {}
    # The check run says the turn started as it starts: its first steps an interval later.
    last = float(before.get("at") or run.started_at or 0)
    if now < last + engine.settings.status_edit_interval_seconds:
        return
    provider = engine.providers[sb.provider]
    try:
        async with asyncio.timeout(timeout):
            data = await provider.copy_out(sb, log_path, max_bytes=PROGRESS_LOG_BYTES)
    except (TimeoutError, SandboxError, OSError):
        return  # no log yet, or not one hangar reads: the next reading tries again
    harness = harness_for(EnvSpec.model_validate(run.env))
    # The agent's bytes are masked of every secret before anything keeps them.
    steps = harness.steps(redact(data.decode("utf-8", "replace")))
    progress = progress_of(steps, before, now)
    run = engine.patch_run(run.id, agent={**run.agent, "progress": progress})
    if (progress["steps"] == before.get("steps") and progress["edited"] == before.get("edited")):
        return
    job = engine.get_job(run.job_id)
    if run.start_sha is None or job is None:
        return
    ops = await engine.github.repo_ops(job.thread)
    await upsert_check(engine, ops, run, AGENT_CHECK, run.start_sha, status="in_progress",
                       output=agent_check_progress(run, now))
