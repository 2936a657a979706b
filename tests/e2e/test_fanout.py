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
    assert [row.split("|")[4].strip() for row in rows] == [
        "yes", "yes", "no: verification failed"]
    assert "verification failed" in rows[2]
    assert "**Pass rate:** verification passed in 2 of 3 attempts." in ranking
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


def test_an_ineligible_attempt_gets_no_autofix_turn_and_is_picked_only_with_force(world):
    world.start_hangar(THREE_WAYS, max_agents=3)
    issue, _ = world.ask("/hangar try 3 fix the failing test")
    wait_until(lambda: "**Ranking**" in world.status(issue), 120, "the ranking")
    prs = {p["head"]["ref"][-1]: p for p in world.hub.list_prs(world.repo)}
    failing = prs["1"]["number"]
    # its `hangar / verify` failed, which auto-fix acts on; a fan-out's attempt waits
    held = wait_until(lambda: f"**Auto-fix on #{failing}:** attempt 1 of a `/hangar try` is "
                      "not picked" in world.status(issue), 60, "auto-fix's hold said")
    assert held and "auto-fix turn" not in world.status(issue)

    world.hub.comment(world.repo, issue, "/hangar pick 1", as_user=world.maintainer)
    reply = wait_until(lambda: [r for r in world.replies(issue) if "not eligible" in r], 30,
                       "the refusal")
    assert ("Attempt 1 is not eligible (verification failed), so it was not kept; attempt 3 "
            "ranks first of the eligible ones. `/hangar pick 1 --force` keeps it all the "
            "same.") in reply[0]
    assert "✅ picked" not in world.status(issue)
    assert all(world.hub.get_pr(world.repo, p["number"])["state"] == "open"
               for p in prs.values())

    world.hub.comment(world.repo, issue, "/hangar pick 1 --force", as_user=world.maintainer)
    wait_until(lambda: "| 3 | 1 ✅ picked |" in world.status(issue), 30, "the forced pick")
    wait_until(lambda: all(world.hub.get_pr(world.repo, prs[a]["number"])["state"] == "closed"
                           for a in "23"), 30, "the other attempts closed")
    # picked, its failure is auto-fix's to work on now
    wait_until(lambda: "auto-fix turn 1 of 2: hangar / verify failed" in world.status(issue),
               60, "the picked attempt's auto-fix turn")


# The repository's CI: quick on attempts 1 and 3, still running on attempt 2's head (its
# notes) for far longer than the test waits for anything.
SLOW_ON_ATTEMPT_2 = "if grep -q '# note' calc.py; then sleep 280; fi; true"


def test_the_ranking_waits_for_ci_and_an_event_ends_the_wait(world):
    world.hub.set_ci(world.repo, SLOW_ON_ATTEMPT_2, timeout=300)
    world.start_hangar(THREE_WAYS, max_agents=3, settings={"grading_wait_seconds": 1800})
    issue, _ = world.ask("/hangar try 3 fix the failing test")
    heads = wait_until(lambda: (len(world.hangar_prs()) == 3 and
                                {p["head"]["ref"][-1]: p["head"]["sha"]
                                 for p in world.hub.list_prs(world.repo)}),
                       120, "three attempts' PRs")
    slow = heads["2"]
    grading = wait_until(lambda: "**Grading:**" in world.status(issue) and world.status(issue),
                         180, "the ranking said to wait for CI")
    assert f"attempt 2's head `{slow[:7]}`" in grading
    assert "**Ranking**" not in grading
    assert "once CI has finished" in grading  # the next step says what it waits for
    # Waiting is waiting: CI is read again on a CI event of an attempt's head or at the
    # deadline, never in a loop (a loop read it hundreds of times a second).
    reads = lambda: sum(1 for _, path, _ in world.hub.api_calls(world.app.id)  # noqa: E731
                        if path.endswith(f"/commits/{slow}/check-runs"))
    assert reads() <= 40, f"CI read {reads()} times before the status said it waits"

    # CI finishing on the slow head (a re-run that passed) is the event that ends the wait,
    # long before HANGAR_GRADING_WAIT_SECONDS.
    world.hub.complete_check(world.repo, slow, "ci / test", "success")
    status = wait_until(lambda: "**Ranking**" in world.status(issue) and world.status(issue),
                        120, "the ranking after CI finished")
    assert "**Grading:**" not in status and "had not finished" not in status
    ranking = status[status.index("**Ranking**"):]
    rows = [line for line in ranking.splitlines() if line.startswith("| ") and "#" in line]
    assert [row.split("|")[2].strip() for row in rows] == ["3", "2", "1"]
    assert "CI passed" in rows[1]
    assert reads() <= 50, f"CI read {reads()} times in all"


def test_past_the_grading_wait_the_ranking_names_the_heads_whose_ci_had_not_finished(world):
    world.hub.set_ci(world.repo, SLOW_ON_ATTEMPT_2, timeout=300)
    world.start_hangar(THREE_WAYS, max_agents=3, settings={"grading_wait_seconds": 20})
    issue, _ = world.ask("/hangar try 3 fix the failing test")
    status = wait_until(lambda: "**Ranking**" in world.status(issue) and world.status(issue),
                        240, "the ranking once the wait ran out")
    slow = {p["head"]["ref"][-1]: p["head"]["sha"] for p in world.hub.list_prs(world.repo)}["2"]
    assert "**CI had not finished** after " in status
    assert f"on attempt 2's head `{slow[:7]}`; the ranking counts their CI as pending." in status
    ranking = status[status.index("**Ranking**"):]
    rows = [line for line in ranking.splitlines() if line.startswith("| ") and "#" in line]
    assert "CI pending" in rows[[row.split("|")[2].strip() for row in rows].index("2")]


def test_the_repositorys_weights_rank_by_score_and_say_what_each_scored(world):
    # This repository wants the larger change (its notes), and a passing verification most.
    world.hub.push_files(world.repo, "main", {".github/hangar.yml": (
        "fanout:\n  weights: {verification: 10, diff_lines: 0.1}\n")}, "Rank by weights",
        as_user=world.maintainer, bypass_rules=True)
    world.start_hangar(THREE_WAYS, max_agents=3)
    issue, _ = world.ask("/hangar try 3 fix the failing test")
    status = wait_until(lambda: "**Ranking**" in world.status(issue) and world.status(issue),
                        120, "the ranking")
    ranking = status[status.index("**Ranking**"):]
    assert "the score this repository's `fanout.weights` give, higher first" in ranking
    rows = [line for line in ranking.splitlines() if line.startswith("| ") and "#" in line]
    # by score 2 (the larger fix) comes first; the fixed order would put 3 first
    assert [row.split("|")[2].strip() for row in rows] == ["2", "3", "1"]
    assert "; score 14.2 = verified 1 × 10 + changed lines 42 × 0.1 |" in rows[0]
    assert "; score 10.2 = verified 1 × 10 + changed lines 2 × 0.1 |" in rows[1]
    # a failed verification is a gate: last, whatever it scores
    assert rows[2].split("|")[4].strip() == "no: verification failed"
    assert "; score " in rows[2] and "verified 0 × 10" in rows[2]
