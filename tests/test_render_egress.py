"""How a run's refused connections read: with counts once the agent stopped; while it
runs, only the hosts, in the order they were first refused, so that the status comment
changes when a new host is refused and not at every try."""

from __future__ import annotations

import pytest

from app.models import Run, RunStage, RunState, Verification
from app.render import (
    BLOCKED_SHOWN,
    agent_check_output,
    blocked_line,
    running_blocked_note,
    verify_check_output,
)

REFUSED = [  # as the ledger gives them: most refused first
    {"host": "example.org", "port": 443, "count": 5, "first_at": 20.0},
    {"host": "files.example.com", "port": 443, "count": 1, "first_at": 10.0},
]


@pytest.mark.parametrize(("text", "expected"), [
    (blocked_line(REFUSED),
     "🚫 blocked: `example.org:443`, 5 times; `files.example.com:443`, 1 time (outside"),
    (blocked_line(REFUSED, so_far=True),
     "🚫 blocked so far: `files.example.com:443`; `example.org:443` (outside"),
    (running_blocked_note(REFUSED, None),
     "🚫 blocked so far: `files.example.com:443`; `example.org:443` (outside"),
    (running_blocked_note(REFUSED, 2),
     "Attempt 2: 🚫 blocked so far: `files.example.com:443`; `example.org:443` (outside"),
])
def test_refusals_read(text, expected):
    assert text.startswith(expected), text
    assert text.endswith("an operator adds hosts under `egress.allow` in envs/, "
                         "see docs/egress.md)")


def test_a_count_changing_while_the_agent_runs_changes_nothing_shown():
    tried_again = [{**REFUSED[0], "count": 9}, {**REFUSED[1], "count": 4}]
    assert running_blocked_note(tried_again, None) == running_blocked_note(REFUSED, None)
    assert running_blocked_note([], 1) is None


def decoys(count: int, real: str = "exfil.example.net") -> list[dict]:
    """A sandbox hiding one host behind many: tried once, among decoys tried more."""
    tried = [{"host": f"decoy-{i:03d}.example", "port": 443, "count": 50, "first_at": float(i)}
             for i in range(count)]
    return [*tried, {"host": real, "port": 443, "count": 1, "first_at": 1000.0}]


def test_no_refused_host_hides_behind_decoys():
    blocked = decoys(40)
    # The status comment: every host up to its bound, then how many more and where.
    line = blocked_line(blocked)
    assert line.count("decoy-") == BLOCKED_SHOWN
    assert f"and {len(blocked) - BLOCKED_SHOWN} more, every one listed in the " \
           "`hangar / agent` check run" in line
    # The agent's check run lists every one of them.
    run = Run(id="run-1", job_id="job-1", attempt=1, branch="hangar/7-ab", base_branch="main",
              state=RunState.EXITED, stage=RunStage.DONE, exit_code=0,
              agent={"egress_blocked": blocked})
    summary = agent_check_output(run)["summary"]
    assert "exfil.example.net:443" in summary and summary.count("decoy-") == 40
    verify = Verification(command="make test", head_sha="a" * 40, passed=True,
                          egress_blocked=blocked)
    assert "exfil.example.net:443" in verify_check_output(verify)["summary"]


def test_a_thousand_refused_hosts_fit_the_check_run():
    blocked = decoys(999)
    summary = agent_check_output(Run(
        id="run-1", job_id="job-1", attempt=1, branch="b", base_branch="main",
        state=RunState.EXITED, stage=RunStage.DONE, agent={"egress_blocked": blocked}))[
        "summary"]
    assert "exfil.example.net:443" in summary and "cut:" not in summary
