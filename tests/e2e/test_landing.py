"""Landing end to end: a person approves the exact head in GitHub's review UI, hangar
merges as the App, and the branch ruleset is the gate.

Through fakehub over real HTTP with rulesets enforced on merge and push, real git, and
the local (bubblewrap) provider.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from fakehub import gitrepo
from tests.e2e.conftest import FIX_AGENT, ROOT, wait_until

pytestmark = pytest.mark.slow

LAND = "hangar / land"
UNITTEST = "python3 -m unittest -q"
BREAKER = """\
set -e
printf 'def add(a, b):\\n    return a * b\\n' > calc.py
git commit -qam "Rewrite add()"
"""  # an agent whose change fails verification


# -- helpers -------------------------------------------------------------------------


def protect(world, **kw):
    world.hub.protect(world.repo, **kw)


def on_main(world, files: dict[str, str | None], message: str = "Change main") -> str:
    """A commit straight onto main, as an admin allowed around the rules would push."""
    return world.hub.push_files(world.repo, "main", files, message, as_user=world.maintainer,
                                bypass_rules=True)


def pr_now(world, number: int) -> dict:
    return world.hub.get_pr(world.repo, number)


def approve(world, number: int, who: str | None = None, sha: str | None = None) -> int:
    sha = sha or pr_now(world, number)["head"]["sha"]
    return world.hub.review(world.repo, number, as_user=who or world.reviewer,
                            event="APPROVE", commit_id=sha)


def land_check(world, sha: str) -> dict | None:
    return world.checks(sha).get(LAND)


def land_line(world, number: int) -> str:
    """The landing line of hangar's status comment on the PR."""
    for line in world.status(number).splitlines():
        if line.startswith(f"**Landing #{number}:**"):
            return line
    return ""


def says(world, number: int, text: str) -> str | None:
    line = land_line(world, number)
    return line if text in line else None


def merged(world, number: int) -> dict | None:
    pr = pr_now(world, number)
    return pr if pr["merged"] else None


def landed(world, number: int) -> dict | None:
    """The PR once hangar has recorded it landed (not only once GitHub merged it)."""
    pr = merged(world, number)
    return pr if pr and says(world, number, "landed by hangar as") else None


def merge_calls(world, number: int) -> list[int]:
    """Status codes of hangar's own merge calls for this PR."""
    return [status for method, path, status in world.hub.api_calls(world.app.id)
            if method == "PUT" and path.endswith(f"/pulls/{number}/merge")]


def main_log(world) -> list[gitrepo.CommitInfo]:
    path = world.hub.repo_path(world.repo)
    return gitrepo.commits_between(path, None, world.hub.ref_sha(world.repo, "main"))


def explanations(world, number: int) -> list[str]:
    return [b for b in world.replies(number) if "does not count for landing" in b]


def unmerged(world, number: int) -> bool:
    """The PR is not merged, read once the step that decided not to merge was seen (its
    reason in the status comment). That a later look changes nothing is a step test's
    (tests/app/test_land_steps.py): no window here waits for a poll to show it."""
    return not pr_now(world, number)["merged"]


def stays_unmerged(world, number: int) -> bool:
    """True when the PR is not merged once hangar has handled every event so far: for an
    event whose effect is that nothing changes, so there is no sign of it to wait for."""
    world.settle("hangar to handle the events so far")
    return not merged(world, number)


def verified_pr(world, issue: int, timeout: float = 90) -> dict:
    return wait_until(lambda: world.verified(issue), timeout, "a verified PR")


# -- approve → landed ----------------------------------------------------------------


# On SQLite only: landing on PostgreSQL is test_replicas's, where every job lands once.
def test_an_approval_lands_one_squash_commit_by_the_app(world):
    protect(world, checks=("ci / test",))
    world.hub.set_ci(world.repo, UNITTEST)
    world.start_hangar()
    before = world.hub.ref_sha(world.repo, "main")
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    head = pr["head"]["sha"]
    approve(world, pr["number"])

    done = wait_until(lambda: landed(world, pr["number"]), 90, "the PR to land")
    main = world.hub.ref_sha(world.repo, "main")
    assert done["merge_commit_sha"] == main
    assert done["merged_by"]["login"] == world.app.bot_login
    commit = gitrepo.commit_info(world.hub.repo_path(world.repo), main)
    assert commit.parents == [before]  # one squash commit on top of the old main
    assert commit.message.startswith(f"{pr['title']} (#{pr['number']})")
    assert world.hub.read_file(world.repo, "calc.py") == b"def add(a, b):\n    return a + b\n"
    assert merge_calls(world, pr["number"]) == [200]
    # the merge sha is recorded where people look: the status comment and check run
    said = f"landed by hangar as `{main[:7]}`, approved by @rita at `{head[:7]}`"
    assert said in land_line(world, pr["number"])
    status = wait_until(lambda: "has landed" in world.status(issue) and world.status(issue),
                        15, "the issue's status to say landed")
    assert f"landed by hangar as `{main[:7]}`" in status
    assert f"**Next:** nothing: #{pr['number']} has landed" in status
    check = land_check(world, head)
    assert check["conclusion"] == "success"
    assert main[:7] in check["output"]["summary"]
    assert said in check["output"]["summary"]
    commit_message = gitrepo.commit_info(world.hub.repo_path(world.repo), main).message
    assert f"Approved by @rita at {head[:7]}." in commit_message
    assert "hangar is not a bypass actor" in check["output"]["summary"]


# -- approvals that do not count -----------------------------------------------------


