"""`/hangar` commands: each command's declaration, and what every command shares.

- grammar.py  each command's declaration (usage, help, who, where) and the grammar that
              reads a comment into commands; `/hangar help` is made from the declarations
- intents.py  an intent per command: its intake (a comment, a review, a button), who and
              where checked once, the 👀 reaction, the action of the concern that owns the
              command, one reply per comment, the rows a command starts

This file is the concern's face: code outside the folder imports from here only.
"""

from app.commands.grammar import (
    COMMANDS,
    MAX_COMMANDS_PER_COMMENT,
    MAX_PROMPT_CHARS,
    Command,
    CommandSpec,
    UsageError,
    help_text,
    parse,
    spec_for,
)
from app.commands.intents import (
    ACTIONS,
    Answer,
    Busy,
    NoRunOnPr,
    Started,
    hangar_pr_job,
    job_for_pr,
    job_for_thread,
    job_id_for,
    job_named,
    process_intent,
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
    wake_waiting,
)

__all__ = [
    "ACTIONS",
    "COMMANDS",
    "MAX_COMMANDS_PER_COMMENT",
    "MAX_PROMPT_CHARS",
    "Answer",
    "Busy",
    "Command",
    "CommandSpec",
    "NoRunOnPr",
    "Started",
    "UsageError",
    "hangar_pr_job",
    "help_text",
    "job_for_pr",
    "job_for_thread",
    "job_id_for",
    "job_named",
    "parse",
    "process_intent",
    "record_check_action",
    "record_comment",
    "record_label",
    "record_review_body",
    "record_review_comment",
    "record_suite_rerun",
    "reply",
    "request_verification",
    "spec_for",
    "start_followup",
    "start_job",
    "wake_waiting",
]
