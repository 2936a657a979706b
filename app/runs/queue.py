"""Who runs next: agents are capped per model credential, first come first served, and
a credential at its usage threshold pauses its queue (app/runs/pause.py) until the reset,
a fresh reading below it, or a person's resume."""

from __future__ import annotations

import logging
import time
from enum import StrEnum
from typing import TYPE_CHECKING

from app.models import Run, RunKind, RunState
from app.render.reasons import Why
from app.runs.pause import Pause, highest, pause_of
from proxy.usage import Reading

if TYPE_CHECKING:
    from app.runs.context import RunsContext

log = logging.getLogger(__name__)


class Wait(StrEnum):
    """What a queued run waits for, besides its credential's pause (which says itself:
    app/runs/pause.py); render.endings.WAITS words it."""

    SLOT = "slot"  # a free agent slot of its model credential
    SANDBOX = "sandbox"  # a free place in the fleet (HANGAR_MAX_SANDBOXES)


# -- starting ----------------------------------------------------------------------


def credential_key(run: Run) -> str:
    """Agents are capped per model credential; script agents share one key."""
    return run.env.get("model_credential_env") or run.env.get("harness") or "unknown"


def queue_positions(engine: RunsContext) -> dict[str, int]:
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


def wake_queued(engine: RunsContext) -> None:
    """A slot or a place in a queue came free: the queued runs look again (and their
    status comments say their new place)."""
    engine.wake(*(r.id for r in engine.active_runs() if r.state == RunState.QUEUED))


def slot_free(engine: RunsContext, run: Run) -> bool:
    key = credential_key(run)
    running = [r for r in engine.active_runs()
               if r.state == RunState.RUNNING and credential_key(r) == key]
    free = engine.settings.max_concurrent_agents - len(running)
    # Only the oldest queued runs of this credential may take its free slots.
    return free > 0 and queue_positions(engine).get(run.id, 1) <= free


# -- the model's usage ------------------------------------------------------------------


def model_pause(engine: RunsContext, run: Run) -> Pause | None:
    """Whether the run's credential is paused (app/runs/pause.py); an agent run only."""
    if (engine.models is None or run.kind == RunKind.VERIFY
            or run.env.get("harness") in (None, "script")):
        return None
    return credential_pause(engine, credential_key(run))


def credential_pause(engine: RunsContext, credential: str) -> Pause | None:
    if engine.models is None:
        return None
    return pause_of(credential, engine.models.readings(credential),
                    engine.models.resumed(credential), engine.settings.pause_at_pct,
                    time.time())


def model_pauses(engine: RunsContext, runs: list[Run]) -> dict[str, Why]:
    """What each of these queued runs waits for, when its credential is paused."""
    paused: dict[str, Why] = {}
    by_credential: dict[str, Pause | None] = {}
    for run in runs:
        if run.state != RunState.QUEUED or run.finished or not run.env:
            continue
        key = credential_key(run)
        if key not in by_credential:
            by_credential[key] = model_pause(engine, run)
        pause = by_credential[key]
        if pause is not None:
            paused[run.id] = pause.why
    return paused


def model_readings(engine: RunsContext, runs: list[Run]) -> dict[str, Reading]:
    """The most used live window of each running agent's credential, for its line."""
    shown: dict[str, Reading] = {}
    now = time.time()
    for run in runs:
        if run.state != RunState.RUNNING or engine.models is None or run.kind == RunKind.VERIFY:
            continue
        reading = highest(engine.models.readings(credential_key(run)), now)
        if reading is not None:
            shown[run.id] = reading
    return shown


def resume_model(engine: RunsContext, credential: str, *, by: str) -> Pause | None:
    """A person lifts the credential's pause: its queued agents start (None: not paused)."""
    pause = credential_pause(engine, credential)
    if pause is None or engine.models is None:  # no ledger: nothing is ever paused
        return None
    engine.models.resume(credential, by=by, windows=pause.holding)
    wake_queued(engine)
    return pause


def usage_windows(engine: RunsContext, credential: str) -> list[dict]:
    """The credential's windows whose resets have not passed, for a run's record."""
    if engine.models is None:
        return []
    now = time.time()
    return [{"window": r.window, "utilization": r.utilization, "reset_at": r.reset_at,
             "source": r.source, "at": r.at}
            for r in engine.models.readings(credential)
            if r.reset_at is None or r.reset_at > now]


def usage_report(engine: RunsContext) -> dict[str, dict]:
    """Per credential the ledger knows: its windows whose resets have not passed, and its
    pause (None when agents may start), for the API, the fleet page and /metrics."""
    if engine.models is None:
        return {}
    now = time.time()
    report = {}
    for credential, readings in engine.models.all_readings().items():
        pause = credential_pause(engine, credential)
        resumed = engine.models.resumed(credential)
        report[credential] = {
            "windows": [r.as_dict() for r in readings if r.reset_at is None or r.reset_at > now],
            "paused": None if pause is None else {
                "window": pause.reading.window, "utilization": pause.reading.utilization,
                "threshold_pct": pause.threshold_pct, "until": pause.until,
                "refused": pause.reading.refused, "source": pause.reading.source},
            "resumed": None if resumed is None else {
                "at": resumed.at, "by": resumed.by, "windows": resumed.windows}}
    return report
