"""Every way a run can end, one table row each: the facts, the reason code the runs
concern decides, and the cause and next step render words for it.

Each row's code is its own: a case folded into another (a crash said as "no commits", a
529 said as a plain exit) fails its row and the test that every code is some row's.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from app import render
from app.models import HeldWork, Job, Run, RunStage, RunState, Thread
from app.render import endings as words
from app.runs import Ending, account
from app.runs.ending import conclusion, restart_after_loss, retryable, trouble_of

RESET = time.time() + 3600


def model(kind: str, status: int | None = 200, error_type: str | None = None,
          silence_s: float | None = None, **more: Any) -> dict:
    return {"model": {"requests": 3, "outcomes": {"ok": 2, kind: 1},
                      "trouble": {"kind": kind, "status": status, "error_type": error_type,
                                  "silence_s": silence_s}, **more}}


@dataclass
class End:
    name: str
    run: dict[str, Any]
    changed: bool
    code: Ending
    cause: str  # words the status comment says first
    next: str  # words of the next step
    conclusion: str = "failure"
    facts: dict[str, Any] = field(default_factory=dict)


EXITED = {"state": RunState.EXITED, "stage": RunStage.DONE}
HELD = {"state": RunState.EXITED, "stage": RunStage.HELD}

ENDS = [
    End("exit 0 with changes", {**EXITED, "exit_code": 0}, True, Ending.CHANGES,
        "its commits reached GitHub", "review the pull request", "success"),
    End("exit 0 without changes", {**EXITED, "exit_code": 0}, False, Ending.NO_CHANGES,
        "finished by itself (exit 0) and made no commits, so there is no pull request",
        "rephrase the request", "neutral"),
    End("a non-zero exit", {**EXITED, "exit_code": 3}, False, Ending.AGENT_FAILED,
        "the agent exited with code 3 before it finished", "`/hangar retry`", "neutral",
        {"exit_code": 3}),
    End("killed by a signal hangar did not send", {**EXITED, "exit_code": 137}, False,
        Ending.AGENT_KILLED, "killed by signal 9 (SIGKILL); hangar did not stop it",
        "memory and process limits", "neutral", {"signal": 9, "name": "SIGKILL"}),
    End("the time limit", {"state": RunState.TIMED_OUT, "stage": RunStage.DONE,
                           "exit_code": -1, "env": {"max_minutes": 2}}, False,
        Ending.TIME_LIMIT, "stopped the agent at its time limit of 2 minute(s)",
        "ask for a smaller step", "timed_out"),
    End("cancelled", {"state": RunState.CANCELLED, "stage": RunStage.DONE}, False,
        Ending.CANCELLED, "the turn was cancelled", "starts new work", "cancelled"),
    End("hangar restarted during the model's answer",
        {**EXITED, "exit_code": 1, "agent": model("restart")}, False,
        Ending.HANGAR_RESTARTED, "hangar restarted while the model's answer was streaming",
        "`/hangar retry`"),
    End("the sandbox lost before the push, after the one restart",
        {"state": RunState.LOST, "stage": RunStage.DONE, "restarts": 1}, False,
        Ending.LOST_BEFORE_PUSH, "lost before its work reached GitHub, again after hangar "
        "started the turn anew 1 time(s)", "`/hangar retry`"),
    End("the sandbox lost after the push", {"state": RunState.LOST, "stage": RunStage.DONE},
        True, Ending.LOST_AFTER_PUSH, "lost after its commits reached GitHub",
        "review what reached the pull request", "neutral"),
    End("the sandbox could not be prepared",
        {"state": RunState.RUNNING, "stage": RunStage.ERROR, "process_id": None}, False,
        Ending.SANDBOX_NOT_PREPARED, "could not prepare a sandbox for the agent, so no "
        "agent ran", "hangar's log"),
    End("the environment build missing", {**EXITED, "exit_code": 1,
                                          "env_build": {"fallback": True, "missing": True}},
        False, Ending.BUILD_MISSING, "hangar's environment build for this repository was "
        "missing; it is being rebuilt, and this run started without it",
        "once the rebuild has finished"),
    End("the model unreachable", {**EXITED, "exit_code": 1,
                                  "agent": model("unreachable", None)}, False,
        Ending.MODEL_UNREACHABLE, "the model endpoint could not be reached",
        "an operator checks hangar's connection to the model endpoint"),
    End("the model refused hangar's credential (401)",
        {**EXITED, "exit_code": 1, "agent": model("status", 401, "authentication_error")},
        False, Ending.MODEL_REFUSED, "refused hangar's credential (401)",
        "the model credential hangar holds"),
    End("the model's rate limit (429)",
        {**EXITED, "exit_code": 1, "agent": model("status", 429, "rate_limit_error",
                                                 reset_at=RESET)},
        False, Ending.MODEL_RATE_LIMITED, "answered 429 (rate limit); usage resets at",
        f"once usage resets at {render.clock(RESET)}, `/hangar retry`"),
    End("the model overloaded (529)",
        {**EXITED, "exit_code": 1, "agent": model("status", 529, "overloaded_error")},
        False, Ending.MODEL_OVERLOADED, "answered 529 (overloaded)",
        "wait a few minutes for the model"),
    End("an error event in the model's stream",
        {**EXITED, "exit_code": 1, "agent": model("error_event", 200, "api_error")}, False,
        Ending.MODEL_ERROR_EVENT, "ended with an error event in the middle of the stream "
        "(`api_error`)", "`/hangar retry`"),
    End("the model's stream cut", {**EXITED, "exit_code": 1, "agent": model("cut")},
        False, Ending.MODEL_STREAM_CUT, "cut off before it ended", "`/hangar retry`"),
    End("the model's stream stalled until the time limit",
        {"state": RunState.TIMED_OUT, "stage": RunStage.DONE, "exit_code": -1,
         "env": {"max_minutes": 2}, "agent": model("aborted", silence_s=95.0)}, False,
        Ending.MODEL_STALLED, "stopped arriving: nothing came for 95 s", "`/hangar retry`",
        "failure", {"seconds": 95}),
    End("another status from the model (500)",
        {**EXITED, "exit_code": 1, "agent": model("status", 500, "api_error")}, False,
        Ending.MODEL_FAILED, "the model endpoint answered 500", "checks the model endpoint"),
    End("the earlier turn's session not found",
        {**EXITED, "exit_code": 1, "agent": {"failure": "resume_failed"}}, False,
        Ending.SESSION_NOT_RESUMED, "could not resume its session", "`/hangar <instruction>`"),
    End("a push GitHub refused", {**HELD, "exit_code": 0, "held": HeldWork(
        head_sha="b" * 40, refused=True)}, False, Ending.PUSH_REFUSED,
        "GitHub refused the push", "fix the cause GitHub names", "action_required"),
    End("a push that keeps failing", {**HELD, "exit_code": 0, "held": HeldWork(
        head_sha="b" * 40)}, False, Ending.PUSH_FAILING, "did not go through",
        "pushes the kept commits again by itself", "action_required"),
    End("a push git declined: the branch on GitHub moved", {**HELD, "exit_code": 0,
        "held": HeldWork(head_sha="b" * 40, refused=True, diverged=True)}, False,
        Ending.BRANCH_DIVERGED, "hangar does not force-push",
        "a turn that starts from the branch as GitHub has it", "action_required"),
    End("a push hangar's own sandbox gate refused (a limit of its own)", {**HELD,
        "exit_code": 0, "held": HeldWork(head_sha="b" * 40, refused=True, by_hangar=True)},
        False, Ending.GATE_REFUSED, "hangar's sandbox gate refused the push",
        "a retry meets the same rule of hangar's sandbox gate", "action_required"),
    End("hangar's own step failed until it gave up",
        {**EXITED, "stage": RunStage.ERROR, "process_id": "p-1", "failed_stage": "collecting"},
        True, Ending.HANGAR_FAILED, "hangar failed while collecting the agent's work",
        "hangar's log"),
]


def a_run(fields: dict[str, Any]) -> Run:
    return Run(job_id="job-1", branch="hangar/1-ab", base_branch="main", prompt="fix it",
               process_id=fields.pop("process_id", "p-1"), **fields)


@pytest.mark.parametrize("case", ENDS, ids=[e.name for e in ENDS])
def test_each_ending_has_its_code_its_cause_and_its_next_step(case: End):
    run = a_run(dict(case.run))
    why = account(run, changed=case.changed)
    assert why.code == case.code
    for key, value in case.facts.items():
        assert why.facts[key] == value
    cause, next_step = words.ending_cause(why), words.ending_next(why)
    assert case.cause in cause
    assert case.next in next_step
    assert conclusion(why.code) == case.conclusion
    # Only a clean exit with nothing committed asks to change the request.
    assert ("rephrase" in next_step) == (case.code == Ending.NO_CHANGES)


def test_every_ending_is_one_rows_and_no_two_rows_share_one():
    codes = [case.code for case in ENDS]
    assert len(codes) == len(set(codes)), "two cases folded into one code"
    assert set(codes) == set(Ending), "an ending no row shows"


SECRETS_OF_OPERATORS = re.compile(r"(/[a-z]+/|https?://|HANGAR_|\bTraceback\b|model_endpoints)")


@pytest.mark.parametrize("case", ENDS, ids=[e.name for e in ENDS])
def test_what_people_read_names_no_operator_detail(case: End):
    run = a_run(dict(case.run))
    run = run.model_copy(update={
        "error": "RuntimeError: the environment build at /srv/hangar/envbuilds/bld-1 is gone",
        "ending": {"code": account(run, changed=case.changed).code,
                   **account(run, changed=case.changed).facts}})
    job = Job(thread=Thread(repo="acme/widgets", number=1, installation_id=1),
              requested_by="mona", prompt="fix it", clone_url="u", base_branch="main")
    shown = render.status_comment(job, [run]) + str(render.agent_check_output(run))
    assert SECRETS_OF_OPERATORS.search(shown) is None, shown


def test_a_run_lost_before_its_push_is_started_again_once():
    lost = a_run({"state": RunState.LOST, "stage": RunStage.COLLECTING})
    assert restart_after_loss(lost, changed=False)
    assert not restart_after_loss(lost, changed=True)  # its commits are on GitHub: collect
    again = lost.model_copy(update={"restarts": 1})
    assert not restart_after_loss(again, changed=False)
    assert account(again, changed=False).code == Ending.LOST_BEFORE_PUSH


def test_retry_starts_again_only_what_a_retry_fixes():
    def ended(code: Ending) -> Run:
        return a_run({**EXITED, "ending": {"code": code}})

    assert retryable(ended(Ending.AGENT_FAILED)) and retryable(ended(Ending.MODEL_OVERLOADED))
    assert not retryable(ended(Ending.NO_CHANGES))  # the request is what changes
    assert not retryable(ended(Ending.CHANGES)) and not retryable(ended(Ending.CANCELLED))


def req(outcome: str, started: float, status: int | None = 200, **more: Any) -> dict:
    return {"outcome": outcome, "status": status, "started_at": started,
            "last_byte_at": started + 1, "ended_at": started + 2, "error_type": None, **more}


@pytest.mark.parametrize(("requests", "kind"), [
    ([req("ok", 1), req("status", 2, 529), req("status", 3, 529)], "status"),
    ([req("status", 1, 529), req("ok", 2)], None),  # the agent's retry got through
    ([req("ok", 1), req("cut", 2)], "cut"),
    ([req("error_event", 1), req("ok", 2), req("aborted", 3)], "aborted"),
    ([req("open", 1, ended_at=None)], "open"),
    ([], None),
])
def test_the_gateways_trouble_is_the_last_request_the_agent_did_not_get_past(requests,
                                                                            kind):
    trouble = trouble_of(requests, now=100.0)
    assert (trouble or {}).get("kind") == kind
    if kind == "open":
        assert trouble["silence_s"] == 98.0  # from its last byte until now


@pytest.mark.parametrize(("waiting", "said"), [
    (None, "⏳ queued (position 2 in the queue): waiting for a free agent slot"),
    ({"code": "slot"}, "⏳ queued (position 2 in the queue): waiting for a free agent slot"),
])
def test_a_waiting_run_says_what_it_waits_for(waiting, said):
    """(A run its credential's pause holds says the pause: tests/app/test_pause.py.)"""
    queued = a_run({"waiting": waiting})
    assert render.run_line(queued, 2) == said