def test_an_approval_of_an_older_head_does_not_count(world):
    protect(world, checks=())
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    number, old = pr["number"], pr["head"]["sha"]
    # a person adds a commit; then rita approves the commit she had looked at
    new = world.hub.push_files(world.repo, pr["head"]["ref"], {"NOTES.md": "notes\n"},
                               "Add notes", as_user=world.maintainer)
    wait_until(lambda: pr_now(world, number)["head"]["sha"] == new, 10, "the new head")
    approve(world, number, sha=old)

    why = wait_until(lambda: explanations(world, number), 60, "the explanation")
    assert len(why) == 1
    assert f"approved `{old[:7]}`, but the head is now `{new[:7]}`" in why[0]
    wait_until(lambda: says(world, number, f"waiting for 1 approval(s) of `{new[:7]}`"), 30,
               "the step that explained it to end waiting for an approval")
    assert unmerged(world, number)
    assert len(explanations(world, number)) == 1  # once (and no more later: test_land_steps)
    assert merge_calls(world, number) == []
    assert "other than @mona" in land_line(world, number)


def test_the_requester_a_bot_and_a_reader_approving_do_not_count(world):
    protect(world, checks=())
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test")  # asked by mona
    pr = verified_pr(world, issue)
    number = pr["number"]
    approve(world, number, who=world.maintainer)
    approve(world, number, who="dependabot[bot]")
    approve(world, number, who=world.reader)  # read access only

    why = wait_until(lambda: len(explanations(world, number)) == 3 and explanations(
        world, number), 60, "three explanations")
    text = "\n".join(why)
    assert "@mona asked for this work" in text and "forbid_self_approval" in text
    assert "@dependabot[bot] is a bot" in text
    assert "@rick does not have write access" in text
    wait_until(lambda: says(world, number, "waiting for 1 approval(s)"), 30, "the decision")
    assert unmerged(world, number)
    assert merge_calls(world, number) == []
    assert len(explanations(world, number)) == 3
    # a person other than the requester, with write access: that one counts
    approve(world, number)
    wait_until(lambda: landed(world, number), 60, "the PR to land")
    assert merge_calls(world, number) == [200]


TWO_TURNS = FIX_AGENT.replace("set -e\n", "set -e\n[ \"$HANGAR_TURN\" = 1 ] || {\n"
                              "  echo notes > NOTES.md && git add NOTES.md\n"
                              "  git commit -qm 'Add notes' && exit 0\n}\n")


def new_head_verified(world, number: int, old: str) -> dict | None:
    now = pr_now(world, number)
    if now["head"]["sha"] == old:
        return None
    check = world.checks(now["head"]["sha"]).get("hangar / verify")
    return now if check and check["status"] == "completed" else None


def test_a_writer_who_pushed_to_the_branch_may_not_approve_it(world):
    protect(world, checks=())
    world.hub.create_user("walt")
    world.hub.grant(world.repo, "walt", "write")
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    number = pr["number"]
    # rita adds her own commit to hangar's branch, then approves the head she made
    head = world.hub.push_files(world.repo, pr["head"]["ref"], {"NOTES.md": "rita's\n"},
                                "Add notes", as_user=world.reviewer)
    wait_until(lambda: pr_now(world, number)["head"]["sha"] == head, 10, "rita's head")
    approve(world, number, sha=head)

    why = wait_until(lambda: explanations(world, number), 60, "the explanation")
    assert "@rita pushed to this branch or made a commit on it" in why[0]
    wait_until(lambda: says(world, number, "waiting for 1 approval(s)"), 30, "the decision")
    assert unmerged(world, number)
    assert merge_calls(world, number) == []
    approve(world, number, who="walt", sha=head)  # someone who made none of it: counts
    wait_until(lambda: landed(world, number), 90, "the PR to land")


def test_whoever_asked_for_a_follow_up_turn_may_not_approve_it(world):
    protect(world, checks=())
    world.start_hangar(TWO_TURNS)
    issue, _ = world.ask("/hangar fix the failing test")  # mona asks
    pr = verified_pr(world, issue)
    number = pr["number"]
    world.hub.comment(world.repo, number, "/hangar also add sub()", as_user=world.reviewer)
    pr2 = wait_until(lambda: new_head_verified(world, number, pr["head"]["sha"]), 90,
                     "rita's follow-up turn")
    approve(world, number, sha=pr2["head"]["sha"])  # rita approves the turn she asked for

    why = wait_until(lambda: explanations(world, number), 60, "the explanation")
    assert "@rita asked for a turn on this pull request" in why[0]
    wait_until(lambda: says(world, number, "waiting for 1 approval(s)"), 30, "the decision")
    assert unmerged(world, number)
    assert merge_calls(world, number) == []


def test_an_approval_given_before_the_base_was_changed_does_not_land_it(world):
    protect(world, checks=("ci / lint",))  # main waits for a check that never reports
    world.hub.push_files(world.repo, "release", {"RELEASE.md": "release\n"}, "Branch release",
                         as_user=world.maintainer, base="main", bypass_rules=True)
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    number, head = pr["number"], pr["head"]["sha"]
    approve(world, number, sha=head)  # rita approves it going into main
    wait_until(lambda: says(world, number, "waiting for ci / lint"), 60, "the wait for CI")
    world.hub.retarget_pr(world.repo, number, "release", as_user=world.maintainer)

    why = wait_until(lambda: explanations(world, number), 60, "the explanation")
    assert "@rita approved it going into `main`, and its base branch has changed" in why[0]
    assert unmerged(world, number) and merge_calls(world, number) == []
    # rita approves again, for release: hangar brings the branch up to date with release
    # and verifies it there; the new head needs her approval too
    approve(world, number, sha=head)

    def updated() -> dict | None:
        now = pr_now(world, number)
        return now if now["head"]["sha"] != head and says(
            world, number, "waiting for 1 approval(s)") else None

    now = wait_until(updated, 90, "the branch brought up to date with release")
    approve(world, number, sha=now["head"]["sha"])
    wait_until(lambda: landed(world, number), 90, f"the PR to land ({land_line(world, number)})")
    assert pr_now(world, number)["base"]["ref"] == "release"


