"""How a run ended: one account, computed from facts, as a reason code render words.

Pure rules: no I/O. The facts are the run's own (how its agent stopped: by itself with an
exit code or a signal, or by hangar's hand; whether its work reached GitHub; how often it
was started again), the model gateway's (the last request of the run that did not end
cleanly: a status, an error event, a cut or stalled stream, a restart of hangar), the
sandbox's (lost, never prepared, started without its missing environment build) and
publishing's (a push GitHub refused or could not take). `account` turns them into an
`Ending` with the facts its sentence names; `app/render/endings.py` words the cause and
the next step. "The agent made no commits" is the account only when the agent ended by
itself with exit 0, nothing else went wrong, and no change reached GitHub: only then is
the request the thing to change.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from app.models import Run, RunStage, RunState
from app.render.reasons import Why

# The model's answer counts as stalled when nothing of it came for this long before the
# agent was stopped (the gateway's own read timeout ends a silence in any case).
STALLED_AFTER_S = 30.0
# A run lost before its work reached GitHub is started again this many times.
RESTARTS_AFTER_LOSS = 1
# A shell reports a child killed by signal N as exit code 128 + N.
SIGNAL_BASE = 128


class Ending(StrEnum):
    """Every way a run can end (render.endings words each)."""

    CHANGES = "changes"  # by itself, exit 0, its commits reached GitHub
    NO_CHANGES = "no_changes"  # by itself, exit 0, nothing else wrong, nothing committed
    AGENT_FAILED = "agent_failed"  # by itself, a non-zero exit code
    AGENT_KILLED = "agent_killed"  # a signal hangar did not send
    TIME_LIMIT = "time_limit"  # hangar stopped it at the environment's time limit
    CANCELLED = "cancelled"  # `/hangar cancel`
    HANGAR_RESTARTED = "hangar_restarted"  # a restart of hangar cut the model's answer
    LOST_BEFORE_PUSH = "lost_before_push"  # the sandbox vanished again, nothing on GitHub
    LOST_AFTER_PUSH = "lost_after_push"  # the sandbox vanished, its commits on GitHub
    SANDBOX_NOT_PREPARED = "sandbox_not_prepared"  # no sandbox could be made: no agent ran
    BUILD_MISSING = "build_missing"  # the agent failed without its missing environment build
    MODEL_UNREACHABLE = "model_unreachable"
    MODEL_REFUSED = "model_refused"  # 401 / 403: hangar's credential
    MODEL_RATE_LIMITED = "model_rate_limited"  # 429
    MODEL_OVERLOADED = "model_overloaded"  # 529 (or an overloaded_error answer)
    MODEL_ERROR_EVENT = "model_error_event"  # an error event in the middle of the stream
    MODEL_STREAM_CUT = "model_stream_cut"  # the endpoint closed the stream before its end
    MODEL_STALLED = "model_stalled"  # the answer stopped arriving and never ended
    MODEL_FAILED = "model_failed"  # another failing status
    SESSION_NOT_RESUMED = "session_not_resumed"  # the earlier turn's session was not found
    PUSH_REFUSED = "push_refused"  # GitHub refused the push; the commits are held
    # hangar's own sandbox gate refused it (a limit or a rule of its own); the commits held
    GATE_REFUSED = "gate_refused"
    # git declined: the branch on GitHub has commits the agent's work lacks; commits held
    BRANCH_DIVERGED = "branch_diverged"
    PUSH_FAILING = "push_failing"  # the push did not go through; held, tried again
    HANGAR_FAILED = "hangar_failed"  # one of hangar's own steps failed until it gave up


# What GitHub's check run `hangar / agent` concludes for each ending. An agent's non-zero
# exit is a fact to show, not a gate on a pull request that holds its work: neutral.
CONCLUSIONS: dict[Ending, str] = {
    Ending.CHANGES: "success",
    Ending.NO_CHANGES: "neutral",
    Ending.AGENT_FAILED: "neutral",
    Ending.AGENT_KILLED: "neutral",
    Ending.TIME_LIMIT: "timed_out",
    Ending.CANCELLED: "cancelled",
    Ending.LOST_AFTER_PUSH: "neutral",
    Ending.PUSH_REFUSED: "action_required",
    Ending.GATE_REFUSED: "action_required",
    Ending.BRANCH_DIVERGED: "action_required",
    Ending.PUSH_FAILING: "action_required",
}

# Endings `/hangar retry` fixes by starting the turn again. Not a turn that did its work,
# nor one whose request should change, nor a cancel, nor a push (retry pushes those).
RETRYABLE = frozenset(Ending) - {Ending.CHANGES, Ending.NO_CHANGES, Ending.CANCELLED,
                                 Ending.LOST_AFTER_PUSH, Ending.PUSH_REFUSED,
                                 Ending.GATE_REFUSED, Ending.BRANCH_DIVERGED,
                                 Ending.PUSH_FAILING}


class Restart(StrEnum):
    """Why a turn was started again from the start (render.endings.RESTARTED words it)."""

    LOST = "lost_before_push"  # its sandbox vanished before its work reached GitHub
    RETRY = "retry"  # someone asked: `/hangar retry`


def conclusion(code: str) -> str:
    return CONCLUSIONS.get(Ending(code), "failure")


def retryable(run: Run) -> bool:
    """Whether `/hangar retry` starts this finished turn again."""
    return run.finished and run.ending is not None and run.ending.get("code") in RETRYABLE


@dataclass(frozen=True)
class ModelTrouble:
    """The gateway's account of the run's last model request that did not end cleanly
    (None when a request started after it ended cleanly: the agent got past it)."""

    kind: str  # status, error_event, cut, stalled, aborted, open, restart, unreachable
    status: int | None = None
    error_type: str | None = None
    silence_s: float | None = None  # no byte of the answer for this long, at its end


def trouble_of(requests: list[dict[str, Any]], now: float) -> dict[str, Any] | None:
    """The gateway's account of the last request (of `requests`, the gateway's rows in
    order) that did not end cleanly, unless one started after it ended cleanly: then the
    agent got past it. A request still open counts from its last byte until `now`."""
    failed = None
    for request in requests:
        if request["outcome"] == "ok":
            if failed is not None and request["started_at"] >= failed["started_at"]:
                failed = None
            continue
        failed = request
    if failed is None:
        return None
    last_byte = failed.get("last_byte_at") or failed["started_at"]
    until = failed.get("ended_at") or now
    return {"kind": failed["outcome"], "status": failed.get("status"),
            "error_type": failed.get("error_type"),
            "silence_s": round(max(0.0, until - last_byte), 1)}


def model_trouble(model: dict[str, Any] | None) -> ModelTrouble | None:
    trouble = (model or {}).get("trouble")
    if not trouble:
        return None
    return ModelTrouble(kind=trouble["kind"], status=trouble.get("status"),
                        error_type=trouble.get("error_type"),
                        silence_s=trouble.get("silence_s"))


def account(run: Run, *, changed: bool) -> Why:
    """How the run ended, from its facts; `changed`: this turn's commits reached GitHub."""
    if run.held is not None and run.stage == RunStage.HELD:
        if run.held.refused:
            if run.held.diverged:
                return Why(Ending.BRANCH_DIVERGED)
            return Why(Ending.GATE_REFUSED if run.held.by_hangar else Ending.PUSH_REFUSED)
        return Why(Ending.PUSH_FAILING)
    if run.stage == RunStage.ERROR:
        if run.process_id is None and run.state in (RunState.QUEUED, RunState.RUNNING):
            return Why(Ending.SANDBOX_NOT_PREPARED)
        return Why(Ending.HANGAR_FAILED, stage=run.failed_stage or "publishing")
    if run.state == RunState.CANCELLED:
        return Why(Ending.CANCELLED)
    if run.state == RunState.LOST:
        if changed:
            return Why(Ending.LOST_AFTER_PUSH)
        return Why(Ending.LOST_BEFORE_PUSH, restarts=run.restarts)
    model = _model_ending(run)
    if model is not None:
        return model  # the agent's last word with its model failed: that is why it stopped
    if run.state == RunState.EXITED and run.exit_code == 0 and changed:
        return Why(Ending.CHANGES)
    if run.state == RunState.TIMED_OUT:
        return Why(Ending.TIME_LIMIT, minutes=run.env.get("max_minutes"))
    code = run.exit_code if run.exit_code is not None else -1
    if SIGNAL_BASE < code <= SIGNAL_BASE + 64:
        number = code - SIGNAL_BASE
        return Why(Ending.AGENT_KILLED, signal=number, name=signal_name(number))
    build_missing = (run.env_build or {}).get("missing", False)
    if build_missing:
        return Why(Ending.BUILD_MISSING, exit_code=code)
    if code == 0:
        return Why(Ending.NO_CHANGES, on_pr=run.pr_number is not None)
    return Why(Ending.AGENT_FAILED, exit_code=code, changed=changed)


