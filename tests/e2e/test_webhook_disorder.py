"""GitHub delivers webhooks late, twice and out of order; hangar's loop still ends right.

One world: a job from the comment to a verified PR, a follow-up turn on it, then an
approval and the landing, with fakehub delivering everything twice (the
same X-GitHub-Delivery) and shuffling what it queued within 0.2 s.
"""

from __future__ import annotations

from collections import Counter

import pytest

from tests.e2e.conftest import TWO_TURNS, wait_until

pytestmark = pytest.mark.slow


def _one_of_each(world, sha: str) -> Counter:
    """Check runs on sha by name and run (`external_id`): a follow-up turn that started
    from a head has its own `hangar / agent` there, beside the first turn's."""
    return Counter((c["name"], c["external_id"]) for c in world.hub.check_runs(world.repo, sha))


def test_a_job_its_follow_up_and_its_landing_with_webhooks_twice_and_out_of_order(world):
    hub, repo = world.hub, world.repo
    hub.protect(repo, checks=("hangar / verify",))
    hub.disorder_webhooks(duplicate_rate=1.0, reorder_window=0.2, seed=14)
    world.start_hangar(TWO_TURNS)
    issue, _ = world.ask("/hangar fix the failing test")
    pr = wait_until(lambda: world.verified(issue), 90, "the first turn's verified PR")
    first_head = pr["head"]["sha"]

    hub.comment(repo, pr["number"], "/hangar also add sub()", as_user=world.maintainer)

    def second_turn_verified():
        now = hub.get_pr(repo, pr["number"])
        check = world.checks(now["head"]["sha"]).get("hangar / verify")
        if now["head"]["sha"] != first_head and check and check["status"] == "completed":
            return now
        return None

    pr2 = wait_until(second_turn_verified, 90, "the follow-up turn verified")
    assert "2 commit(s)" in pr2["body"]
    hub.review(repo, pr["number"], as_user=world.reviewer, event="APPROVE",
               commit_id=pr2["head"]["sha"])
    wait_until(lambda: "has landed" in world.status(issue), 90, "the issue to say landed")
    hub.settle()

    # the disorder happened: both commands came twice (and hangar acted on each once)
    guids = Counter(d.guid for d in hub.deliveries(app_id=world.app.id))
    commands = [d.guid for d in hub.deliveries(world.app.id, "issue_comment")
                if d.payload["comment"]["body"].startswith("/hangar")]
    assert len(set(commands)) == 2 and all(guids[g] >= 2 for g in commands)
    # one PR, merged once, by hangar, with both turns' work
    prs = world.hangar_prs()
    assert [p["number"] for p in prs] == [pr["number"]]
    landed = hub.get_pr(repo, pr["number"])
    assert landed["merged"] and landed["merged_by"]["login"] == world.app.bot_login
    merges = [s for m, p, s in hub.api_calls(world.app.id)
              if m == "PUT" and p.endswith(f"/pulls/{pr['number']}/merge")]
    assert merges == [200]
    assert b"def sub(a, b)" in hub.read_file(repo, "calc.py")
    # one status comment in each thread, never a second
    assert len(world.status_comments(issue)) == 1
    assert len(world.status_comments(pr["number"])) == 1
    # each head has one check run of each name (agent, verify, and land on the last)
    assert set(_one_of_each(world, first_head).values()) == {1}
    last = _one_of_each(world, pr2["head"]["sha"])
    assert set(last.values()) == {1} and "hangar / land" in {name for name, _ in last}
    # exactly one follow-up turn, and one PR ever opened
    status = world.status(issue)
    assert "follow-up turn 1" in status and "follow-up turn 2" not in status
    commits = hub.api_calls(world.app.id)
    assert sum(1 for m, p, s in commits if m == "POST" and p.endswith("/pulls")) == 1


def test_a_delivery_that_comes_again_later_changes_nothing(world):
    """GitHub sends a delivery again with the same X-GitHub-Delivery (a redelivery, or
    disorder's copies). Handled twice, a person's push would count as made again when
    the copy came (holding auto-fix back longer) and would start a stopped landing over;
    stored once by its id, the copy changes nothing."""
    from app.autofix import AutofixRow, row_id
    from app.landing import LandRequest, land_id
    from app.store import Store

    hub, repo = world.hub, world.repo
    hub.push_files(repo, "main", {".github/hangar.yml": (
        "land:\n  ci_timeout_minutes: 0.05\nautofix:\n  enabled: false\n")},
        "hangar config", as_user=world.maintainer, bypass_rules=True)
    hub.protect(repo, checks=("ci / lint",))  # nothing ever reports ci / lint
    hub.disorder_webhooks(duplicate_rate=1.0, reorder_window=0.2, seed=7)
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test")
    pr = wait_until(lambda: world.verified(issue), 90, "the verified PR")
    number = pr["number"]

    # a person pushes to hangar's branch, and someone else approves that head
    mark = hub.delivery_mark()
    head = hub.push_files(repo, pr["head"]["ref"], {"NOTES.md": "by hand\n"}, "Notes",
                          as_user=world.maintainer)
    push = hub.wait_for_delivery("pull_request", "synchronize", since=mark,
                                 app_id=world.app.id)
    hub.review(repo, number, as_user=world.reviewer, event="APPROVE", commit_id=head)
    store = Store(world.settings.db_path)

    def stopped():
        request = store.get("land", land_id(repo, number), LandRequest)
        return request if request and request.state == "ci_failed" else None

    def head_verified():
        check = world.checks(head).get("hangar / verify")
        return check is not None and check["status"] == "completed"

    wait_until(head_verified, 90, "hangar's verification of the pushed head")
    wait_until(stopped, 90, "the landing to stop on ci / lint")
    world.settle("what the last deliveries woke to have run")
    before = stopped()
    assert before is not None
    autofix_before = store.get("autofix", row_id(repo, number), AutofixRow)
    assert autofix_before.last_human_push_at is not None

    # the push's delivery again, as GitHub redelivers it: the same id, much later
    again = hub.redeliver(push.guid)
    assert again.guid == push.guid
    world.settle("hangar to handle the redelivered push")

    after = stopped()
    assert after is not None, "the stopped landing was started over"
    assert after.history == before.history
    autofix_after = store.get("autofix", row_id(repo, number), AutofixRow)
    assert autofix_after.last_human_push_at == autofix_before.last_human_push_at
    assert autofix_after.pushed_heads.count(head) == 1