def test_revoked_write_access_is_seen_at_once(world):
    protect(world, checks=())
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    number = pr["number"]
    # rita's write access is looked up (and cached) when she asks to land …
    world.hub.comment(world.repo, number, "/hangar land", as_user=world.reviewer)
    wait_until(lambda: says(world, number, "waiting for 1 approval"), 60, "the land request")
    # … then taken away; the collaborator event drops what hangar remembered
    mark = world.hub.delivery_mark()
    world.hub.grant(world.repo, world.reviewer, "read")
    world.hub.wait_for_delivery("member", since=mark)
    approve(world, number)

    # well within the 30 s a permission may be remembered: the event made hangar ask again
    why = wait_until(lambda: explanations(world, number), 20, "the explanation")
    assert "@rita does not have write access" in why[0]
    wait_until(lambda: says(world, number, "waiting for 1 approval(s)"), 30, "the decision")
    assert unmerged(world, number)
    assert merge_calls(world, number) == []  # hangar never tried on the old answer


# -- the head moves ------------------------------------------------------------------


def test_base_moved_updates_the_branch_reverifies_and_needs_a_new_approval(world):
    protect(world, checks=("ci / test",))
    world.hub.set_ci(world.repo, UNITTEST)
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    number, old = pr["number"], pr["head"]["sha"]
    moved = on_main(world, {"CHANGELOG.md": "- unrelated change\n"}, "Unrelated change")
    world.hub.record_exchanges()
    approve(world, number, sha=old)

    updated = wait_until(lambda: pr_now(world, number)["head"]["sha"] != old
                         and pr_now(world, number), 60, "hangar to update the branch")
    new = updated["head"]["sha"]
    info = gitrepo.commit_info(world.hub.repo_path(world.repo), new)
    assert info.parents == [old, moved]  # update-branch merged main in; nothing rewritten
    # verification runs again on the new head, and the old approval lapses
    wait_until(lambda: (world.checks(new).get("hangar / verify") or {}).get("conclusion")
               == "success", 90, "verification of the new head")
    wait_until(lambda: says(world, number, f"approval(s) of `{new[:7]}`"), 60,
               "hangar waiting for an approval of the new head")
    lapsed = explanations(world, number)
    assert len(lapsed) == 1 and f"approved `{old[:7]}`" in lapsed[0]
    assert not merged(world, number)
    updates = [(x["status"], x["request"]) for x in world.hub.exchanges()
               if x["method"] == "PUT" and x["path"].endswith(f"/pulls/{number}/update-branch")]
    assert updates == [(202, {"expected_head_sha": old})]  # once, with the head pinned

    approve(world, number, sha=new)
    done = wait_until(lambda: landed(world, number), 90, "the PR to land")
    commit = gitrepo.commit_info(world.hub.repo_path(world.repo), done["merge_commit_sha"])
    assert commit.parents == [moved]
    merges = [(x["status"], x["request"]["sha"], x["request"]["merge_method"])
              for x in world.hub.exchanges()
              if x["method"] == "PUT" and x["path"].endswith(f"/pulls/{number}/merge")]
    assert merges == [(200, new, "squash")]  # the approved head pinned


def test_a_push_after_the_approval_lapses_it(world):
    protect(world, checks=("ci / test",))  # nobody reports ci / test until the test does
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    number, old = pr["number"], pr["head"]["sha"]
    approve(world, number, sha=old)
    wait_until(lambda: says(world, number, "waiting for ci / test"), 60, "waiting for CI")

    new = world.hub.push_files(world.repo, pr["head"]["ref"], {"NOTES.md": "notes\n"},
                               "Add notes", as_user=world.maintainer)
    world.hub.complete_check(world.repo, old, "ci / test", "success")
    world.hub.complete_check(world.repo, new, "ci / test", "success")
    wait_until(lambda: says(world, number, f"approval(s) of `{new[:7]}`"), 90,
               "hangar waiting for an approval of the new head")
    assert not merged(world, number)
    lapsed = explanations(world, number)
    assert len(lapsed) == 1 and f"approved `{old[:7]}`, but the head is now" in lapsed[0]
    assert merge_calls(world, number) == []

    approve(world, number, sha=new)
    done = wait_until(lambda: landed(world, number), 60, "the PR to land")
    assert world.hub.read_file(world.repo, "NOTES.md", done["merge_commit_sha"]) == b"notes\n"


def test_a_push_while_waiting_for_the_approval_is_verified_again(world):
    on_main(world, {".github/hangar.yml": "autofix:\n  enabled: false\n"})
    protect(world, checks=())  # nothing in the ruleset would catch a broken head
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    number = pr["number"]
    world.hub.comment(world.repo, number, "/hangar land", as_user=world.maintainer)
    wait_until(lambda: says(world, number, "approval(s) of"), 60, "hangar waiting to land")

    broken = world.hub.push_files(world.repo, pr["head"]["ref"],
                                  {"calc.py": "def add(a, b):\n    return a - b\n"},
                                  "Undo the fix", as_user=world.maintainer)
    approve(world, number, sha=broken)
    line = wait_until(lambda: says(world, number, "required checks failed"), 90,
                      "verification of the new head to fail")
    assert f"on `{broken[:7]}`: hangar / verify" in line
    assert world.checks(broken)["hangar / verify"]["conclusion"] == "failure"
    assert not merged(world, number) and merge_calls(world, number) == []


# -- checks --------------------------------------------------------------------------


