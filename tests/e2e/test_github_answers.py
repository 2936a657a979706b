"""GitHub's refusals and lost answers, end to end: hangar reads each one right, never
retries in a tight loop, and never writes twice because an answer was lost.

Through fakehub over real HTTP and real git; GitHub's exact words where fakehub does
not produce the refusal itself are injected as faults.
"""

from __future__ import annotations

import time

import pytest

from app.engine import MAX_STEP_FAILURES
from fakehub import gitrepo
from tests.conftest import hangar_permissions
from tests.e2e.conftest import wait_until
from tests.e2e.test_landing import (
    approve,
    land_check,
    landed,
    merge_calls,
    on_main,
    protect,
    says,
    verified_pr,
)

pytestmark = pytest.mark.slow

def update_calls(world, number: int) -> list[int]:
    return [status for method, path, status in world.hub.api_calls(world.app.id)
            if method == "PUT" and path.endswith(f"/pulls/{number}/update-branch")]


def behind_main(world, settings: dict | None = None) -> dict:
    """A verified hangar PR whose base has moved on since (so landing updates it first)."""
    protect(world, checks=())
    world.start_hangar(settings=settings)
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    on_main(world, {"docs.md": "unrelated\n"})
    return pr


def test_an_update_refused_for_workflows_stops_once_and_says_what_to_do(world):
    # The owner has not accepted the `workflows` permission yet; main gains a workflow.
    granted = {k: v for k, v in hangar_permissions().items() if k != "workflows"}
    world.hub.set_installation_permissions(world.installation_id, granted)
    protect(world, checks=())
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    on_main(world, {".github/workflows/ci.yml": "on: push\n"})
    approve(world, pr["number"])
    line = wait_until(lambda: says(world, pr["number"], "failed"), 60, "landing to stop")
    assert "`workflows` permission" in line and "/hangar land" in line
    # Asked once; that the next looks ask nothing again is tests/app/test_land_steps.py's.
    assert update_calls(world, pr["number"]) == [403]


def test_an_update_that_keeps_failing_backs_off_then_stops(world):
    pr = behind_main(world, settings={"step_backoff_seconds": 1})
    world.hub.inject_fault("PUT", rf"/pulls/{pr['number']}/update-branch$", status=500,
                           times=None)
    started = time.monotonic()
    approve(world, pr["number"])
    line = wait_until(lambda: says(world, pr["number"], "stopped trying"), 90, "the cap")
    assert "/hangar land" in line
    # 1 + 2 + 4 + 8 s apart (from a base of 2 s by default), not at every 1 s tick; and
    # a PUT is never re-sent by the client.
    assert time.monotonic() - started >= 14
    assert update_calls(world, pr["number"]) == [500] * MAX_STEP_FAILURES


def test_base_branch_modified_is_asked_again_and_lands(world):
    protect(world, checks=())
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    world.hub.inject_fault("PUT", rf"/pulls/{pr['number']}/merge$", status=405,
                           message="Base branch was modified. Review and try the merge again.")
    approve(world, pr["number"])
    wait_until(lambda: landed(world, pr["number"]), 60, "the PR to land")
    assert merge_calls(world, pr["number"]) == [405, 200]


def test_a_merge_answered_through_the_merge_queue_is_enqueued(world):
    # The rules hangar reads show no queue (an organization's it cannot see, say), but
    # GitHub answers the merge so: hangar asks the queue, and says what GitHub answers.
    protect(world, checks=())
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    world.hub.inject_fault("PUT", rf"/pulls/{pr['number']}/merge$", status=405, times=None,
                           message="Changes must be made through the merge queue")
    approve(world, pr["number"])
    line = wait_until(lambda: says(world, pr["number"], "refused the merge"), 60,
                      "the queue's answer")
    assert "does not require a merge queue" in line  # fakehub's queue: there is none
    assert merge_calls(world, pr["number"]) == [405]  # and no more: test_land_steps
    assert ("POST", "/graphql") in {(m, p) for m, p, _ in world.hub.api_calls(world.app.id)}


def test_a_merge_method_the_repository_forbids_is_swapped_for_an_allowed_one(world):
    protect(world, checks=())
    world.hub.set_merge_methods(world.repo, "merge")  # hangar's default is squash
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    approve(world, pr["number"])
    done = wait_until(lambda: landed(world, pr["number"]), 60, "the PR to land")
    assert merge_calls(world, pr["number"]) == [405, 200]
    tip = gitrepo.commit_info(world.hub.repo_path(world.repo), done["merge_commit_sha"])
    assert len(tip.parents) == 2  # a merge commit, as the repository allows


def test_a_landing_whose_check_run_github_failed_to_write_shows_it_once_github_answers(
        world):
    """The land step that merged could not write check run `hangar / land` (GitHub
    answered 502): the request has landed, and its check says so once GitHub answers."""
    protect(world, checks=())
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    head = pr["head"]["sha"]
    world.hub.inject_fault("POST", r"/check-runs$", status=502, times=None)
    world.hub.inject_fault("PATCH", r"/check-runs/\d+$", status=502, times=None)
    approve(world, pr["number"])
    wait_until(lambda: landed(world, pr["number"]), 90, "the PR to land")
    world.hub.clear_faults()
    check = wait_until(lambda: (land_check(world, head) or {}).get("conclusion") and
                       land_check(world, head), 60, "the land check to show how it ended")
    assert check["conclusion"] == "success" and check["output"]["title"] == "Landed"


def test_writes_whose_answer_was_lost_are_read_back_not_repeated(world):
    # GitHub did the write, then answered 502: a retry must find it, not make another.
    world.hub.inject_fault("POST", r"/issues/\d+/comments$", status=502, after=True)
    world.hub.inject_fault("POST", r"/check-runs$", status=502, after=True)
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    wait_until(lambda: "✅" in world.status(pr["number"]), 60, "the finished status")
    assert len(world.status_comments(issue)) == 1
    assert len(world.status_comments(pr["number"])) == 1
    names = [c["name"] for c in world.hub.check_runs(world.repo, pr["head"]["sha"])]
    assert sorted(names) == sorted(set(names)), names


def test_a_landing_stopped_by_ci_is_looked_at_again_when_checks_complete(world):
    on_main(world, {".github/hangar.yml": "autofix:\n  enabled: false\n"})
    protect(world, checks=("ci / test",))
    world.hub.set_ci(world.repo, "exit 1")
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    approve(world, pr["number"])
    wait_until(lambda: says(world, pr["number"], "required checks failed"), 90, "ci_failed")
    # CI is run again and passes (a flaky test): the landing goes on without anyone asking.
    world.hub.complete_check(world.repo, pr["head"]["sha"], "ci / test", "success")
    wait_until(lambda: landed(world, pr["number"]), 60, "the PR to land")
    assert merge_calls(world, pr["number"]) == [200]


@pytest.mark.parametrize("where", ["review body", "line comment"])
def test_a_hangar_command_in_a_review_is_read(world, where):
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    if where == "review body":
        world.hub.review(world.repo, pr["number"], as_user=world.reviewer, event="COMMENT",
                         body="/hangar also add a docstring")
    else:
        world.hub.review(world.repo, pr["number"], as_user=world.reviewer, event="COMMENT",
                         comments=[{"path": "calc.py", "line": 2,
                                    "body": "/hangar also add a docstring"}])
    asked = f"asked by @{world.reviewer}"
    wait_until(lambda: asked in world.status(pr["number"]).replace("\u200b", ""), 60,
               "a follow-up turn asked in the review")
