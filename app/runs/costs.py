"""A turn's own cost and tokens (pure).

The CLIs report their session's totals: Claude Code's total_cost_usd and Codex's
turn.completed usage count a resumed session's earlier turns too. A turn's own is the
gateway's metering of that run's requests, which is the truth where it exists; else the
CLI's figure less the totals the same session had at the previous turn's end. A price
hangar does not know is None ("unknown"), never 0.
"""

from __future__ import annotations

from typing import Any


def turn_usage(agent: dict[str, Any], previous: dict[str, Any] | None,
               gateway: Any | None) -> dict[str, Any]:
    """{cost_usd, input_tokens, output_tokens, cost_from} of this turn. `agent` and
    `previous` are runs' agent facts (sandbox.harness.AgentFacts, dumped); `gateway` the
    run's proxy.gateway.Usage, if its requests went through the gateway."""
    tokens = _own(agent.get("session_tokens"), _same_session(agent, previous, "session_tokens"))
    cost = agent.get("cost_usd")
    if cost is None:
        cost = _own(agent.get("session_cost_usd"),
                    _same_session(agent, previous, "session_cost_usd"))
    metered = gateway if gateway is not None and gateway.requests > 0 else None
    if metered is not None:
        tokens = {"input": metered.input_tokens, "output": metered.output_tokens}
        cost = metered.cost_usd if metered.cost_usd is not None else cost
    tokens = tokens or {}
    return {"cost_usd": None if cost is None else round(cost, 6),
            "input_tokens": tokens.get("input"), "output_tokens": tokens.get("output"),
            "cost_from": "gateway" if metered is not None and metered.cost_usd is not None else
            "agent" if cost is not None else None}


def _same_session(agent: dict, previous: dict | None, key: str) -> Any:
    """The previous turn's totals, if this turn resumed its session."""
    if not previous or not agent.get("session_id"):
        return None
    if previous.get("session_id") != agent.get("session_id"):
        return None  # a new session counts from nothing
    return previous.get(key)


def _own(total: Any, before: Any) -> Any:
    """`total` less `before` (numbers, or {"input", "output"} dicts); a total below what
    came before is a count that started again, so it is the turn's own."""
    if total is None or before is None:
        return total
    if isinstance(total, dict):
        if not isinstance(before, dict):
            return total
        own = {k: total.get(k, 0) - before.get(k, 0) for k in ("input", "output")}
        return total if any(v < 0 for v in own.values()) else own
    own = total - before
    return total if own < 0 else own
