"""Nothing is lost: the agent's commits survive a push GitHub does not take.

Through fakehub over real HTTP with injected faults on git-receive-pack, real git through
hangar's push proxy, and the local (bubblewrap) provider.
"""

from __future__ import annotations

import pytest

from tests.e2e.conftest import FIX_AGENT, TWO_TURNS, wait_until

pytestmark = pytest.mark.slow

RECEIVE_PACK = r"\.git/git-receive-pack$"


def approve_and_wait_for_merge(world, pr: dict) -> None:
    world.hub.review(world.repo, pr["number"], as_user=world.reviewer, event="APPROVE",
                     commit_id=pr["head"]["sha"])
    wait_until(lambda: world.hub.get_pr(world.repo, pr["number"])["merged"], 60, "the merge")


def test_a_push_answered_502_once_is_retried_and_lands(world):
    fault = world.hub.inject_fault("POST", RECEIVE_PACK, status=502, times=1)
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test")
    pr = wait_until(lambda: world.verified(issue), 90, "a verified PR after the 502")
    assert fault.fired == 1  # the first push did meet the 502
    assert world.checks(pr["head"]["sha"])["hangar / verify"]["conclusion"] == "success"
    assert "made no commits" not in world.status(issue)
    approve_and_wait_for_merge(world, pr)
    assert not list((world.settings.data_dir / "bundles").glob("*.bundle"))


def test_a_push_that_keeps_failing_is_held_in_a_bundle_and_retry_lands_it(world):
    fault = world.hub.inject_fault("POST", RECEIVE_PACK, status=502, times=None)
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test")
    status = wait_until(lambda: "kept safe" in world.status(issue) and world.status(issue),
                        90, "the held status")
    assert fault.fired >= 4  # the first push and its retries
    bundles = list((world.settings.data_dir / "bundles").glob("*.bundle"))
    assert len(bundles) == 1 and bundles[0].stat().st_size > 0
    assert "the push did not go through" in status and "/hangar retry" in status
    assert "GitHub refused" not in status  # a 502 is no refusal, and not said to be one
    assert "HTTP 502" in status  # git's own words, in a code block
    assert "made no commits" not in status
    assert world.hangar_prs() == []

    # GitHub is back; a maintainer asks hangar to push what it kept.
    world.hub.clear_faults()
    world.hub.comment(world.repo, issue, "/hangar retry", as_user=world.maintainer)
    pr = wait_until(lambda: world.verified(issue), 90, "a verified PR after the retry")
    assert "Fix add()" in pr["body"]  # the agent's commit, from the bundle
    assert not list((world.settings.data_dir / "bundles").glob("*.bundle"))
    wait_until(lambda: "kept safe" not in world.status(issue), 20, "the status to move on")
    approve_and_wait_for_merge(world, pr)


def test_a_push_github_refuses_is_held_with_its_words_and_retry_pushes_it_once_allowed(world):
    ruleset = world.hub.set_ruleset(world.repo, {
        "name": "hangar branches only through pull requests", "target": "branch",
        "enforcement": "active",
        "conditions": {"ref_name": {"include": ["refs/heads/hangar/**"], "exclude": []}},
        "rules": [{"type": "pull_request", "parameters": {
            "required_approving_review_count": 1, "dismiss_stale_reviews_on_push": True,
            "require_code_owner_review": False, "require_last_push_approval": False,
            "required_review_thread_resolution": False}}],
    })
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test")
    status = wait_until(lambda: "kept safe" in world.status(issue) and world.status(issue),
                        90, "the held status")
    assert "GitHub refused the push" in status
    # GitHub's own words, quoted as text in a code block, not rendered
    quoted = status.split("```text\n", 2)[2].split("\n```")[0]
    assert "GH013: Repository rule violations found" in quoted
    assert "Changes must be made through a pull request." in quoted
    assert "/hangar retry" in status.split("**Next:**")[1]
    assert len(list((world.settings.data_dir / "bundles").glob("*.bundle"))) == 1

    world.hub.delete_ruleset(world.repo, ruleset["id"])
    world.hub.comment(world.repo, issue, "/hangar retry", as_user=world.maintainer)
    pr = wait_until(lambda: world.verified(issue), 90, "a verified PR after the retry")
    assert "Fix add()" in pr["body"]
    assert len(world.hangar_prs()) == 1


