"""How a run's refused connections read: with counts once the agent stopped; while it
runs, only the hosts, in the order they were first refused, so that the status comment
changes when a new host is refused and not at every try."""

from __future__ import annotations

import pytest

from app.render import blocked_line, running_blocked_note

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
