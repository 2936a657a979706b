"""Auto-fix's commands: `/hangar autofix on|off`, the "Fix with hangar" button on the
verify check, and the review_turn intent a change request saves."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.autofix.rows import ensure_row, patch
from app.autofix.rules import Stop, kept
from app.autofix.steps import fix_now, review_turn, show
from app.commands import hangar_pr_job
from app.models import Intent
from app.render.reasons import Why

if TYPE_CHECKING:
    from app.autofix.context import AutofixContext
    from app.github.ops import RepoOps


async def handle_command(engine: AutofixContext, ops: RepoOps, intent: Intent) -> str:
    job = await hangar_pr_job(engine, ops, intent)
    if job is None:
        return "not a hangar PR"
    row = ensure_row(engine, job, intent.thread.number)
    if intent.command == "autofix":
        enabled = bool(intent.args["enabled"])
        # Turning it back on forgets what was decided while it was off.
        patch(engine, row.id, enabled=enabled, due_at=0,
              stopped=None if enabled else kept(Why(Stop.OFF_FOR_PR)),
              seen_heads=row.seen_heads if not enabled else [])
        show(engine, job)
        return f"autofix {'on' if enabled else 'off'}"
    if intent.command == "review_turn":
        return await review_turn(engine, ops, job, row, {"author": intent.author, **intent.args})
    # the "Fix with hangar" button: the person who pressed it asked for the turn
    return await fix_now(engine, ops, job, row, requested=True, requested_by=intent.author)
