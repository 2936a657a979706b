"""The harness parsers on real output of the pinned CLIs (made by
scripts/capture-agent-fixtures.py against the scripted model server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox.harness import ClaudeHarness, CodexHarness, classify_failure

FIXTURES = Path(__file__).parent / "fixtures" / "agents"
HARNESSES = {"claude": ClaudeHarness(), "codex": CodexHarness()}

# (cli, case): (failure, http_status, words in the error message or summary)
CASES = {
    ("claude", "ok"): (None, None, "I fixed add() in calc.py"),
    ("claude", "ok-turn2"): (None, None, "I documented add()"),
    ("claude", "rate-limit"): ("rate_limit", 429, "exceed your rate limit"),
    ("claude", "refused-key"): ("auth", 401, "Invalid API key"),
    ("claude", "unreachable"): ("unreachable", None, "Connection refused"),
    ("claude", "resume-failed"): ("resume_failed", None, "No conversation found"),
    ("claude", "subscription"): (None, None, "I fixed add() in calc.py"),
    ("claude", "usage-limit"): ("rate_limit", 429, "hit your weekly limit"),
    ("codex", "ok"): (None, None, "I fixed add() in calc.py"),
    ("codex", "ok-turn2"): (None, None, "I documented add()"),
    ("codex", "rate-limit"): ("rate_limit", 429, "429 Too Many Requests"),
    ("codex", "refused-key"): ("auth", 401, "401 Unauthorized"),
    ("codex", "unreachable"): ("unreachable", None, "waiting for network"),
    ("codex", "resume-failed"): ("resume_failed", None, "no rollout found"),
    ("codex", "subscription"): (None, None, "I fixed add() in calc.py"),
    ("codex", "usage-limit"): ("rate_limit", None, "hit your usage limit"),
}  # fmt: skip


@pytest.mark.parametrize(("cli", "case"), sorted(CASES))
def test_real_output_is_read_right(cli, case):
    failure, status, words = CASES[(cli, case)]
    facts = HARNESSES[cli].parse((FIXTURES / f"{cli}-{case}.log").read_text())
    assert facts.failure == failure
    assert facts.http_status == status
    if failure is None:
        assert words in facts.summary
        assert facts.session_id and facts.turns
        assert facts.error_message is None
    else:
        assert words in facts.error_message
        assert facts.summary is None  # an error is never shown as the agent's account


def test_a_follow_up_keeps_the_first_turns_session():
    for cli, harness in HARNESSES.items():
        first = harness.parse((FIXTURES / f"{cli}-ok.log").read_text())
        second = harness.parse((FIXTURES / f"{cli}-ok-turn2.log").read_text())
        assert second.session_id == first.session_id, cli


def test_codex_reconnect_notices_are_one_warning_not_failures():
    facts = CodexHarness().parse((FIXTURES / "codex-rate-limit.log").read_text())
    reconnects = [w for w in facts.warnings if w.startswith("codex reconnected")]
    assert reconnects == ["codex reconnected 2 time(s): 2/2 (exceeded retry limit, last "
                          "status: 429 Too Many Requests)"]


@pytest.mark.parametrize(("status", "message", "kind"), [
    (429, "anything", "rate_limit"),
    (None, "exceeded retry limit, last status: 429 Too Many Requests", "rate_limit"),
    (401, "Invalid API key", "auth"),
    (403, "forbidden", "auth"),
    (None, "unexpected status 401 Unauthorized", "auth"),
    (502, "hangar could not reach the model endpoint https://api.anthropic.com", "unreachable"),
    (None, "API Error: Connection refused (ECONNREFUSED)", "unreachable"),
    (None, "no rollout found for thread id 1", "resume_failed"),
    (500, "Internal server error", "api_error"),
])  # fmt: skip
def test_classify_failure(status, message, kind):
    assert classify_failure(status, message) == kind
