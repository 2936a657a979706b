"""`/hangar try N`: N attempts, ranked by fixed rules; `/hangar pick N` keeps one."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import wait_until

pytestmark = pytest.mark.slow

# Each attempt works on branch hangar/<issue>-<id>-<attempt> and behaves differently:
# 1 breaks the test, 2 fixes it with a large diff, 3 fixes it with the smallest one.
THREE_WAYS = """\
set -e
case "$(git rev-parse --abbrev-ref HEAD)" in
  *-1) printf 'def add(a, b):\\n    return a * b\\n' > calc.py ;;
  *-2) sed -i 's/return a - b/return a + b/' calc.py
       for i in $(seq 1 40); do echo "# note $i" >> calc.py; done ;;
  *-3) sed -i 's/return a - b/return a + b/' calc.py ;;
esac
git commit -qam "attempt"
echo "attempt done"
"""


def test_three_attempts_are_ranked_and_one_is_picked(world):
    world.start_hangar(THREE_WAYS, max_agents=3)
    issue, _ = world.ask("/hangar try 3 fix the failing test")
    status = wait_until(lambda: "**Ranking**" in world.status(issue) and world.status(issue),
                        120, "the ranking")
    ranking = status[status.index("**Ranking**"):]
    rows = [line for line in ranking.splitlines() if line.startswith("| ") and "#" in line]
    assert [row.split("|")[2].strip() for row in rows] == ["3", "2", "1"]
    assert "verification failed" in rows[2]
    assert len(world.hangar_prs()) == 3

    world.hub.comment(world.repo, issue, "/hangar pick 3", as_user=world.maintainer)
    kept = wait_until(lambda: "✅ picked" in world.status(issue), 30, "the pick")
    assert kept
    prs = {p["head"]["ref"][-1]: p for p in world.hub.list_prs(world.repo)}
    wait_until(lambda: all(world.hub.get_pr(world.repo, prs[a]["number"])["state"] == "closed"
                           for a in "12"), 30, "the other attempts closed")
    assert world.hub.get_pr(world.repo, prs["3"]["number"])["state"] == "open"


def test_pick_without_attempts_is_answered(world):
    world.start_hangar()
    issue, _ = world.ask("/hangar pick 2")
    reply = wait_until(lambda: world.replies(issue), 30, "the reply")
    assert "there are none on this thread" in reply[0]
