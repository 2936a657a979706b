"""Auto-fix turns: when CI fails on a hangar PR, hangar tries to fix it, within a bound.

Per PR one durable row says what was tried. A turn starts only when every check suite
and status on the PR's current head has finished and one failed; it carries the failures'
evidence. It never starts while another turn runs, never past `autofix.max_turns`, never
when the failure repeats the previous turn's, never while a human pushed recently, and
never while the PR is being merged. When hangar stops trying it says why.

This file is the concern's face: code outside this folder imports auto-fix only from
here. Inside, each file holds one kind of thing, and imports its siblings by their own
paths (never this face), in this order: rules ← rows ← steps ← intake, commands.

- rules.py: the pure decisions and texts built from data (why a turn may not start, the
  same-failure signature, the turn prompts) and the concern's constants.
- rows.py: the auto-fix row (`AutofixRow`, kept in app.models) and its persistence.
- steps.py: the steps with I/O: the row's step, the turns it starts, the evidence read
  from GitHub, the status notes.
- intake.py: what auto-fix does when the engine records an event or ends a run step.
- commands.py: `/hangar autofix on|off`, the "Fix with hangar" button, review turns.
- plugin.py: `register(engine)`: the row kind, commands, hook and status notes.
- context.py: `AutofixContext`: what auto-fix's steps and helpers use of the engine, and
  nothing more (a test passes a small object of its own).
"""

from app.autofix.intake import on_ci, on_pull_request, on_review
from app.autofix.plugin import register
from app.autofix.rows import AutofixRow, autofix_row_id, ensure_row, get_row, patch, row_id, save
from app.autofix.rules import (
    EVIDENCE_CHARS,
    PROMPT_CHARS,
    PUSH_WORD_GRACE_S,
    TRUNCATED,
    Failure,
    Stop,
    failing_lines,
    failure_signature,
    kept,
    prompt_for_failures,
    prompt_for_review,
    why_not,
)
from app.autofix.steps import advance_autofix, collect_failures

__all__ = [
    "EVIDENCE_CHARS",
    "PROMPT_CHARS",
    "PUSH_WORD_GRACE_S",
    "TRUNCATED",
    "AutofixRow",
    "Failure",
    "Stop",
    "advance_autofix",
    "autofix_row_id",
    "collect_failures",
    "ensure_row",
    "failing_lines",
    "failure_signature",
    "get_row",
    "kept",
    "on_ci",
    "on_pull_request",
    "on_review",
    "patch",
    "prompt_for_failures",
    "prompt_for_review",
    "register",
    "row_id",
    "save",
    "why_not",
]
