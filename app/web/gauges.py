"""/metrics' gauges of work, read from hangar's rows when asked for (never kept twice):
agents per credential, jobs, how turns ended, verifications, land requests and how long
landing took."""

from __future__ import annotations

from collections import Counter
from typing import Any

from app.landing import LandRequest, LandState
from app.metrics import Metrics, labels
from app.models import Job, Run, RunKind
from app.runs import usage_report
from app.web.api import usage_view


def refresh(metrics: Metrics, engine: Any) -> None:
    store = engine.store
    runs = store.all("run", Run)
    report = usage_report(engine)
    usage = usage_view(runs, engine.settings.max_concurrent_agents, report)["credentials"]
    metrics.model_usage.replace({
        labels(credential=credential, window=w["window"]): w["utilization"]
        for credential, u in report.items() for w in u["windows"]})
    metrics.model_paused.replace({
        labels(credential=credential): float(u["paused"] is not None)
        for credential, u in report.items()})
    metrics.agents.replace({
        labels(credential=credential, state=state): float(u[state])
        for credential, u in usage.items() for state in ("running", "queued")})
    metrics.agent_slots.replace({labels(credential=credential): float(u["max_concurrent"])
                                 for credential, u in usage.items()})
    metrics.jobs.replace({labels(state=k): v for k, v in _counted(
        job.state.value for job in store.all("job", Job)).items()})
    metrics.turn_endings.replace({labels(code=k): v for k, v in _counted(
        run.ending["code"] for run in runs
        if run.kind != RunKind.VERIFY and run.ending and run.finished).items()})
    metrics.verifications.replace({labels(result=k): v for k, v in _counted(
        _result(run.verification.passed) for run in runs
        if run.verification is not None).items()})
    lands = store.all("land", LandRequest)
    metrics.land_requests.replace({labels(state=k): v for k, v in _counted(
        request.state.value for request in lands).items()})
    metrics.land_seconds.replace([
        landed - request.history[0]["at"] for request in lands
        if request.state == LandState.LANDED and (landed := _landed_at(request)) is not None])


def _counted(values: Any) -> dict[str, float]:
    return {key: float(n) for key, n in Counter(values).items()}


def _result(passed: bool | None) -> str:
    return "not_run" if passed is None else "passed" if passed else "failed"


def _landed_at(request: LandRequest) -> float | None:
    return next((step["at"] for step in reversed(request.history)
                 if step.get("state") == LandState.LANDED.value), None)
