"""Harness command lines and parsers, on transcripts shaped like the real ones."""

from __future__ import annotations

import json

import pytest

from sandbox.envspec import EnvSpec
from sandbox.harness import (
    AGENT_SCRIPT_PATH,
    CLAUDE_SETTINGS_PATH,
    CODEX_HOME,
    CODEX_TOKEN_ENV,
    ClaudeHarness,
    CodexHarness,
    ModelRoute,
    ScriptHarness,
    harness_for,
)


def jsonl(*events: dict) -> str:
    return "".join(json.dumps(e) + "\n" for e in events)


SESSION = "40e7b02d-c0f9-4876-9010-f514d4eb0603"
CLAUDE_INIT = {
    "type": "system", "subtype": "init", "cwd": "/workspace/repo", "session_id": SESSION,
    "tools": ["Task", "Bash", "Glob", "Grep", "Read", "Edit", "Write"], "mcp_servers": [],
    "model": "claude-sonnet-4-5-20250929", "permissionMode": "bypassPermissions",
    "apiKeySource": "ANTHROPIC_API_KEY", "claude_code_version": "2.1.3", "uuid": "u-1",
}  # fmt: skip
CLAUDE_ASSISTANT_TOOL = {
    "type": "assistant",
    "message": {
        "id": "msg_01", "type": "message", "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": [{"type": "tool_use", "id": "toolu_01", "name": "Bash",
                     "input": {"command": "python3 -m unittest -q"}}],
        "stop_reason": None,
        "usage": {"input_tokens": 4, "cache_creation_input_tokens": 2000, "output_tokens": 60},
    },
    "parent_tool_use_id": None, "session_id": SESSION, "uuid": "u-2",
}  # fmt: skip
CLAUDE_USER_RESULT = {
    "type": "user",
    "message": {"role": "user", "content": [
        {"tool_use_id": "toolu_01", "type": "tool_result", "content": "OK", "is_error": False}]},
    "parent_tool_use_id": None, "session_id": SESSION, "uuid": "u-3",
}  # fmt: skip
CLAUDE_RATE_LIMIT = {
    "type": "rate_limit_event",
    "rate_limit_info": {
        "status": "allowed_warning", "resetsAt": 1778565600, "rateLimitType": "five_hour",
        "overageStatus": "allowed", "isUsingOverage": False,
    },
    "uuid": "u-4", "session_id": SESSION,
}  # fmt: skip
CLAUDE_ASSISTANT_TEXT = {
    "type": "assistant",
    "message": {"id": "msg_02", "type": "message", "role": "assistant",
                "content": [{"type": "text", "text": "Fixed the flaky test; PR #99 is ready."}]},
    "parent_tool_use_id": None, "session_id": SESSION, "uuid": "u-5",
}  # fmt: skip
CLAUDE_RESULT = {
    "type": "result", "subtype": "success", "is_error": False, "duration_ms": 8722,
    "duration_api_ms": 21034, "num_turns": 4,
    "result": "Fixed the flaky test; PR #99 is ready.", "session_id": SESSION,
    "total_cost_usd": 0.24722425,
    "usage": {"input_tokens": 18, "cache_creation_input_tokens": 25067,
              "cache_read_input_tokens": 17254, "output_tokens": 424,
              "server_tool_use": {"web_search_requests": 0}, "service_tier": "standard"},
    "modelUsage": {"claude-sonnet-4-5-20250929": {"inputTokens": 38, "costUSD": 0.228}},
    "permission_denials": [], "uuid": "u-6",
}  # fmt: skip


def test_script_harness_command_files_and_summary():
    harness = ScriptHarness("echo hello\n")
    argv, env = harness.command("fix the test", turn=2)
    assert argv == ["bash", AGENT_SCRIPT_PATH]
    assert env == {"HANGAR_PROMPT": "fix the test", "HANGAR_TURN": "2"}
    assert harness.files() == {AGENT_SCRIPT_PATH: b"echo hello\n"}
    log = "".join(f"line {i}\n" for i in range(1, 31))
    facts = harness.parse(log)
    assert facts.summary.splitlines() == [f"line {i}" for i in range(11, 31)]
    assert harness.parse("").summary is None