def test_failing_ci_is_ci_failed_and_named(world):
    on_main(world, {".github/hangar.yml": "autofix:\n  enabled: false\n"})
    protect(world, checks=("ci / test",))
    world.hub.set_ci(world.repo, "echo 'lint: 3 problems' && exit 1")
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    approve(world, pr["number"])

    line = wait_until(lambda: says(world, pr["number"], "required checks failed"), 90,
                      "ci_failed")
    assert f"required check(s) failed on `{pr['head']['sha'][:7]}`: ci / test" in line
    check = land_check(world, pr["head"]["sha"])
    assert check["conclusion"] == "failure" and "ci / test" in check["output"]["summary"]
    assert not merged(world, pr["number"]) and merge_calls(world, pr["number"]) == []


def test_a_required_check_that_never_reports_fails_after_the_timeout(world):
    on_main(world, {".github/hangar.yml": "land:\n  ci_timeout_minutes: 0.05\n"})
    protect(world, checks=("ci / lint",))  # nothing ever reports ci / lint
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    approve(world, pr["number"])

    line = wait_until(lambda: says(world, pr["number"], "never reported"), 60, "the timeout")
    assert "check ci / lint never reported" in line
    check = land_check(world, pr["head"]["sha"])
    assert check["conclusion"] == "failure"
    assert "check ci / lint never reported" in check["output"]["summary"]
    assert not merged(world, pr["number"]) and merge_calls(world, pr["number"]) == []


def test_a_failed_verification_blocks_landing(world):
    on_main(world, {".github/hangar.yml": "autofix:\n  enabled: false\n"})
    protect(world, checks=())
    world.start_hangar(BREAKER)
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    assert world.checks(pr["head"]["sha"])["hangar / verify"]["conclusion"] == "failure"
    approve(world, pr["number"])

    line = wait_until(lambda: says(world, pr["number"], "required checks failed"), 60,
                      "ci_failed")
    assert "hangar / verify" in line
    assert not merged(world, pr["number"]) and merge_calls(world, pr["number"]) == []


def test_another_apps_hangar_verify_success_does_not_override_hangars_failure(world):
    on_main(world, {".github/hangar.yml": "autofix:\n  enabled: false\n"})
    protect(world, checks=())
    world.start_hangar(BREAKER)
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    head, number = pr["head"]["sha"], pr["number"]
    # another App, and a commit status, claim hangar's names with a success
    world.hub.complete_check(world.repo, head, "hangar / verify", "success")
    world.hub.complete_check(world.repo, head, "hangar / land", "success")
    world.hub.set_status(world.repo, head, "hangar / verify", "success",
                         as_user=world.maintainer)
    approve(world, number)

    line = wait_until(lambda: says(world, number, "required check(s) failed"), 60, "ci_failed")
    assert "hangar / verify" in line
    assert not merged(world, number) and merge_calls(world, number) == []
    status = wait_until(lambda: "Not counted" in world.status(number) and world.status(number),
                        30, "the impostors noted")
    assert status.count("**Not counted:**") == 1
    assert "check run `hangar / verify` from App `fakehub-ci`" in status
    assert "commit status `hangar / verify` set by `mona`" in status
    assert unmerged(world, number)


def test_a_verification_that_did_not_run_is_no_pass(world):
    protect(world, checks=())
    world.start_hangar(verify=None)  # the environment has no verify command
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    head, number = pr["head"]["sha"], pr["number"]
    check = world.checks(head)["hangar / verify"]
    assert check["conclusion"] == "action_required"
    assert check["output"]["title"].startswith("Verification did not run")
    assert "has no verify command" in check["output"]["summary"]
    assert "**To fix:** add `verify:" in check["output"]["summary"]
    approve(world, number)

    line = wait_until(lambda: says(world, number, "required check(s) failed"), 60, "ci_failed")
    assert "hangar / verify" in line
    assert unmerged(world, number)
    assert merge_calls(world, number) == []
    assert "verification did not run" in world.status(issue)


def test_agent_text_never_closes_an_issue_on_merge(world):
    closes = FIX_AGENT.replace('git commit -qam "Fix add()"',
                               'git commit -qam "Fix add(), fixes #%s"')
    world.hub.create_issue(world.repo, "Unrelated", "keep me open", as_user=world.maintainer)
    on_main(world, {".github/hangar.yml": "land:\n  method: rebase\n"})
    protect(world, checks=())
    world.start_hangar(closes % 1)  # issue #1 is the unrelated one
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    number = pr["number"]
    approve(world, number)

    line = wait_until(lambda: says(world, number, "would close"), 60, "the refusal")
    assert "says `fixes ＃1`" in line  # quoted as data: the look-alike sign refers to nothing
    assert "land.method: squash" in line
    assert unmerged(world, number) and merge_calls(world, number) == []
    assert world.hub.get_issue(world.repo, 1)["state"] == "open"


# -- conflicts and GitHub's refusals -------------------------------------------------


def test_two_prs_on_the_same_lines_the_second_goes_to_conflict(world):
    two_ways = """\
set -e
case "$HANGAR_PROMPT" in
  *plus*) sed -i 's/return a - b/return a + b/' calc.py ;;
  *) sed -i 's/return a - b/return sum((a, b))/' calc.py ;;
esac
git commit -qam "Fix add(): $HANGAR_PROMPT"
"""
    protect(world, checks=())
    world.start_hangar(two_ways)
    first_issue, _ = world.ask("/hangar fix it with plus", title="fix one way")
    second_issue, _ = world.ask("/hangar fix it with sum", title="fix another way")
    first = verified_pr(world, first_issue)
    second = verified_pr(world, second_issue)
    second_head = second["head"]["sha"]
    approve(world, first["number"])
    approve(world, second["number"])

    # one lands; the other is serialized behind it, then meets the conflict
    wait_until(lambda: landed(world, first["number"]) or landed(world, second["number"]),
               60, "one PR to land")
    winner, loser = ((first, second) if merged(world, first["number"])
                     else (second, first))
    line = wait_until(lambda: says(world, loser["number"], "conflicts with the base"), 60,
                      "the conflict")
    assert "`calc.py`" in line
    assert not merged(world, loser["number"]) and merge_calls(world, loser["number"]) == []
    main_calc = world.hub.read_file(world.repo, "calc.py")
    expected = b"a + b" if winner is first else b"sum((a, b))"
    assert expected in main_calc
    assert len(main_log(world)) == 2  # the initial commit and the one squash
    # nothing force-pushed: branch tips unchanged, and no push was a forced one
    assert world.hub.ref_sha(world.repo, loser["head"]["ref"]) == loser["head"]["sha"]
    assert loser["head"]["sha"] in (second_head, first["head"]["sha"])
    pushes = world.hub.deliveries(world.app.id, "push")
    assert pushes and not any(d.payload["forced"] for d in pushes)
    check = land_check(world, loser["head"]["sha"])
    assert check["conclusion"] == "failure" and "calc.py" in check["output"]["summary"]


