"""hangar's side of the egress proxy: a run's egress credential and what it was refused.

The proxy itself is `proxy/egress.py`, on the sandbox gate; the sentences people read
are built in `app/render/` (`blocked_line`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from app.models import Run, RunState

if TYPE_CHECKING:
    from app.settings import Settings
    from proxy.egress import EgressLedger


class EgressContext(Protocol):
    """What hangar's side of the egress proxy uses of the engine, and nothing more (runs
    and environment builds hand theirs on): the ledger that issues a run's credential and
    keeps what it was refused, and the settings (the proxy's address)."""

    settings: Settings
    egress: EgressLedger | None


def egress_env(engine: EgressContext, run_id: str, sb: Any, spec: Any, *,
               step: str | None = None) -> dict[str, str]:
    """HTTP(S)_PROXY and NO_PROXY for the sandbox's processes: the gate, with a credential
    that carries the environment's allowlist; refusals are recorded under `run_id`. Empty
    without a ledger or for a sandbox whose network is not `loopback` (none: nothing to
    reach; host: everything).

    The agent's credential dies with the sandbox's git grant. A `step` (install, verify)
    runs after that grant is dropped, so it gets a credential of its own, which the
    caller ends with `end_egress`."""
    from proxy.egress import proxy_env

    if engine.egress is None or spec.network != "loopback":
        return {}
    user = sb.id if step is None else f"{sb.id}.{step}"
    token = engine.egress.issue(user, run_id=run_id, allow=spec.egress.allow,
                                narrowed=spec.egress.narrowed, hosts=spec.egress.hosts)
    return proxy_env(engine.settings.proxy_base_url, user, token)


def end_egress(engine: EgressContext, sb: Any, step: str) -> None:
    if engine.egress is not None:
        engine.egress.revoke(f"{sb.id}.{step}")


def verify_key(run_id: str) -> str:
    """Where the verify sandbox's refusals are kept: apart from the agent's, so each is
    shown with its own step."""
    return f"{run_id}:verify"


def refusals(engine: EgressContext, key: str) -> list[dict[str, Any]]:
    """The connections refused under `key` (a run, a run's verify, a build), as data."""
    if engine.egress is None:
        return []
    return [{"host": b.host, "port": b.port, "count": b.count, "first_at": b.first_at,
             "last_at": b.last_at, "reason": b.reason} for b in engine.egress.blocked(key)]


def egress_facts(engine: EgressContext, run: Run) -> dict[str, Any]:
    """The run's refused connections, for the status comment and the agent check run."""
    blocked = refusals(engine, run.id)
    return {"egress_blocked": blocked} if blocked else {}


def running_refusal_notes(engine: EgressContext, runs: list[Run]) -> list[str]:
    """For the status comment while agents run: what each was refused so far (the
    counts come with the agent's facts when it stops)."""
    from app.render import latest_turns, running_blocked_note

    running = [r for r in latest_turns(runs) if r.state == RunState.RUNNING]
    notes = (running_blocked_note(refusals(engine, r.id), r.attempt if len(running) > 1
                                  else None) for r in running)
    return [note for note in notes if note]
