"""GitHub's gate, end to end through fakehub: hangar computes GitHub's merge decision
before it asks, waits for what a person must still do (a code owner's approval, a resolved
conversation, the one App's check), asks again when GitHub is still computing
mergeability, and verifies again on "Re-run all checks"."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import wait_until
from tests.e2e.test_landing import (
    approve,
    land_check,
    landed,
    merge_calls,
    on_main,
    says,
    verified_pr,
)

pytestmark = pytest.mark.slow

PR_RULE = {"required_approving_review_count": 1, "dismiss_stale_reviews_on_push": True,
           "require_code_owner_review": False, "require_last_push_approval": False,
           "required_review_thread_resolution": False}


def ruleset(world, *rules) -> None:
    world.hub.set_ruleset(world.repo, {"name": "gate", "target": "branch",
                                       "enforcement": "active", "rules": list(rules)})


def writer(world, login: str) -> None:
    world.hub.create_user(login)
    world.hub.grant(world.repo, login, "write")


def test_a_code_owner_must_approve_the_files_they_own(world):
    writer(world, "walt")
    on_main(world, {".github/CODEOWNERS": "/calc.py @walt\n"})
    ruleset(world, {"type": "pull_request",
                    "parameters": {**PR_RULE, "require_code_owner_review": True}})
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    number = pr["number"]
    approve(world, number)  # rita: a writer, not calc.py's owner

    line = wait_until(lambda: says(world, number, "code owner"), 60, "the wait for an owner")
    assert "1 more approval from a code owner of `/calc.py` (@walt)" in line
    assert land_check(world, pr["head"]["sha"])["status"] == "in_progress"
    assert merge_calls(world, number) == []
    approve(world, number, who="walt")
    wait_until(lambda: landed(world, number), 60, "the PR to land")
    assert merge_calls(world, number) == [200]


def test_an_unresolved_conversation_is_waited_for_until_resolved(world):
    ruleset(world, {"type": "pull_request",
                    "parameters": {**PR_RULE, "required_review_thread_resolution": True}})
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    number = pr["number"]
    review = world.hub.review(world.repo, number, as_user=world.reviewer, event="APPROVE",
                              commit_id=pr["head"]["sha"],
                              comments=[{"path": "calc.py", "line": 2, "body": "nit: spacing"}])

    wait_until(lambda: says(world, number, "1 unresolved conversation(s)"), 60,
               "the wait for the conversation")
    assert merge_calls(world, number) == []
    world.hub.resolve_thread(world.repo, number, review, as_user=world.reviewer)
    wait_until(lambda: landed(world, number), 60, "the PR to land")
    assert merge_calls(world, number) == [200]


def test_a_check_bound_to_the_ci_app_is_met_only_by_that_apps_check_run(world):
    ci_app = world.hub.ci_app_id
    ruleset(world, {"type": "pull_request", "parameters": PR_RULE},
            {"type": "required_status_checks", "parameters": {
                "required_status_checks": [{"context": "ci / test", "integration_id": ci_app}],
                "strict_required_status_checks_policy": False}})
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    number, head = pr["number"], pr["head"]["sha"]
    # A person's commit status with the check's name: GitHub would not count it.
    world.hub.set_status(world.repo, head, "ci / test", "success", as_user=world.maintainer)
    approve(world, number)

    wait_until(lambda: says(world, number, "waiting for ci / test"), 60,
               "hangar to wait for the CI App's check")
    assert merge_calls(world, number) == []
    world.hub.complete_check(world.repo, head, "ci / test", "success")
    wait_until(lambda: landed(world, number), 60, "the PR to land")
    assert merge_calls(world, number) == [200]


def test_a_merge_while_github_computes_mergeability_is_asked_again_and_lands(world):
    ruleset(world, {"type": "pull_request", "parameters": PR_RULE})
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    world.hub.delay_mergeability(reads=1, merges=1)
    approve(world, pr["number"])
    wait_until(lambda: landed(world, pr["number"]), 60, "the PR to land")
    assert merge_calls(world, pr["number"]) == [405, 200]


def test_re_run_all_checks_verifies_the_head_again(world):
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    head = pr["head"]["sha"]

    def verifications() -> list[dict]:
        return [c for c in world.hub.check_runs(world.repo, head)
                if c["name"] == "hangar / verify" and c["app"]["id"] == world.app.id]

    before = len(world.hub.deliveries(event="check_suite"))
    world.hub.rerun_all_checks(world.repo, head, world.app.id, as_user=world.maintainer)
    rerun = wait_until(
        lambda: [d for d in world.hub.deliveries(event="check_suite")[before:]
                 if d.payload["action"] == "rerequested"], 30, "GitHub's rerequested")
    assert rerun[0].payload["check_suite"]["app"]["id"] == world.app.id
    done = wait_until(lambda: len(verifications()) == 2 and all(
        c["status"] == "completed" for c in verifications()) and verifications(), 120,
        "a second verification of the head")
    assert [c["conclusion"] for c in done] == ["success", "success"]


# Fixes add() and leaves a note of its own, so two jobs make two PRs that merge together.
FIX_AND_NOTE = """\
set -e
sed -i 's/return a - b/return a + b/' calc.py
echo "$HANGAR_PROMPT" > "note-$(echo "$HANGAR_PROMPT" | md5sum | cut -c1-8).txt"
git add -A
git commit -qm "Fix add() and leave a note"
"""
QUEUE = {"type": "merge_queue", "parameters": {
    "check_response_timeout_minutes": 60, "grouping_strategy": "ALLGREEN",
    "max_entries_to_build": 5, "max_entries_to_merge": 5, "merge_method": "MERGE",
    "min_entries_to_merge": 1, "min_entries_to_merge_wait_minutes": 0}}


def test_a_merge_queue_lands_two_prs_in_order(world):
    ruleset(world, {"type": "pull_request", "parameters": PR_RULE}, QUEUE,
            {"type": "required_status_checks", "parameters": {
                "required_status_checks": [{"context": "hangar / verify",
                                            "integration_id": world.app.id}],
                "strict_required_status_checks_policy": False}})
    world.start_hangar(FIX_AND_NOTE)
    first_issue, _ = world.ask("/hangar fix the failing test")
    first = verified_pr(world, first_issue)
    second_issue, _ = world.ask("/hangar fix it and note the second")
    second = verified_pr(world, second_issue)
    approve(world, first["number"])
    approve(world, second["number"])

    def merged_at(number):
        pr = world.hub.get_pr(world.repo, number)
        return pr["merged_at"] if pr["merged"] else None

    try:
        wait_until(lambda: landed(world, first["number"]) and landed(world, second["number"]),
                   240, "both PRs to land through the queue")
    except AssertionError:
        from tests.e2e.test_landing import land_line
        print("LAND1", land_line(world, first["number"]))
        print("LAND2", land_line(world, second["number"]))
        print("GROUPS", [(d.payload["action"], d.payload.get("reason"),
                          d.payload["merge_group"]["head_ref"])
                         for d in world.hub.deliveries(event="merge_group")])
        print("PR", [(d.payload["action"], d.payload.get("number")) for d in
                     world.hub.deliveries(event="pull_request")])
        raise
    assert merged_at(first["number"]) <= merged_at(second["number"])
    assert merge_calls(world, first["number"]) == merge_calls(world, second["number"]) == []
    groups = [d.payload for d in world.hub.deliveries(event="merge_group")
              if d.payload["action"] == "checks_requested"]
    heads = [g["merge_group"]["head_sha"] for g in groups]
    assert len(heads) == 2
    main = world.hub.ref_sha(world.repo, "main")
    assert main == heads[1]  # the second group, built on the first, is main now
    verify = {h: [c for c in world.hub.check_runs(world.repo, h)
                  if c["name"] == "hangar / verify"] for h in heads}
    # The first group holds the first PR's verified head on the same base: reused.
    assert "holds exactly" in verify[heads[0]][0]["output"]["summary"]
    # The second is built on the first: verified in a clean sandbox.
    assert verify[heads[1]][0]["conclusion"] == "success"
    assert "holds exactly" not in verify[heads[1]][0]["output"]["summary"]