def test_a_request_waiting_for_its_approval_does_not_hold_up_another(world):
    two_files = """\
set -e
case "$HANGAR_PROMPT" in
  *docs*) printf '# widgets\\n\\nAdds numbers.\\n' > README.md ;;
  *) sed -i 's/return a - b/return a + b/' calc.py ;;
esac
git commit -qam "$HANGAR_PROMPT"
"""
    protect(world, checks=())
    world.start_hangar(two_files, verify="python3 -c 'import calc'")  # docs leave add() broken
    docs_issue, _ = world.ask("/hangar write the docs", title="docs")
    fix_issue, _ = world.ask("/hangar fix the test", title="fix")
    docs = verified_pr(world, docs_issue)
    fix = verified_pr(world, fix_issue)
    world.hub.comment(world.repo, docs["number"], "/hangar land", as_user=world.maintainer)
    wait_until(lambda: says(world, docs["number"], "approval(s) of"), 60, "docs waiting")

    approve(world, fix["number"])  # not held up by the docs PR waiting for a person
    wait_until(lambda: landed(world, fix["number"]), 60, "the fix to land first")

    # the docs PR's approval comes after main moved: merged onto the new main, not the old
    approve(world, docs["number"], sha=docs["head"]["sha"])
    new_head = wait_until(lambda: pr_now(world, docs["number"])["head"]["sha"]
                          != docs["head"]["sha"] and pr_now(world, docs["number"])["head"]["sha"],
                          60, "the docs branch to be brought up to date")
    wait_until(lambda: says(world, docs["number"], f"approval(s) of `{new_head[:7]}`"), 90,
               "the docs PR waiting for an approval of its new head")
    assert not merged(world, docs["number"])
    approve(world, docs["number"], sha=new_head)
    done = wait_until(lambda: landed(world, docs["number"]), 60, "the docs PR to land")
    assert world.hub.read_file(world.repo, "calc.py", done["merge_commit_sha"]).endswith(
        b"return a + b\n")
    assert len(main_log(world)) == 3


def test_two_approvals_asked_by_the_ruleset_are_waited_for_not_asked_of_github(world):
    protect(world, approvals=2, checks=())
    world.hub.create_user("walt")
    world.hub.grant(world.repo, "walt", "write")
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    number = pr["number"]
    approve(world, number)

    wait_until(lambda: says(world, number, "waiting for 1 approval(s)"), 60,
               "hangar to wait for the second approval the ruleset asks for")
    check = land_check(world, pr["head"]["sha"])
    assert check["status"] == "in_progress"  # waiting, not ended
    assert merge_calls(world, number) == []  # nothing asked that GitHub would refuse
    approve(world, number, who="walt")
    wait_until(lambda: landed(world, number), 60, "the PR to land")
    assert merge_calls(world, number) == [200]


def test_classic_protection_is_a_gate_too_its_checks_and_its_approval_count(world):
    # No ruleset: classic branch protection alone asks for ci / test and two approvals.
    world.hub.protect_branch(world.repo, "main", approvals=2, checks=("ci / test",))
    world.hub.create_user("walt")
    world.hub.grant(world.repo, "walt", "write")
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    number, head = pr["number"], pr["head"]["sha"]
    approve(world, number)
    wait_until(lambda: says(world, number, "waiting for ci / test"), 30,
               "hangar to wait for the classic required check")
    world.hub.complete_check(world.repo, head, "ci / test", "success")
    wait_until(lambda: says(world, number, "waiting for 1 approval(s)"), 30,
               "hangar to wait for the second approval classic protection asks for")
    assert merge_calls(world, number) == []  # nothing asked of GitHub that it would refuse
    approve(world, number, who="walt")
    wait_until(lambda: landed(world, number), 60, "the PR to land")
    assert merge_calls(world, number) == [200]


def test_hangar_does_not_merge_while_it_is_a_bypass_actor(world):
    protect(world, approvals=2, checks=(), bypass_app_ids=[world.app.id])
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    approve(world, pr["number"])  # one approval; the ruleset wants two, but not of hangar

    line = wait_until(lambda: says(world, pr["number"], "bypass actor"), 60, "the refusal")
    assert "hangar does not merge around it" in line and "Remove the App" in line
    check = land_check(world, pr["head"]["sha"])
    assert check["conclusion"] == "failure"
    assert "hangar's App is a bypass actor" in check["output"]["summary"]
    assert unmerged(world, pr["number"])
    assert merge_calls(world, pr["number"]) == []


# -- crashes -------------------------------------------------------------------------


