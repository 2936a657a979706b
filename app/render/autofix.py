"""Auto-fix's sentences: why it did not start a turn on a PR, and the names of its turns.

Keys are the values of auto-fix's codes (`app.autofix.Stop`): auto-fix decides, this
module words. (The prompts auto-fix writes are for the agent, not for people: they stay
with auto-fix.)
"""

from __future__ import annotations

from typing import overload

from app.models import SAID_BEFORE, Reason
from app.render.reasons import Sentences, Why, word

# Why auto-fix did not start a turn (its row's `stopped`), by `Stop` code.
STOPPED: Sentences = {
    "merging": lambda: "the pull request is being merged",
    "turns_used": lambda max_turns: (
        f"auto-fix used its {max_turns} turn(s); comment `/hangar <instruction>` to ask for "
        "another turn, or fix it by hand"),
    "off_for_repo": lambda: (
        "auto-fix is off for this repository (`autofix: {enabled: false}` in "
        "`.github/hangar.yml`)"),
    "off_for_pr": lambda: (
        "auto-fix is off for this pull request (`/hangar autofix on` turns it back on)"),
    "off": lambda: "auto-fix is off for this pull request",
    "same_failure": lambda: (
        "the last auto-fix turn failed the same way; hangar stopped repeating itself. Comment "
        "`/hangar <instruction>` with a hint, or fix it by hand"),
    "not_picked": lambda n, mode: (
        f"attempt {n} of a `/hangar try` is not picked; auto-fix works only on the attempt "
        "`/hangar pick N` keeps"
        + (" (or the eligible attempt ranked first once all have finished: "
           "`fanout: {autofix: ranked_first}`)" if mode == "ranked_first" else "")
        + ", so the others spend no model turns"),
    "quiet": lambda: (
        "someone pushed to the branch recently; hangar leaves it to them (the **Fix with "
        "hangar** button on `hangar / verify` or `/hangar <instruction>` asks for a turn)"),
    "review_opt_in": lambda: (
        "a change request starts a turn only where `.github/hangar.yml` says "
        "`review: {act_on_changes_requested: true}`; `/hangar <instruction>` asks for one"),
    "review_waits": lambda author: (
        f"a review by @{author} asked for changes; hangar starts that turn when the running "
        "one ends"),
    # `because`: the `Stop` code that kept the turn from starting, with its facts
    "review_not_started": lambda author, because, **facts: (
        f"@{author} requested changes, but hangar did not start a turn: "
        f"{stopped(Why(because, **facts))}"),
    "gave_up": lambda error=None: (
        "hangar stopped watching after repeated errors of its own (the job's timeline names "
        "them)"),
}


@overload
def stopped(why: Why | Reason) -> str: ...


@overload
def stopped(why: None) -> None: ...


def stopped(why: Why | Reason | None) -> str | None:
    """The sentence for why auto-fix stopped: a decision, or the code a row keeps."""
    if isinstance(why, Reason):
        if why.code == SAID_BEFORE:  # a row from before codes kept the sentence itself
            return str(why.facts["text"])
        why = Why(why.code, **why.facts)
    return None if why is None else word(STOPPED, why)


def status_note(pr_number: int, stopped_why: Reason) -> str:
    """Why auto-fix stopped trying on a PR, in its job's status comment."""
    return f"**Auto-fix on #{pr_number}:** {stopped(stopped_why)}"


def failures_turn_label(turn: int, max_turns: int, checks: list[str]) -> str:
    return f"auto-fix turn {turn} of {max_turns}: {', '.join(checks)} failed"


def review_turn_label(turn: int, max_turns: int, author: str) -> str:
    return f"auto-fix turn {turn} of {max_turns}: changes requested by @{author}"