def test_claude_command_keeps_prompt_an_argument_and_resumes():
    harness = ClaudeHarness()
    argv, env = harness.command("--help me", turn=1)
    assert argv[:5] == ["claude", "-p", "--output-format", "stream-json", "--verbose"]
    assert argv[-2:] == ["--", "--help me"]
    assert "--resume" not in argv
    assert "ANTHROPIC_API_KEY" not in env and "--settings" not in argv  # no route, no key
    assert {k: env[k] for k in ("DISABLE_TELEMETRY", "DISABLE_AUTOUPDATER",
                                "DISABLE_ERROR_REPORTING", "IS_SANDBOX",
                                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC")} == dict.fromkeys(
        ("DISABLE_TELEMETRY", "DISABLE_AUTOUPDATER", "DISABLE_ERROR_REPORTING", "IS_SANDBOX",
         "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"), "1")
    argv, _ = harness.command("and now the docs", turn=2, session_id=SESSION)
    assert argv[argv.index("--resume") + 1] == SESSION


def test_claude_reaches_its_model_through_the_route_with_settings_that_win():
    route = ModelRoute("http://127.0.0.1:8787/model/sb-1", "hgm_token")
    argv, env = ClaudeHarness().command("go", turn=1, model=route)
    assert env["ANTHROPIC_BASE_URL"] == route.base_url and env["ANTHROPIC_API_KEY"] == "hgm_token"
    assert argv[argv.index("--settings") + 1] == CLAUDE_SETTINGS_PATH
    settings = json.loads(ClaudeHarness().files(route)[CLAUDE_SETTINGS_PATH])
    assert settings["env"]["ANTHROPIC_BASE_URL"] == route.base_url


def test_codex_reaches_its_model_through_overrides_that_win():
    route = ModelRoute("http://127.0.0.1:8787/model/sb-1", "hgm_token")
    argv, env = CodexHarness().command("go", turn=1, model=route)
    overrides = [argv[i + 1] for i, a in enumerate(argv) if a == "-c"]
    assert 'model_providers.hangar.base_url="http://127.0.0.1:8787/model/sb-1/v1"' in overrides
    assert 'model_providers.hangar.wire_api="responses"' in overrides
    assert "model_providers.hangar.supports_websockets=false" in overrides
    assert "analytics.enabled=false" in overrides and "features.plugins=false" in overrides
    assert env == {"CODEX_HOME": CODEX_HOME, CODEX_TOKEN_ENV: "hgm_token"}
    config = CodexHarness().files(route)[f"{CODEX_HOME}/config.toml"].decode()
    assert 'model_provider = "hangar"' in config


def test_claude_parses_a_full_stream():
    log = jsonl(
        CLAUDE_INIT, CLAUDE_ASSISTANT_TOOL, CLAUDE_USER_RESULT, CLAUDE_RATE_LIMIT,
        CLAUDE_ASSISTANT_TEXT, CLAUDE_RESULT,
    )  # fmt: skip
    facts = ClaudeHarness().parse(log)
    assert facts.session_id == SESSION
    assert facts.summary == "Fixed the flaky test; PR #99 is ready."
    assert facts.turns == 4
    # The session's total so far; the turn's own comes from hangar (app/runs/costs.py).
    assert facts.session_cost_usd == pytest.approx(0.24722425)
    assert facts.session_tokens == {"input": 38, "output": 0}
    assert facts.cost_usd is None  # no model_usage_since_last_result in this result
    assert facts.usage["output_tokens"] == 424
    assert facts.rate_limit["status"] == "allowed_warning"
    assert facts.rate_limit["rateLimitType"] == "five_hour"
    assert facts.warnings == ["model rate limit: allowed_warning"]


def test_claude_truncated_last_line_and_unknown_types_are_warnings():
    cut = json.dumps(CLAUDE_RESULT)[:70]
    log = jsonl(CLAUDE_INIT, {"type": "future_event", "x": 1}, CLAUDE_ASSISTANT_TEXT) + cut
    facts = ClaudeHarness().parse(log)
    assert facts.session_id == SESSION
    assert facts.cost_usd is None and facts.usage == {}
    assert facts.summary == "Fixed the flaky test; PR #99 is ready."  # last assistant text
    assert facts.turns == 1
    text = " | ".join(facts.warnings)
    assert "last line of the agent's output is cut off" in text
    assert "unknown type: future_event" in text
    assert "no final result event" in text


def test_claude_rejected_rate_limit_and_error_result():
    rejected = {
        "type": "rate_limit_event",
        "rate_limit_info": {"status": "rejected", "resetsAt": 1778565600,
                            "rateLimitType": "five_hour"},
    }  # fmt: skip
    error_result = CLAUDE_RESULT | {
        "subtype": "error_during_execution", "is_error": True, "result": None,
        "total_cost_usd": 0.01, "num_turns": 1,
    }  # fmt: skip
    facts = ClaudeHarness().parse(jsonl(CLAUDE_INIT, rejected, error_result))
    assert facts.rate_limit == rejected["rate_limit_info"]
    assert facts.summary is None
    assert facts.session_cost_usd == pytest.approx(0.01)
    assert [(r["window"], r["utilization"], r["reset_at"], r["status"])
            for r in facts.rate_limits] == [("5h", 1.0, 1778565600, "rejected")]
    assert "model rate limit: rejected" in facts.warnings
    assert "the agent ended with an error: error_during_execution" in facts.warnings


def test_claude_garbage_never_raises():
    for log in ["", "\n\n", "not json at all\n", "[1,2]\n", '{"type": null}\n', "{" * 50]:
        facts = ClaudeHarness().parse(log)
        assert facts.summary is None and facts.cost_usd is None
        assert facts.warnings  # every one says what was missing


THREAD = "0199a213-81c0-7800-8aa1-bbab2a035a53"
CODEX_EVENTS = [
    {"type": "thread.started", "thread_id": THREAD},
    {"type": "turn.started"},
    {"type": "item.completed", "item": {"id": "item_0", "type": "reasoning",
                                        "text": "**Looking at the failing test**"}},
    {"type": "item.started", "item": {"id": "item_1", "type": "command_execution",
                                      "command": "bash -lc 'python3 -m unittest -q'",
                                      "aggregated_output": "", "exit_code": None,
                                      "status": "in_progress"}},
    {"type": "item.completed", "item": {"id": "item_1", "type": "command_execution",
                                        "command": "bash -lc 'python3 -m unittest -q'",
                                        "aggregated_output": "OK\n", "exit_code": 0,
                                        "status": "completed"}},
    {"type": "item.completed", "item": {"id": "item_2", "type": "file_change",
                                        "changes": [{"path": "tests/test_sync.py",
                                                     "kind": "update"}],
                                        "status": "completed"}},
    {"type": "item.completed", "item": {"id": "item_3", "type": "agent_message",
                                        "text": "The sync test no longer races."}},
    {"type": "turn.completed", "usage": {"input_tokens": 24763, "cached_input_tokens": 24448,
                                         "output_tokens": 122}},
]  # fmt: skip


def test_codex_command():
    argv, env = CodexHarness().command("-x do it", turn=1)
    assert argv[:3] == ["codex", "exec", "--json"]
    assert argv[-2:] == ["--", "-x do it"]
    assert env == {"CODEX_HOME": CODEX_HOME}
    argv, _ = CodexHarness().command("more", turn=2, session_id=THREAD)
    assert argv[:4] == ["codex", "exec", "resume", THREAD]


def test_codex_parses_a_full_stream():
    facts = CodexHarness().parse(jsonl(*CODEX_EVENTS))
    assert facts.session_id == THREAD
    assert facts.summary == "The sync test no longer races."
    assert facts.turns == 1
    assert facts.cost_usd is None
    assert facts.usage == {"input_tokens": 24763, "cached_input_tokens": 24448,
                           "output_tokens": 122}  # fmt: skip
    assert facts.rate_limit is None
    assert facts.warnings == []


def test_codex_rate_limit_failure_and_truncated_line():
    failed = [
        *CODEX_EVENTS[:2],
        {"type": "error", "message": "stream error: exceeded retry limit, last status: "
                                     "429 Too Many Requests"},
        {"type": "turn.failed", "error": {"message": "You've hit your usage limit. "
                                                     "Try again in 3 hours."}},
    ]  # fmt: skip
    log = jsonl(*failed) + '{"type":"item.completed","item":{"id":"item_9","ty'
    facts = CodexHarness().parse("Reading prompt from stdin...\n" + log)
    assert facts.session_id == THREAD
    assert facts.rate_limit["status"] == "rejected"
    assert "usage limit" in facts.rate_limit["message"]
    text = " | ".join(facts.warnings)
    assert "429 Too Many Requests" in text
    assert "cut off" in text
    assert "were not JSON events" in text
    assert "no turn.completed event" in text
    assert facts.summary is None


def test_harness_for_spec():
    script = harness_for(EnvSpec(name="s", agent_script="echo hi"))
    assert isinstance(script, ScriptHarness)
    assert harness_for(EnvSpec(name="s", agent_script="echo hi"), script="echo job").script == (
        "echo job"
    )
    with pytest.raises(ValueError, match="needs agent_script"):
        harness_for(EnvSpec(name="s"))
    claude = harness_for(EnvSpec(name="c", harness="claude", model_credential_env="MY_KEY"))
    assert isinstance(claude, ClaudeHarness) and claude.program == "claude"
    codex = harness_for(EnvSpec(name="x", harness="codex", agent_command="/opt/codex"))
    assert codex.program == "/opt/codex"
    assert isinstance(harness_for(EnvSpec(name="x", harness="codex")), CodexHarness)
    # An image hangar built with the CLI in it: the CLI by its full path there, since
    # sandboxed processes get hangar's PATH, not the image's.
    built = EnvSpec(name="x", harness="claude", provider="docker",
                    image_recipe={"agent_clis": ["claude"]})
    assert harness_for(built).program == "/usr/local/lib/hangar-agent-clis/claude"
