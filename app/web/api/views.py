"""What the API answers about hangar's rows: a run, a job with its runs and land
requests, a fan-out's ranking, a land request, and the usage per model credential (the
fleet page and the gauges show the same)."""

from __future__ import annotations

from app import render
from app.landing import LandRequest, land_id
from app.models import Job, Run, RunKind
from app.runs import credential_key

RUN_HIDDEN = {"env", "watch", "sandbox"}


def run_view(run: Run) -> dict:
    return run.model_dump(mode="json", exclude=RUN_HIDDEN)


def job_view(engine, job: Job) -> dict:
    runs = engine.runs_of(job.id)
    prs = sorted({r.pr_number for r in runs if r.pr_number})
    lands = [engine.store.get("land", land_id(job.thread.repo, n), LandRequest) for n in prs]
    return {
        "job": job.model_dump(mode="json", exclude={"rendered"}),
        "runs": [run_view(r) for r in runs],
        "prs": prs,
        "land_requests": [land_view(r) for r in lands if r is not None],
        "timeline": [{"at": at, "what": what} for at, what in engine.store.notes(job.id)],
    }


def ranking_view(engine, job: Job) -> dict:
    """The attempts of `try N`: the ranking once every attempt finished, else their states."""
    latest = render.latest_turns(engine.runs_of(job.id))
    attempts = [{
        "attempt": r.attempt, "run": r.id, "state": r.state.value, "stage": r.stage.value,
        "finished": r.finished, "pr": r.pr_number, "head_sha": r.head_sha,
        "verified": None if r.verification is None else r.verification.passed,
    } for r in sorted(latest, key=lambda r: r.attempt)]
    return {"job": job.id, "attempts_asked": job.attempts, "final": bool(job.ranking),
            "ranking": job.ranking, "winner": job.winner, "attempts": attempts,
            "grading": job.grading or None}


def land_view(request: LandRequest) -> dict:
    view = request.model_dump(mode="json", exclude={"shown", "explained", "version", "due_at"})
    view["awaiting"] = ("a person's approving review of the head on GitHub; no API call can "
                        "approve" if request.state == "awaiting_approval" else None)
    return view


def usage_view(runs: list[Run], max_agents: int, report: dict[str, dict] | None = None) -> dict:
    """Per model credential: agents running and queued against the cap, turns and the sum
    of their own costs (a turn whose price is unknown is counted, not priced), the last
    rate-limit report an agent gave, and from the ledger (`report`, app.runs.usage_report)
    its usage windows and its pause."""
    out: dict[str, dict] = {}

    def entry(credential: str) -> dict:
        return out.setdefault(credential, {
            "running": 0, "queued": 0, "max_concurrent": max_agents, "turns": 0,
            "agent_turns": 0, "cost_usd": 0.0, "cost_unknown_turns": 0,
            "input_tokens": 0, "output_tokens": 0, "rate_limit": None,
            "windows": [], "paused": None, "resumed": None})

    for run in sorted(runs, key=lambda r: r.started_at or r.queued_at):
        if run.kind == RunKind.VERIFY:
            continue
        u = entry(credential_key(run))
        if not run.finished and run.state.value in ("running", "queued"):
            u[run.state.value] += 1
        if run.started_at is not None:
            u["turns"] += 1
        u["agent_turns"] += run.agent.get("turns") or 0
        cost = run.agent.get("cost_usd")
        if isinstance(cost, int | float):
            u["cost_usd"] = round(u["cost_usd"] + cost, 6)
        elif run.agent.get("input_tokens") or run.agent.get("output_tokens"):
            u["cost_unknown_turns"] += 1
        u["input_tokens"] += run.agent.get("input_tokens") or 0
        u["output_tokens"] += run.agent.get("output_tokens") or 0
        if run.agent.get("rate_limit"):
            u["rate_limit"] = run.agent["rate_limit"]
    for credential, usage in (report or {}).items():
        entry(credential).update(usage)
    return {"credentials": out}
