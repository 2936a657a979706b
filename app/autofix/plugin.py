"""What auto-fix registers with the engine: its row and step, its commands, what it says
in a job's status comment, and looking at a head's CI once a turn on it is verified."""

from __future__ import annotations

from app.autofix.commands import handle_command
from app.autofix.intake import after_run_step
from app.autofix.rows import AutofixRow, give_up
from app.autofix.steps import advance_autofix, status_notes
from app.engine import Registrations, RowKind
from app.models import autofix_row_id, follows_repo


def register(engine: Registrations) -> None:
    engine.on_command({"autofix": handle_command, "autofix_button": handle_command,
                       "review_turn": handle_command})
    engine.register(RowKind("autofix", "autofix", AutofixRow, advance_autofix,
                            next_at=lambda row: row.due_at, give_up=give_up,
                            follows_rename=follows_repo(
                                lambda row: autofix_row_id(row.repo, row.pr_number))))
    # The end of a verified turn is when auto-fix looks at the head's CI.
    engine.after_step("run", after_run_step)
    engine.status_notes(status_notes)
