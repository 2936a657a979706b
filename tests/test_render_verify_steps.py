"""`hangar / verify` says each step verification took, in order, and how long: facts
hangar timed, with the command shown as data."""

from __future__ import annotations

from app import render
from app.models import Verification
from app.render.verify import step_lines

STEPS = [{"code": "sandbox", "seconds": 2.34, "exit_code": None, "skipped": False},
         {"code": "install", "seconds": 0.0, "exit_code": None, "skipped": True},
         {"code": "restore", "seconds": 0.21, "exit_code": 0, "skipped": False},
         {"code": "command", "seconds": 12.5, "exit_code": 1, "skipped": False},
         {"code": "command", "seconds": 11.0, "exit_code": 0, "skipped": False}]


def test_each_step_is_one_line_with_its_time_and_how_it_ended():
    assert step_lines(STEPS, "pytest -q") == [
        "- clean sandbox started, head checked out: 2.3s",
        "- the environment's install step: skipped, the sandbox started from a current "
        "environment build",
        "- verify.restore_paths put back from the base: 0.2s",
        "- `pytest -q` (attempt 1): 12.5s, exit 1",
        "- `pytest -q` (attempt 2): 11.0s",
    ]


def test_a_failed_install_says_its_exit_code():
    assert step_lines([{"code": "install", "seconds": 40.0, "exit_code": 2}], "make") == [
        "- the environment's install step: 40.0s, exit 2"]


def test_the_check_runs_summary_lists_the_steps_and_the_command_stays_data():
    v = Verification(command="make test `x` @mona", head_sha="a" * 40, passed=True,
                     attempts=2, steps=STEPS)
    summary = render.verify_check_output(v)["summary"]
    steps = summary.split("**Steps, in order:**\n")[1].splitlines()
    assert steps[3] == "- ``make test `x` @mona`` (attempt 1): 12.5s, exit 1"
    assert "**Steps" not in render.verify_check_output(v.model_copy(update={"steps": []}))[
        "summary"]


def test_a_verification_stopped_at_its_time_limit_says_so_where_people_read_it():
    """The status comment and the PR body say a timed-out verification ran out of time,
    not that it failed with 'exit None'."""
    timed_out = Verification(command="pytest -q", head_sha="a" * 40, passed=False,
                             exit_code=None, attempts=1, error="timed out after 10 minutes")
    line = render.verification_line(timed_out)
    assert "timed out after 10 minutes" in line and "not a pass" in line
    assert "exit None" not in line and "failed" not in line
    failed = Verification(command="pytest -q", head_sha="a" * 40, passed=False, exit_code=1,
                          attempts=2)
    assert "failed" in render.verification_line(failed) and "exit 1" in \
        render.verification_line(failed)
