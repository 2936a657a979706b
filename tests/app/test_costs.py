"""A turn's own cost and tokens, from the pinned CLIs' real output of a first turn and of
a follow-up that resumed its session (their figures count the whole session)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.runs.costs import turn_usage
from proxy.gateway import Usage
from proxy.prices import price
from sandbox.harness import ClaudeHarness, CodexHarness

FIXTURES = Path(__file__).parents[1] / "sandbox" / "fixtures" / "agents"


def facts(harness, name: str) -> dict:
    return harness.parse((FIXTURES / f"{name}.log").read_text()).model_dump()


def metered(input_tokens: int, output_tokens: int, cost: float | None) -> Usage:
    return Usage("run-2", "ANTHROPIC_API_KEY", 3, input_tokens, output_tokens, cost, 200,
                 None, None)


def test_claude_reports_the_session_so_far_and_the_turn_is_what_it_added():
    first, second = facts(ClaudeHarness(), "claude-ok"), facts(ClaudeHarness(), "claude-ok-turn2")
    assert second["session_id"] == first["session_id"]
    assert second["session_cost_usd"] == pytest.approx(0.371872)  # both turns
    own = turn_usage(second, first, None)
    assert own["cost_usd"] == pytest.approx(0.162012)
    assert (own["input_tokens"], own["output_tokens"]) == (39778, 145)
    assert own["cost_from"] == "agent"
    # Without Claude Code's own per-turn figure: the difference of the session's totals.
    second["cost_usd"] = None
    assert turn_usage(second, first, None)["cost_usd"] == pytest.approx(0.371872 - 0.20986)
    # The first turn is its session's first: all of it is its own.
    assert turn_usage(first, None, None)["cost_usd"] == pytest.approx(0.20986)


def test_claudes_own_prices_are_hangars_for_its_default_models():
    first = facts(ClaudeHarness(), "claude-ok")  # an API key: claude-opus-5-5
    assert price("claude-opus-5-5", 51585, 176) == pytest.approx(first["session_cost_usd"])
    plan = facts(ClaudeHarness(), "claude-subscription")  # a plan: claude-sonnet-5-5
    assert price("claude-sonnet-5-5", 51395, 176) == pytest.approx(plan["session_cost_usd"])


def test_codex_counts_the_resumed_sessions_tokens_and_the_turn_is_what_it_added():
    first, second = facts(CodexHarness(), "codex-ok"), facts(CodexHarness(), "codex-ok-turn2")
    assert first["session_tokens"] == {"input": 39420, "output": 231}
    assert second["session_tokens"] == {"input": 70340, "output": 428}
    own = turn_usage(second, first, None)
    assert (own["input_tokens"], own["output_tokens"]) == (30920, 197)
    assert own["cost_usd"] is None and own["cost_from"] is None  # codex reports no cost


def test_the_gateways_metering_of_the_run_wins():
    first, second = facts(ClaudeHarness(), "claude-ok"), facts(ClaudeHarness(), "claude-ok-turn2")
    own = turn_usage(second, first, metered(39000, 140, 0.158))
    assert own == {"cost_usd": 0.158, "input_tokens": 39000, "output_tokens": 140,
                   "cost_from": "gateway"}
    # A model the gateway has no price for: the CLI's own figure for the cost.
    own = turn_usage(second, first, metered(39000, 140, None))
    assert own["cost_usd"] == pytest.approx(0.162012) and own["input_tokens"] == 39000
    assert own["cost_from"] == "agent"


def test_an_unknown_price_stays_unknown_never_zero():
    second = facts(CodexHarness(), "codex-ok-turn2")
    own = turn_usage(second, facts(CodexHarness(), "codex-ok"), metered(30920, 197, None))
    assert own["cost_usd"] is None and own["input_tokens"] == 30920


def test_a_new_session_is_not_less_the_old_ones_totals():
    first = facts(ClaudeHarness(), "claude-ok")
    fresh = facts(ClaudeHarness(), "claude-subscription")  # another session
    fresh["cost_usd"] = None
    assert turn_usage(fresh, first, None)["cost_usd"] == pytest.approx(0.10455)
    # Totals below the previous turn's: the CLI counted from nothing again.
    again = dict(first, session_cost_usd=0.05, cost_usd=None, session_tokens={"input": 10,
                                                                             "output": 1})
    own = turn_usage(again, first, None)
    assert (own["cost_usd"], own["input_tokens"]) == (0.05, 10)