def _model_ending(run: Run) -> Why | None:
    """The model's part in how the run ended, from the gateway's facts first (hangar's own
    view of every request), else from what the agent's CLI said."""
    agent = run.agent or {}
    model = agent.get("model") or {}
    trouble = model_trouble(model)
    if trouble is not None:
        ending = _from_gateway(run, trouble, model)
        if ending is not None:
            return ending
    failure = agent.get("failure")
    status = agent.get("http_status")
    if failure == "rate_limit":
        return Why(Ending.MODEL_RATE_LIMITED, reset_at=model.get("reset_at"))
    if failure == "auth":
        return Why(Ending.MODEL_REFUSED, status=status)
    if failure == "unreachable":
        return Why(Ending.MODEL_UNREACHABLE)
    if failure == "resume_failed":
        return Why(Ending.SESSION_NOT_RESUMED)
    if failure:
        if status == 529:
            return Why(Ending.MODEL_OVERLOADED, status=status)
        return Why(Ending.MODEL_FAILED, status=status)
    return None


def _from_gateway(run: Run, trouble: ModelTrouble, model: dict) -> Why | None:
    if trouble.kind == "restart":
        return Why(Ending.HANGAR_RESTARTED)
    if trouble.kind == "unreachable":
        return Why(Ending.MODEL_UNREACHABLE)
    if trouble.kind == "status":
        status = trouble.status
        if status in (401, 403):
            return Why(Ending.MODEL_REFUSED, status=status)
        if status == 429:
            return Why(Ending.MODEL_RATE_LIMITED, reset_at=model.get("reset_at"))
        if status == 529 or trouble.error_type == "overloaded_error":
            return Why(Ending.MODEL_OVERLOADED, status=status)
        return Why(Ending.MODEL_FAILED, status=status)
    if trouble.kind == "error_event":
        return Why(Ending.MODEL_ERROR_EVENT, error_type=trouble.error_type)
    if trouble.kind == "cut":
        return Why(Ending.MODEL_STREAM_CUT)
    silence = trouble.silence_s or 0.0
    if trouble.kind == "stalled" or (
            trouble.kind in ("aborted", "open") and run.state == RunState.TIMED_OUT
            and silence >= STALLED_AFTER_S):
        return Why(Ending.MODEL_STALLED, seconds=round(silence))
    # The sandbox's side went away mid-answer: a consequence of how the agent ended (a
    # signal, a stop), not a cause.
    return None


def restart_after_loss(run: Run, *, changed: bool) -> bool:
    """A run lost before anything of it reached GitHub is started again, once."""
    return (run.state == RunState.LOST and not changed and run.stage != RunStage.ERROR
            and run.restarts < RESTARTS_AFTER_LOSS)


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
