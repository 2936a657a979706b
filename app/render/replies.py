"""The replies to `/hangar` commands, by the code the commands concern answers with
(`app.commands.Answer`): who may not, what there is nothing of, what waits.

A command's own usage and `/hangar help` come from the commands' self-description
(`app.commands`, written once next to each command): the commands concern hands them
over as facts, and these replies quote them.
"""

from __future__ import annotations

from app.render import usage
from app.render.reasons import Sentences, Why, word
from app.render.text import code_span, person


def _fork_pr(pr: dict, default_branch: str) -> str:
    fork = ((pr.get("head") or {}).get("repo") or {}).get("full_name") or "a deleted fork"
    return (f"This pull request's branch lives in the fork {code_span(fork)}. hangar never "
            "pushes to a fork and never runs an agent on a fork's code, so it does not work "
            "on this pull request (nor verify or land it). What hangar can do instead: a "
            "maintainer comments `/hangar <instruction>` on an issue, and hangar builds its "
            f"own branch from `{default_branch}` in this repository and opens its own pull "
            "request, verified and landed like any other.")


def _wrong_place(command: str, usage: str, on_pr: bool) -> str:
    said = (f"`{usage}` works on "
            f"{'issues, not on pull requests' if on_pr else 'pull requests, not on issues'}")
    if command == "try":
        return (f"{said}: it starts fresh attempts from an issue. On a pull request, "
                "`/hangar <instruction>` asks for another turn.")
    if on_pr:
        return f"{said}; comment it on the issue."
    return f"{said}; comment it on the pull request hangar opened."


ANSWERS: Sentences = {
    "no_write_access": lambda login: (
        f"Hi @{login}, hangar takes `/hangar` commands only from people with write access to "
        "this repository, so nothing was started. A maintainer can comment the command for "
        "you. (`/hangar help` works for everyone.)"),
    "usage": lambda message: f"{message}\n\n`/hangar help` lists every command.",
    "help": lambda table: table,
    "not_a_hangar_pr": lambda: (
        "This pull request was not opened by hangar, so hangar will not push to it. Ask on an "
        "issue instead: `/hangar <instruction>`."),
    "fork_pr": _fork_pr,
    "turn_waits": lambda: (
        "A turn is still running on this pull request; hangar will start this one as soon as "
        "it ends."),
    "wrong_place": _wrong_place,
    "nothing_to_cancel": lambda: "There is no hangar work on this thread to cancel.",
    "already_stopped": lambda: "Nothing is running here; the agent has already stopped.",
    "nothing_held": lambda: (
        "hangar holds no unpushed commits here, and no turn here ended in a way "
        "`/hangar retry` fixes. `/hangar status` shows where the work stands."),
    "no_work_yet": lambda: (
        "There is no hangar work on this thread yet. `/hangar <instruction>` starts some."),
    "nothing_to_pick": lambda: (
        "`/hangar pick N` chooses among the attempts of `/hangar try N`; there are none on "
        "this thread."),
    "no_such_attempt": lambda n, have: (
        f"Attempt {n} has no pull request to keep; attempts with one: "
        f"{', '.join(str(a) for a in have) or 'none'}."),
    "pick_ineligible": lambda n, gates, best: (
        f"Attempt {n} is not eligible ({gate_words(gates)}), so it was not kept; "
        + (f"attempt {best} ranks first of the eligible ones. " if best else
           "no attempt is eligible. ")
        + f"`/hangar pick {n} --force` keeps it all the same."),
    "pick_not_ranked": lambda n: (
        f"Attempts are still running, so there is no ranking yet to say whether attempt "
        f"{n} is eligible; this thread's status comment shows the ranking once all have "
        f"finished. `/hangar pick {n} --force` keeps it now."),
    "picked_another": lambda login, n, pr: (
        f"Closed: @{login} kept attempt {n} (#{pr}) instead."),
    "resumed": lambda login, pauses: (
        f"▶️ @{login} resumed the agents hangar had paused: "
        + "; ".join(usage.resumed(why) for why in pauses)
        + ". They start as agent slots free up; the pause stays lifted until that usage "
        "resets, and comes back if the model refuses requests."),
    "not_paused": lambda: (
        "Nothing here waits for the model: no queued agent of this job is paused by its "
        "usage. `/hangar status` shows where the work stands."),
}


# Why an attempt of `/hangar try N` is not eligible, by `app.fanout.ranking.Gate` code.
GATE_WORDS = {
    "no_pr": "no pull request",
    "verification_failed": "verification failed",
    "verification_not_run": "verification could not run",
    "ci_failed": "CI failed",
}


def gate_words(gates: list[str]) -> str:
    return ", ".join(GATE_WORDS.get(g, g) for g in gates)


def answer(why: Why) -> str:
    return word(ANSWERS, why)


def fork_pr_reply(pr: dict, default_branch: str) -> str:
    return _fork_pr(pr, default_branch)


def followup_label(turn: int, login: str) -> str:
    """A follow-up turn's name in the status comment's list of turns."""
    return f"follow-up turn {turn}: asked by {person(login)}"


def retry_label(turn: int, login: str) -> str:
    """A turn `/hangar retry` asked for on the pull request of a turn that failed."""
    return f"retry of turn {turn}: asked by {person(login)}"
