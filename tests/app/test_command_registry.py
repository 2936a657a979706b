"""Every command has an action, and every intent hangar records names one: a command
without its action, or an ask that names no command, fails here rather than at run time."""

from __future__ import annotations

import ast
from pathlib import Path

from app.commands import grammar as commands
from app.commands.intents import INTERNAL
from app.wiring import command_actions

APP = Path(__file__).resolve().parents[2] / "app"


def test_each_command_has_an_action_and_each_action_a_command():
    declared = {spec.name for spec in commands.COMMANDS}
    assert declared - set(command_actions()) == set()
    assert set(command_actions()) - declared == set(INTERNAL)


def test_each_command_is_in_the_help():
    text = commands.help_text()
    for spec in commands.COMMANDS:
        assert spec.usage.replace("|", "\\|") in text, spec.name


def _recorded_commands() -> set[str]:
    """The command names hangar's own code records intents with: `Intent(command=…)`
    and the API's `record_ask(call, job, "…")`."""
    found = set()
    for path in APP.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", None)
            for kw in node.keywords if name == "Intent" else ():
                if kw.arg == "command" and isinstance(kw.value, ast.Constant):
                    found.add(kw.value.value)
                if kw.arg == "command" and isinstance(kw.value, ast.IfExp):
                    found |= {v.value for v in (kw.value.body, kw.value.orelse)
                              if isinstance(v, ast.Constant)}
            asked = node.args[2] if name == "record_ask" and len(node.args) >= 3 else None
            if isinstance(asked, ast.Constant):
                found.add(asked.value)
    return found


def test_every_intent_hangar_records_names_an_action():
    recorded = _recorded_commands()
    assert {"run", "try", "pick", "land", "review_turn"} <= recorded  # the scan sees them
    assert recorded - set(command_actions()) == set()