def test_kill_9_while_merging_then_restart_lands_exactly_once(world):
    protect(world, checks=())
    world.start_hangar(process=True)
    before = world.hub.ref_sha(world.repo, "main")
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    hang = world.hub.inject_fault("PUT", rf"/pulls/{pr['number']}/merge$", hang_seconds=600)
    approve(world, pr["number"])
    wait_until(lambda: hang.fired, 60, "hangar's merge call")
    wait_until(lambda: says(world, pr["number"], "merging"), 15, "the status to say merging")

    world.hangar.kill9()
    world.hub.clear_faults()
    world.restart()
    done = wait_until(lambda: landed(world, pr["number"]), 90, "the PR to land")
    assert 200 in merge_calls(world, pr["number"])
    assert merge_calls(world, pr["number"]).count(200) == 1
    assert world.hub.ref_sha(world.repo, "main") == done["merge_commit_sha"]
    assert len(main_log(world)) == 2  # the initial commit and one squash, not two
    tip = gitrepo.commit_info(world.hub.repo_path(world.repo), done["merge_commit_sha"])
    assert tip.parents == [before]
    assert len(world.status_comments(issue)) == 1


def test_a_pr_merged_by_a_person_while_hangar_was_down_is_recorded_once(world):
    protect(world, checks=())
    world.start_hangar(process=True)
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    number = pr["number"]
    world.hub.comment(world.repo, number, "/hangar land", as_user=world.maintainer)
    wait_until(lambda: says(world, number, "approval(s) of"), 60, "hangar waiting to land")

    world.hangar.kill9()
    approve(world, number)
    sha = world.hub.merge_pr(world.repo, number, as_user=world.maintainer, method="squash")
    world.restart()
    wait_until(lambda: says(world, number, f"landed by hangar as `{sha[:7]}`"), 60,
               "landed recorded")
    assert merge_calls(world, number) == []  # hangar never asked GitHub to merge
    assert world.hub.ref_sha(world.repo, "main") == sha
    assert land_check(world, pr["head"]["sha"])["conclusion"] == "success"


@pytest.mark.parametrize("status", [409, 502])
def test_a_failed_merge_call_is_taken_again_and_lands_once(world, status):
    # 409: the head moved under the merge (back to updating); 502: GitHub had a moment
    protect(world, checks=())
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test")
    pr = wait_until(lambda: world.pr_for(issue), 60, "the PR")
    fault = world.hub.inject_fault("PUT", rf"/pulls/{pr['number']}/merge$", status=status)
    approve(world, pr["number"])  # before verification finished: landing waits for it

    done = wait_until(lambda: landed(world, pr["number"]), 90, "the PR to land")
    assert fault.fired == 1
    assert merge_calls(world, pr["number"]) == [status, 200]
    assert len(main_log(world)) == 2
    assert world.checks(done["head"]["sha"])["hangar / verify"]["conclusion"] == "success"


def test_closing_the_pr_cancels_landing(world):
    protect(world, checks=())
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    world.hub.comment(world.repo, pr["number"], "/hangar land", as_user=world.maintainer)
    wait_until(lambda: says(world, pr["number"], "approval(s) of"), 60, "hangar waiting")
    world.hub.close_pr(world.repo, pr["number"], as_user=world.maintainer)

    line = wait_until(lambda: says(world, pr["number"], "cancelled"), 60, "the cancellation")
    assert "the pull request was closed" in line
    wait_until(lambda: (land_check(world, pr["head"]["sha"]) or {}).get("conclusion")
               == "cancelled", 30, "hangar / land cancelled")
    assert merge_calls(world, pr["number"]) == []


def test_an_approval_missed_while_hangar_was_down_is_found_by_the_poll(world):
    protect(world, checks=())
    world.start_hangar(process=True)
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    number = pr["number"]
    world.hub.comment(world.repo, number, "/hangar land", as_user=world.maintainer)
    wait_until(lambda: says(world, number, "approval(s) of"), 60, "hangar waiting to land")

    world.hangar.kill9()
    # ...and GitHub's redelivery will not bring it back either (older than 3 days, say)
    world.hub.inject_fault("*", r"^/app/hook/deliveries", status=502, times=None)
    approve(world, number)  # its webhook finds nobody listening
    failed = world.hub.wait_for_delivery("pull_request_review", "submitted",
                                         app_id=world.app.id)
    wait_until(lambda: next(d for d in world.hub.deliveries(world.app.id, "pull_request_review")
                            if d.guid == failed.guid).error, 10, "the failed delivery")
    world.restart()
    wait_until(lambda: landed(world, number), 60, "the PR to land after the restart")
    assert merge_calls(world, number) == [200]


# -- commands ------------------------------------------------------------------------


def test_land_then_land_cancel(world):
    protect(world, checks=())
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    number = pr["number"]
    world.hub.comment(world.repo, number, "/hangar land", as_user=world.maintainer)
    wait_until(lambda: says(world, number, "approval(s) of"), 60, "hangar waiting to land")
    world.hub.comment(world.repo, number, "/hangar land cancel", as_user=world.maintainer)
    line = wait_until(lambda: says(world, number, "cancelled"), 30, "the cancellation")
    assert "@mona withdrew the request" in line
    wait_until(lambda: (land_check(world, pr["head"]["sha"]) or {}).get("conclusion")
               == "cancelled", 30, "hangar / land cancelled")

    approve(world, number)  # a withdrawn request stays withdrawn
    assert stays_unmerged(world, number)
    assert merge_calls(world, number) == []

    world.hub.comment(world.repo, number, "/hangar land", as_user=world.maintainer)
    wait_until(lambda: landed(world, number), 60, "the PR to land after asking again")
    assert merge_calls(world, number) == [200]


