"""How a run ended, in words: one sentence naming the cause, one naming the next step
that fixes it, by the reason code the runs concern decided (`app.runs.ending.Ending`);
and what a queued run waits for (`waiting`).

Only hangar-built facts are worded here: an exit code, a signal, a status, an error type a
model endpoint named, a time. Operator detail (host paths, upstream addresses, settings,
tracebacks) stays in hangar's log and the job's timeline and never reaches this text.
"""

from __future__ import annotations

from app.render.reasons import Sentences, Why, word
from app.render.text import clock, code_span


def _pr_part(changed: bool) -> str:
    return "; what it committed before is on the pull request" if changed else ""


def _rate_limited(reset_at: float | None) -> str:
    when = (f"usage resets at {clock(reset_at)}" if reset_at
            else "the endpoint did not say when usage resets")
    return f"the model endpoint answered 429 (rate limit); {when}"


def refuser(by_hangar: bool) -> str:
    """Who refused a push: hangar's own sandbox gate (a limit or a rule of its own), or
    GitHub."""
    return "hangar's sandbox gate" if by_hangar else "GitHub"


# A refusal by hangar's own gate meets the same limit or rule on a retry.
_GATE_NEXT = (
    "a retry meets the same rule of hangar's sandbox gate (its words are above): comment "
    "`/hangar <instruction>` to ask for a change within it (no large files; new commits "
    "on the branch rather than a rewrite of it).")


def _minutes(minutes: float | None) -> str:
    return f" of {minutes:g} minute(s)" if isinstance(minutes, int | float) else ""


# The cause, in one sentence without its full stop (it is followed by the facts).
ENDINGS: Sentences = {
    "changes": lambda: "the agent finished and its commits reached GitHub",
    "no_changes": lambda on_pr=False: (
        "the agent finished by itself (exit 0) and made no commits, so "
        + ("the pull request did not change" if on_pr else "there is no pull request")),
    "agent_failed": lambda exit_code, changed=False: (
        f"the agent exited with code {exit_code} before it finished{_pr_part(changed)}"),
    "agent_killed": lambda signal, name: (
        f"the agent's process was killed by signal {signal} ({name}); hangar did not stop "
        "it"),
    "time_limit": lambda minutes=None: (
        f"hangar stopped the agent at its time limit{_minutes(minutes)}"),
    "cancelled": lambda: "the turn was cancelled",
    "hangar_restarted": lambda: (
        "hangar restarted while the model's answer was streaming to the agent, and the cut "
        "answer ended the agent's turn"),
    "lost_before_push": lambda restarts=0: (
        "the agent's sandbox was lost before its work reached GitHub"
        + (f", again after hangar started the turn anew {restarts} time(s)" if restarts
           else "")),
    "lost_after_push": lambda: (
        "the agent's sandbox was lost after its commits reached GitHub; they were collected "
        "from there"),
    "sandbox_not_prepared": lambda github=False: (
        "hangar could not read from GitHub what the agent's turn needs, so no agent ran"
        if github else "hangar could not prepare a sandbox for the agent, so no agent ran"),
    "build_missing": lambda exit_code: (
        ("the agent made no commits" if exit_code == 0
         else f"the agent exited with code {exit_code}")
        + " in a sandbox without the repository's dependencies: hangar's environment build "
          "for this repository was missing; it is being rebuilt, and this run started "
          "without it"),
    "model_unreachable": lambda: "the model endpoint could not be reached",
    "model_refused": lambda status=None: (
        f"the model endpoint refused hangar's credential ({status or 'refused'})"),
    "model_rate_limited": lambda reset_at=None: _rate_limited(reset_at),
    "model_overloaded": lambda status=None: (
        f"the model endpoint answered {status or 529} (overloaded), and the agent gave up "
        "after its retries"),
    "model_error_event": lambda error_type=None: (
        "the model's answer ended with an error event in the middle of the stream"
        + (f" ({code_span(error_type)})" if error_type else "")),
    "model_stream_cut": lambda: (
        "the model's answer was cut off before it ended: the endpoint closed the stream"),
    "model_stalled": lambda seconds: (
        f"the model's answer stopped arriving: nothing came for {seconds} s, and the answer "
        "never ended"),
    "model_failed": lambda status=None: (
        f"the model endpoint answered {status}" if status else "the model endpoint failed"),
    "session_not_resumed": lambda: (
        "the agent could not resume its session from the earlier turn, so nothing was "
        "changed in this turn"),
    "push_refused": lambda: "GitHub refused the push of the agent's commits; hangar kept them",
    "gate_refused": lambda: (
        "hangar's sandbox gate refused the push of the agent's commits (a limit or a rule "
        "of its own, not GitHub's); hangar kept them"),
    "branch_diverged": lambda: (
        "the branch on GitHub has commits the agent's work does not build on (someone "
        "pushed to it meanwhile, or the agent rewrote its history), and hangar does not "
        "force-push; hangar kept the agent's commits"),
    "push_failing": lambda: (
        "the push of the agent's commits did not go through; hangar kept them and tries "
        "again"),
    "hangar_failed": lambda stage: (
        f"hangar failed while {STAGES.get(stage, 'handling')} the agent's work and stopped "
        "trying"),
}

