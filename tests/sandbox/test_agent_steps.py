"""The agent's steps while it runs, read from the event streams the real CLIs printed
(fixtures recorded by scripts/capture-agent-fixtures.py) and from hostile lines."""

from __future__ import annotations

import json
from pathlib import Path

from sandbox.harness import ClaudeHarness, CodexHarness, ScriptHarness

FIXTURES = Path(__file__).parent / "fixtures" / "agents"
FIX_COMMAND = ("python3 -m unittest -q && git commit -qam "
               "'Fix add(): it subtracted instead of adding'")


def lines(steps) -> list[tuple[str, str, int | None, bool, bool]]:
    return [(s.verb, s.subject, s.exit_code, s.failed, s.running) for s in steps]


def test_claude_steps_are_its_tool_uses_in_order():
    steps = ClaudeHarness().steps((FIXTURES / "claude-ok.log").read_text())
    assert lines(steps) == [("read", "./calc.py", None, False, False),
                            ("wrote", "./calc.py", None, False, False),
                            ("ran", FIX_COMMAND, None, False, False)]


def test_claude_marks_the_step_whose_result_is_an_error():
    log = "".join(json.dumps(e) + "\n" for e in (
        {"type": "assistant", "message": {"content": [
            {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "pytest -q"}},
            {"type": "tool_use", "id": "t2", "name": "Edit", "input": {"file_path": "src/a.py"}},
            {"type": "tool_use", "id": "t3", "name": "mcp__x__y", "input": {}}]}},
        {"type": "user", "message": {"content": [
            {"type": "tool_result", "tool_use_id": "t1", "is_error": True, "content": "1 failed"},
            {"type": "tool_result", "tool_use_id": "t2", "is_error": False}]}}))
    assert lines(ClaudeHarness().steps(log)) == [
        ("ran", "pytest -q", None, True, False), ("edited", "src/a.py", None, False, False),
        ("used", "mcp__x__y", None, False, False)]


def test_codex_steps_are_its_commands_with_exit_codes_and_file_changes():
    steps = CodexHarness().steps((FIXTURES / "codex-ok.log").read_text())
    assert steps[0].subject == "cat calc.py"  # bash -lc '...' unwrapped
    assert lines(steps)[2] == ("ran", FIX_COMMAND, 0, False, False)
    assert len(steps) == 3
    log = "".join(json.dumps(e) + "\n" for e in (
        {"type": "item.started", "item": {
            "id": "i1", "type": "command_execution", "command": "bash -lc 'pytest -q'",
            "status": "in_progress"}},
        {"type": "item.completed", "item": {
            "id": "i2", "type": "file_change", "status": "completed",
            "changes": [{"path": "a.py", "kind": "update"}, {"path": "b.py", "kind": "add"}]}},
    ))
    assert lines(CodexHarness().steps(log)) == [
        ("ran", "pytest -q", None, False, True), ("edited", "a.py", None, False, False),
        ("added", "b.py", None, False, False)]
    done = log + json.dumps({"type": "item.completed", "item": {
        "id": "i1", "type": "command_execution", "command": "bash -lc 'pytest -q'",
        "exit_code": 1, "status": "failed"}}) + "\n"
    assert lines(CodexHarness().steps(done))[0] == ("ran", "pytest -q", 1, False, False)


def test_a_script_step_is_each_line_it_printed():
    assert lines(ScriptHarness("true").steps("reading calc.py\n\n  \nrunning tests\n")) == [
        ("printed", "reading calc.py", None, False, False),
        ("printed", "running tests", None, False, False)]


def test_garbage_and_huge_subjects_never_raise_and_stay_bounded():
    junk = "\n".join(["{", "[1,2]", json.dumps({"type": "assistant", "message": "x"}),
                      json.dumps({"type": "assistant", "message": {"content": [
                          {"type": "tool_use", "name": 7, "input": "x"},
                          {"type": "tool_use", "name": "Bash",
                           "input": {"command": "x" * 10_000}}]}}),
                      json.dumps({"type": "item.completed", "item": {"type": "command_execution",
                                                                    "command": ["a"]}})])
    claude = ClaudeHarness().steps(junk)
    assert [s.verb for s in claude] == ["used", "ran"] and len(claude[1].subject) == 200
    assert lines(CodexHarness().steps(junk)) == [("ran", "", None, False, False)]