def test_sensitive_paths_need_an_ack_from_an_approver(world):
    touches_ci = FIX_AGENT.replace("set -e\n", """set -e
mkdir -p .github/workflows
printf 'on: push\\n' > .github/workflows/x.yml
git add .github/workflows/x.yml
""")
    protect(world, checks=())
    world.start_hangar(touches_ci)
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    number = pr["number"]
    assert "`.github/workflows/x.yml`" in pr["body"]  # the sensitive-paths banner
    approve(world, number)
    line = wait_until(lambda: says(world, number, "--ack-sensitive"), 60, "the ack request")
    assert "`.github/workflows/x.yml`" in line
    assert unmerged(world, number)

    # the requester may not wave it through
    world.hub.comment(world.repo, number, "/hangar land --ack-sensitive",
                      as_user=world.maintainer)
    refusal = wait_until(lambda: [r for r in world.replies(number) if "sensitive" in r], 30,
                         "the refusal")
    assert "@mona" in refusal[0]
    assert unmerged(world, number)

    world.hub.comment(world.repo, number, "/hangar land --ack-sensitive",
                      as_user=world.reviewer)
    wait_until(lambda: landed(world, number), 60, "the PR to land")
    assert world.hub.read_file(world.repo, ".github/workflows/x.yml") == b"on: push\n"


def test_who_pushed_to_the_branch_may_not_acknowledge_its_sensitive_files(world):
    touches_ci = FIX_AGENT.replace("set -e\n", """set -e
mkdir -p .github/workflows
printf 'on: push\\n' > .github/workflows/x.yml
git add .github/workflows/x.yml
""")
    protect(world, checks=())
    world.hub.create_user("walt")
    world.hub.grant(world.repo, "walt", "write")
    world.start_hangar(touches_ci)
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    number = pr["number"]
    head = world.hub.push_files(world.repo, pr["head"]["ref"], {"NOTES.md": "walt's\n"},
                                "Add notes", as_user="walt")
    wait_until(lambda: pr_now(world, number)["head"]["sha"] == head, 10, "walt's head")
    approve(world, number, sha=head)
    wait_until(lambda: says(world, number, "--ack-sensitive"), 90, "the ack request")

    world.hub.comment(world.repo, number, "/hangar land --ack-sensitive", as_user="walt")
    refusal = wait_until(lambda: [r for r in world.replies(number) if "sensitive" in r], 30,
                         "the refusal")
    assert "@walt pushed to this branch or made a commit on it" in refusal[0]
    assert unmerged(world, number)
    world.hub.comment(world.repo, number, "/hangar land --ack-sensitive",
                      as_user=world.reviewer)
    wait_until(lambda: landed(world, number), 60, "the PR to land")


def test_a_sensitive_file_behind_300_others_still_needs_the_ack(world):
    many_files = """\
set -e
mkdir -p a deploy
for i in $(seq -w 0 299); do echo "$i" > "a/f$i.txt"; done
echo "replicas: 3" > deploy/prod.yaml
sed -i 's/return a - b/return a + b/' calc.py
git add -A && git commit -qm "Fix add() and add files"
"""
    protect(world, checks=())
    world.start_hangar(many_files)
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue, timeout=120)
    number = pr["number"]
    # GitHub's compare stops at 300 files: a/f000 … a/f299 come before deploy/prod.yaml
    assert "(files GitHub did not list)" in pr["body"]
    approve(world, number)

    line = wait_until(lambda: says(world, number, "--ack-sensitive"), 60, "the ack request")
    assert "`deploy/prod.yaml`" in line  # found on the PR's full, paginated file list
    assert unmerged(world, number)
    world.hub.comment(world.repo, number, "/hangar land --ack-sensitive", as_user=world.reviewer)
    wait_until(lambda: landed(world, number), 60, "the PR to land")


def test_a_malformed_land_policy_is_answered_and_the_defaults_apply(world):
    on_main(world, {".github/hangar.yml": "land:\n  method: fast\n  forbid_self_approval: 3\n"})
    protect(world, checks=())
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    number = pr["number"]
    approve(world, number, who=world.maintainer)  # the default forbids self-approval
    wait_until(lambda: explanations(world, number), 60, "the self-approval explanation")
    # The PR's status comment comes with the issue's next edit, a moment after the check.
    status = wait_until(lambda: "land.method" in world.status(number) and world.status(number),
                        30, "the PR's status comment to name the config's errors")
    assert (".github/hangar.yml:2: land.method: Input should be 'merge', 'squash' or 'rebase'"
            " — use one of the allowed values; the default applies") in status
    assert ".github/hangar.yml:3: land.forbid_self_approval:" in status
    assert "write true or false" in status

    approve(world, number)
    done = wait_until(lambda: landed(world, number), 60, "the PR to land")
    commit = gitrepo.commit_info(world.hub.repo_path(world.repo), done["merge_commit_sha"])
    assert len(commit.parents) == 1  # squash, the default method


# -- pull requests from forks --------------------------------------------------------


def fork_pr(world, owner: str = "eve") -> tuple[dict, str]:
    """owner forks the repository, commits on her fork and opens a PR to the original."""
    world.hub.create_user(owner)
    fork = world.hub.fork(world.repo, owner)
    # named like a hangar branch, to show the name alone makes nothing hangar's
    head = world.hub.push_files(fork, "hangar/1-fork", {"calc.py": "def add(a, b):\n"
                                "    return a + b\n"}, "Fix add()", as_user=owner)
    number = world.hub.open_pr(world.repo, f"{owner}:hangar/1-fork", "Fix add()",
                               as_user=owner)
    return pr_now(world, number), head


def test_hangar_never_works_on_a_fork_pr_and_says_what_it_offers(world):
    protect(world, checks=())
    world.start_hangar()
    pr, head = fork_pr(world)
    number = pr["number"]
    assert pr["head"]["repo"]["full_name"] == "eve/widgets" and pr["head"]["repo"]["fork"]
    assert pr["head"]["label"] == "eve:hangar/1-fork" and pr["head"]["sha"] == head
    assert pr["base"]["repo"]["full_name"] == world.repo

    # a maintainer asks for a turn, a verification and the landing on it
    for command in ("/hangar fix the docstring", "/hangar verify", "/hangar land"):
        world.hub.comment(world.repo, number, command, as_user=world.maintainer)
    replies = wait_until(lambda: len(world.replies(number)) == 3 and world.replies(number),
                         60, "three replies")
    for text in replies:
        assert "lives in the fork `eve/widgets`" in text
        assert "never pushes to a fork and never runs an agent on a fork's code" in text
        assert "`/hangar <instruction>` on an issue" in text
    approve(world, number)
    assert stays_unmerged(world, number)
    # nothing ran and nothing was pushed: no hangar branch, no check run, the fork untouched
    assert world.hub.ref_sha("eve/widgets", "hangar/1-fork") == head
    assert world.hub.ref_sha(world.repo, "hangar/1-fork") is None
    assert world.checks(head) == {}
    assert [p["number"] for p in world.hub.list_prs(world.repo)] == [number]


