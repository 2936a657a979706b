"""Who runs next: agents are capped per model credential, first come first served, and
a credential near its reported limit pauses its queue until the reset."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from app import render
from app.models import Run, RunKind, RunState

if TYPE_CHECKING:
    from app.engine import StepContext

log = logging.getLogger(__name__)

# -- starting ----------------------------------------------------------------------


def credential_key(run: Run) -> str:
    """Agents are capped per model credential; script agents share one key."""
    return run.env.get("model_credential_env") or run.env.get("harness") or "unknown"


def queue_positions(engine: StepContext) -> dict[str, int]:
    """Each queued run's place in its credential's queue, first come first served."""
    queued = sorted((r for r in engine.active_runs() if r.state == RunState.QUEUED
                     and r.kind != RunKind.VERIFY), key=lambda r: r.queued_at)
    places: dict[str, int] = {}
    seen: dict[str, int] = {}
    for run in queued:
        key = credential_key(run)
        seen[key] = seen.get(key, 0) + 1
        places[run.id] = seen[key]
    return places


def wake_queued(engine: StepContext) -> None:
    """A slot or a place in a queue came free: the queued runs look again (and their
    status comments say their new place)."""
    engine.wake(*(r.id for r in engine.active_runs() if r.state == RunState.QUEUED))


def slot_free(engine: StepContext, run: Run) -> bool:
    key = credential_key(run)
    running = [r for r in engine.active_runs()
               if r.state == RunState.RUNNING and credential_key(r) == key]
    free = engine.settings.max_concurrent_agents - len(running)
    # Only the oldest queued runs of this credential may take its free slots.
    return free > 0 and queue_positions(engine).get(run.id, 1) <= free



def model_paused_until(engine: StepContext, run: Run) -> float | None:
    """When a credential's reported usage is at pause_at_pct or more: its reset time."""
    if engine.models is None or run.env.get("harness") in (None, "script"):
        return None
    limit = engine.models.limit(credential_key(run))
    now = time.time()
    if (limit is None or limit.reset_at is None or limit.reset_at <= now
            or limit.utilization * 100 < engine.settings.pause_at_pct):
        return None
    return limit.reset_at


def model_pause_notes(engine: StepContext, runs: list[Run]) -> list[str]:
    notes = []
    for key in sorted({credential_key(r) for r in runs if r.state == RunState.QUEUED}):
        waiting = [r for r in runs if r.state == RunState.QUEUED and credential_key(r) == key]
        reset_at = model_paused_until(engine, waiting[0])
        if reset_at is not None:
            limit = engine.models.limit(key)
            notes.append(render.model_pause_line(limit.utilization, engine.settings.pause_at_pct,
                                                 reset_at))
    return notes
