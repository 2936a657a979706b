"""Run states from observations: exited, lost, timed_out, cancelled."""

from __future__ import annotations

import json

from sandbox.provider import ProcessStatus
from sandbox.watch import RunState, RunWatch

RUNNING = ProcessStatus(state="running")
GONE = ProcessStatus(state="gone")


def exited(code: int) -> ProcessStatus:
    return ProcessStatus(state="exited", exit_code=code)


def test_exit_code_makes_it_exited():
    watch = RunWatch(started_at=0, max_minutes=60)
    assert watch.observe(RUNNING, 10) is None
    assert watch.observe(exited(3), 20) is RunState.EXITED
    assert (watch.state, watch.exit_code, watch.finished_at) == (RunState.EXITED, 3, 20)
    assert not watch.needs_stop
    assert watch.observe(GONE, 30) is None  # finished runs do not change
    assert watch.state is RunState.EXITED


def test_gone_twice_without_exit_code_is_lost():
    watch = RunWatch(started_at=0)
    assert watch.observe(GONE, 10) is None
    assert watch.state is RunState.RUNNING
    assert watch.observe(GONE, 20) is RunState.LOST
    assert watch.exit_code == -1 and "2 watch ticks" in watch.reason


def test_gone_once_then_exit_file_is_exited_not_lost():
    watch = RunWatch(started_at=0)
    assert watch.observe(GONE, 10) is None
    assert watch.observe(exited(0), 20) is RunState.EXITED
    assert watch.exit_code == 0


def test_gone_count_resets_when_seen_running():
    watch = RunWatch(started_at=0)
    watch.observe(GONE, 10)
    watch.observe(RUNNING, 20)
    assert watch.observe(GONE, 30) is None
    assert watch.state is RunState.RUNNING


def test_past_max_minutes_is_timed_out_and_must_be_stopped():
    watch = RunWatch(started_at=100, max_minutes=2)
    assert watch.observe(RUNNING, 100 + 119) is None
    assert watch.observe(RUNNING, 100 + 120) is RunState.TIMED_OUT
    assert watch.needs_stop
    assert watch.observe(exited(143), 100 + 125) is None  # the stop's own exit changes nothing
    assert watch.state is RunState.TIMED_OUT


def test_exit_seen_after_the_deadline_is_still_exited():
    watch = RunWatch(started_at=0, max_minutes=1)
    assert watch.observe(exited(0), 500) is RunState.EXITED


def test_no_max_minutes_never_times_out():
    watch = RunWatch(started_at=0)
    assert watch.observe(RUNNING, 10**9) is None


def test_stop_request_cancels_once():
    watch = RunWatch(started_at=0)
    assert watch.cancel(5) is RunState.CANCELLED
    assert watch.needs_stop and watch.exit_code == -1
    assert watch.cancel(6) is None
    assert watch.observe(GONE, 7) is None
    finished = RunWatch(started_at=0)
    finished.observe(exited(0), 1)
    assert finished.cancel(2) is None and finished.state is RunState.EXITED


def test_watch_round_trips_through_json_between_ticks():
    watch = RunWatch(started_at=0, max_minutes=60)
    watch.observe(GONE, 10)
    stored = json.dumps(watch.model_dump(mode="json"))
    restored = RunWatch.model_validate(json.loads(stored))
    assert restored.gone_ticks == 1
    assert restored.observe(GONE, 20) is RunState.LOST


def test_a_failed_or_hung_observation_loses_the_run_with_the_reason():
    watch = RunWatch(started_at=0)
    assert watch.observe(RUNNING, 10) is None
    assert watch.fail(20, "hangar could not observe the agent: timed out") is RunState.LOST
    assert (watch.state, watch.exit_code, watch.reason) == (
        RunState.LOST, -1, "hangar could not observe the agent: timed out")
    assert watch.needs_stop  # the process may still run: stop it
    assert watch.fail(30, "again") is None and watch.finished_at == 20