# A run's stage (app.models.RunStage) as what hangar was doing to the agent's work.
STAGES: dict[str, str] = {
    "pending": "publishing", "publishing": "publishing", "collecting": "collecting",
    "verifying": "verifying", "held": "pushing"}

RETRY = "`/hangar retry` starts the turn again"

NEXT_STEPS: Sentences = {
    "changes": lambda: (
        "review the pull request; an approval from someone with write access lands it."),
    "no_changes": lambda on_pr=False: (
        "rephrase the request with more detail and comment `/hangar <instruction>` again, "
        "or see `/hangar help`."),
    "agent_failed": lambda exit_code, changed=False: (
        f"the agent's last lines are below and in the `hangar / agent` check run; {RETRY}."),
    "agent_killed": lambda signal, name: (
        f"{RETRY}; if it happens again, an operator looks at the sandbox's memory and "
        "process limits."),
    "time_limit": lambda minutes=None: (
        f"{RETRY}, or ask for a smaller step with `/hangar <instruction>`; an operator can "
        "give the environment more time."),
    "cancelled": lambda: "nothing; `/hangar <instruction>` starts new work.",
    "hangar_restarted": lambda: f"{RETRY}.",
    "lost_before_push": lambda restarts=0: (
        f"{RETRY}; if it keeps happening, an operator looks at hangar's log for this run."),
    "lost_after_push": lambda: (
        "review what reached the pull request; `/hangar <instruction>` asks for another "
        "turn."),
    "sandbox_not_prepared": lambda github=False: (
        f"{RETRY}; if it fails again, an operator finds the cause in hangar's log for this "
        "run."),
    "build_missing": lambda exit_code: f"{RETRY} once the rebuild has finished.",
    "model_unreachable": lambda: (
        f"an operator checks hangar's connection to the model endpoint; then {RETRY}."),
    "model_refused": lambda status=None: (
        f"an operator checks the model credential hangar holds for this environment; then "
        f"{RETRY}."),
    "model_rate_limited": lambda reset_at=None: (
        f"once usage resets at {clock(reset_at)}, {RETRY}." if reset_at
        else f"wait for the model's usage to reset; then {RETRY}."),
    "model_overloaded": lambda status=None: f"wait a few minutes for the model; then {RETRY}.",
    "model_error_event": lambda error_type=None: (
        f"{RETRY}; if the model is overloaded, wait a few minutes first."),
    "model_stream_cut": lambda: f"{RETRY}.",
    "model_stalled": lambda seconds: f"{RETRY}.",
    "model_failed": lambda status=None: (
        f"{RETRY}; if it happens again, an operator checks the model endpoint."),
    "session_not_resumed": lambda: "comment `/hangar <instruction>` again.",
    "push_refused": lambda: (
        "fix the cause GitHub names, then comment `/hangar retry` and hangar pushes the kept "
        "commits again."),
    "gate_refused": lambda: _GATE_NEXT,
    "branch_diverged": lambda: (
        "comment `/hangar <instruction>` for a turn that starts from the branch as GitHub "
        "has it; `/hangar retry` pushes the kept commits again once the branch is back "
        "where the turn began."),
    "push_failing": lambda: "nothing: hangar pushes the kept commits again by itself.",
    "hangar_failed": lambda stage: (
        f"{RETRY}; an operator finds the cause in hangar's log for this run."),
}

# What a run that has not started waits for.
WAITS: Sentences = {
    "slot": lambda position=None: (
        "queued" + (f" (position {position} in the queue)" if position else "")
        + ": waiting for a free agent slot"),
    "sandbox": lambda: (
        "waiting for a free sandbox: every sandbox hangar may hold at once is in use "
        "(HANGAR_MAX_SANDBOXES); it starts when one ends"),
}

# Why a turn was started again (by the code of how its earlier try ended).
RESTARTED: Sentences = {
    "lost_before_push": lambda: (
        "its sandbox was lost before its work reached GitHub, so hangar started the turn "
        "again in a new sandbox"),
    "retry": lambda: "`/hangar retry` started the turn again",
}


def ending_cause(why: Why) -> str:
    return word(ENDINGS, why)


def ending_next(why: Why) -> str:
    return word(NEXT_STEPS, why)


def waiting(why: Why) -> str:
    return word(WAITS, why)


def restarted(code: str) -> str:
    return word(RESTARTED, Why(code))


def as_why(stored: dict) -> Why:
    """A stored ending or wait ({"code": …, **facts}) as the `Why` it was."""
    facts = {k: v for k, v in stored.items() if k != "code"}
    return Why(stored["code"], **facts)
