"""`/hangar` commands: each command's declaration, and what every command shares.

- grammar.py  each command's declaration (usage, help, who, where) and the grammar that
              reads a comment into commands; `/hangar help` is made from the declarations
- intents.py  an intent per command: its intake (a comment, a review, a button), who and
              where checked once, the 👀 reaction, the action of the concern that owns the
              command, one reply per comment, the rows a command starts
- plugin.py   `register(engine)`: the intent row, help and usage, waking a waiting command
- context.py  `CommandsContext`: what the intake, helpers and shared actions use of the
              engine, and nothing more (the intent's step takes the whole StepContext)

This file is the concern's face: code outside the folder imports from here only.
"""

from app.commands.grammar import COMMANDS, parse
from app.commands.intents import (
    Answer,
    Busy,
    NoRunOnPr,
    Started,
    hangar_pr_job,
    job_for_pr,
    job_for_thread,
    job_id_for,
    job_named,
    record_check_action,
    record_comment,
    record_label,
    record_review_body,
    record_review_comment,
    record_suite_rerun,
    reply,
    request_verification,
    start_followup,
    start_job,
)
from app.commands.plugin import register

__all__ = [
    "COMMANDS",
    "Answer",
    "Busy",
    "NoRunOnPr",
    "Started",
    "hangar_pr_job",
    "job_for_pr",
    "job_for_thread",
    "job_id_for",
    "job_named",
    "parse",
    "record_check_action",
    "record_comment",
    "record_label",
    "record_review_body",
    "record_review_comment",
    "record_suite_rerun",
    "register",
    "reply",
    "request_verification",
    "start_followup",
    "start_job",
]