def test_a_fork_pr_command_from_someone_without_write_access_is_refused(world):
    world.start_hangar()
    pr, head = fork_pr(world)
    world.hub.comment(world.repo, pr["number"], "/hangar fix it", as_user="eve")
    refusal = wait_until(lambda: world.replies(pr["number"]), 60, "the refusal")
    assert "only from people with write access" in refusal[0]
    assert world.hub.ref_sha("eve/widgets", "hangar/1-fork") == head
    assert world.checks(head) == {}


# -- hangar doctor -------------------------------------------------------------------


def doctor(world, repo: str | None = None, github_url: str | None = None
           ) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANGAR_")}
    env.update({
        "HANGAR_APP_ID": str(world.app.id),
        "HANGAR_PRIVATE_KEY_FILE": str(world.app.private_key_path),
        "HANGAR_WEBHOOK_SECRET": world.app.webhook_secret,
        "HANGAR_GITHUB_URL": github_url or world.hub.api_url,
    })
    return subprocess.run([sys.executable, "-m", "app.cli", "doctor", repo or world.repo],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)


def doctor_lines(out: str) -> dict[str, str]:
    """{line text: "ok" | "missing"} for each line doctor printed."""
    lines = {}
    for line in out.splitlines():
        found = re.match(r"^(ok|missing)\s+(.*)$", line)
        if found:
            lines[found.group(2)] = found.group(1)
    return lines


def test_doctor_on_a_well_protected_repository(world):
    protect(world, checks=("ci / test", "hangar / verify"), last_push=True,
            integration_ids={"hangar / verify": world.app.id})
    result = doctor(world)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = doctor_lines(result.stdout)
    assert set(lines.values()) == {"ok"}
    for expected in ("pull request required", "1 approving review(s) required",
                     "stale approvals dismissed on push",
                     "required checks: ci / test, hangar / verify", "force pushes blocked",
                     "deletion blocked", "hangar is not a bypass actor",
                     "the most recent push needs someone else's approval",
                     "hangar / verify is required from hangar's App only (integration_id)"):
        assert expected in lines
    assert any(text.startswith("acme/widgets: default branch main") for text in lines)
    assert any(text.startswith("the App may push branches") for text in lines)


def test_doctor_on_a_bare_repository_says_what_is_missing_and_how(world):
    result = doctor(world)
    assert result.returncode == 1
    missing = [t for t, v in doctor_lines(result.stdout).items() if v == "missing"]
    assert len(missing) == 7
    assert any("add one to a branch ruleset" in m for m in missing)
    assert any("require_last_push_approval" in m for m in missing)
    assert any("non_fast_forward" in m for m in missing)


def test_doctor_reads_classic_protection_merge_queue_methods_and_hangar_branch_rules(world):
    world.hub.protect_branch(world.repo, "main", approvals=2, checks=("ci / test",),
                             last_push=True)
    world.hub.set_merge_methods(world.repo, "squash", "rebase")
    world.hub.set_ruleset(world.repo, {
        "name": "everywhere", "target": "branch", "enforcement": "active",
        "conditions": {"ref_name": {"include": ["~ALL"], "exclude": []}},
        "rules": [{"type": "deletion"}, {"type": "required_signatures"},
                  {"type": "merge_queue", "parameters": {}}]})
    result = doctor(world)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = doctor_lines(result.stdout)
    for read_from_classic in ("pull request required", "2 approving review(s) required",
                              "stale approvals dismissed on push", "required checks: ci / test",
                              "force pushes blocked",
                              "the most recent push needs someone else's approval"):
        assert lines.get(read_from_classic) == "ok", (read_from_classic, lines)
    assert lines["merge methods allowed: squash, rebase (set land.method in "
                 ".github/hangar.yml to one of them)"] == "ok"
    missing = [t for t, v in lines.items() if v == "missing"]
    assert len(missing) == 1, missing
    assert any(t.startswith("main takes changes through a merge queue") for t in lines)
    assert any("(required_signatures)" in m and "refs/heads/hangar/**" in m for m in missing)
    assert any(t.startswith("commits on main must be signed") for t in lines)


def test_doctor_flags_hangar_as_a_bypass_actor(world):
    protect(world, checks=("ci / test",), bypass_app_ids=[world.app.id], last_push=True)
    result = doctor(world)
    assert result.returncode == 1
    missing = [t for t, v in doctor_lines(result.stdout).items() if v == "missing"]
    assert len(missing) == 1 and "hangar's App is a bypass actor" in missing[0]
    assert "remove it" in missing[0]


def test_doctor_when_github_cannot_be_reached_says_so(world, unreachable_port):
    result = doctor(world, github_url=f"http://127.0.0.1:{unreachable_port}/api/v3")
    assert result.returncode == 2
    assert "hangar doctor: could not read acme/widgets from http://127.0.0.1:" in result.stderr
    assert "Traceback" not in result.stderr


def test_doctor_on_a_repository_the_app_is_not_installed_on(world):
    world.hub.create_repo(world.maintainer, "elsewhere")
    result = doctor(world, f"{world.maintainer}/elsewhere")
    assert result.returncode == 1
    assert "the App is not installed on mona/elsewhere" in result.stdout