def test_retry_with_nothing_held_says_so(world):
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test")
    wait_until(lambda: world.verified(issue), 90, "a verified PR")
    world.hub.comment(world.repo, issue, "/hangar retry", as_user=world.maintainer)
    wait_until(lambda: any("holds no unpushed commits" in r for r in world.replies(issue)), 30,
               "the reply to a retry with nothing held")


def test_an_agent_out_of_time_with_unpushed_commits_has_them_held_not_destroyed(world):
    world.hub.inject_fault("POST", RECEIVE_PACK, status=503, times=None)
    world.start_hangar(FIX_AGENT + "sleep 120\n", max_minutes=0.05)
    issue, _ = world.ask("/hangar fix the failing test")
    status = wait_until(lambda: "kept safe" in world.status(issue) and world.status(issue),
                        90, "the held status")
    assert "stopped by hangar after its time limit" in status
    [bundle] = (world.settings.data_dir / "bundles").glob("*.bundle")
    assert bundle.read_bytes().startswith(b"# v2 git bundle")
    world.hub.clear_faults()
    world.hub.comment(world.repo, issue, "/hangar retry", as_user=world.maintainer)
    pr = wait_until(lambda: world.verified(issue), 90, "a verified PR after the retry")
    assert "Fix add()" in pr["body"]


def test_a_held_follow_up_turn_is_pushed_again_by_the_check_runs_button(world):
    world.start_hangar(TWO_TURNS)
    issue, _ = world.ask("/hangar fix the failing test")
    pr = wait_until(lambda: world.verified(issue), 90, "the first turn")
    first_head = pr["head"]["sha"]
    world.hub.inject_fault("POST", RECEIVE_PACK, status=502, times=None)
    world.hub.comment(world.repo, pr["number"], "/hangar also add sub()",
                      as_user=world.maintainer)

    def button():
        for check in world.hub.check_runs(world.repo, first_head):
            if check["name"] == "hangar / agent" and check["conclusion"] == "action_required":
                return check
        return None

    check = wait_until(button, 90, "the agent check asking for a retry")
    assert "kept them" in check["output"]["title"]
    assert "HTTP 502" in check["output"]["summary"]
    world.hub.clear_faults()
    world.hub.press_check_button(world.repo, check["id"], "retry", as_user=world.maintainer)

    def second_turn_verified():
        now = world.hub.get_pr(world.repo, pr["number"])
        if now["head"]["sha"] == first_head:
            return None
        verify = world.checks(now["head"]["sha"]).get("hangar / verify")
        return now if verify and verify["status"] == "completed" else None

    pr2 = wait_until(second_turn_verified, 90, "the held turn pushed by the button")
    assert "Add sub()" in pr2["body"] and len(world.hangar_prs()) == 1


PAT_SHAPE = "ghp_" + "A1b2C3d4E5" * 3 + "F6g7H8"  # a classic PAT's shape, not a real one
SECRET_AGENT = FIX_AGENT.replace(
    'git commit -qam "Fix add()"',
    f"echo \"TOKEN = '{PAT_SHAPE}'\" > settings.py\ngit add settings.py\n"
    'git commit -qam "Fix add()"')


def test_a_push_blocked_by_push_protection_quotes_github_and_lands_once_allowed(world):
    world.hub.set_push_protection(world.repo)
    world.start_hangar(SECRET_AGENT)
    issue, _ = world.ask("/hangar fix the failing test")
    status = wait_until(lambda: "kept safe" in world.status(issue) and world.status(issue),
                        90, "the held status")
    quoted = status.split("```text\n", 2)[2].split("\n```")[0]
    assert "GITHUB PUSH PROTECTION" in quoted and "Push cannot contain secrets" in quoted
    assert "path: settings.py:1" in quoted and "unblock-secret/" in quoted
    assert "a secret: allow it with GitHub's link" in status.split("**Next:**")[1]
    assert world.hangar_prs() == []

    world.hub.allow_secret(world.repo, PAT_SHAPE)
    world.hub.comment(world.repo, issue, "/hangar retry", as_user=world.maintainer)
    pr = wait_until(lambda: world.verified(issue), 90, "a verified PR once allowed")
    assert "settings.py" in pr["body"]
