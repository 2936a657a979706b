"""What the commands concern registers with the engine: the intent row and its step,
what every command shares (help, usage), and waking a command that waited for a turn."""

from __future__ import annotations

from app.commands.intents import ACTIONS, give_up, process_intent, wake_waiting
from app.engine import Registrations, RowKind
from app.models import Intent, follows_thread


def register(engine: Registrations) -> None:
    engine.on_command(ACTIONS)
    engine.register(RowKind("intent", "intent", Intent, process_intent,
                            next_at=lambda row: row.retry_at, give_up=give_up,
                            waits_for_rebuild=True, follows_rename=follows_thread))
    # A finished run step may free what a waiting command asked for.
    engine.after_step("run", wake_waiting)
