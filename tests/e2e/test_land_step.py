"""The seed's land step end to end, through fakehub over real HTTP and real git: overlap
warnings and git's conflicts, `/hangar resolve`, a rebase by the land worker, drafts,
large changes, expiry, auto-land, the policy kept with a request, a freeze, and
verification that restores the files a change may not touch."""

from __future__ import annotations

import re

import pytest

from tests.e2e.conftest import FIX_AGENT, wait_until
from tests.e2e.test_api import TOKEN, call, make_token
from tests.e2e.test_landing import (
    approve,
    land_check,
    land_line,
    landed,
    merge_calls,
    on_main,
    pr_now,
    protect,
    says,
    stays_unmerged,
    verified_pr,
)

pytestmark = pytest.mark.slow

# Each way edits add()'s one line its own way, and both add the same test line (git merges
# that file cleanly). A resolve turn merges main and keeps both: `a + b` it is.
TWO_WAYS = """\
set -e
case "$HANGAR_PROMPT" in
  *"Merge \\`origin/main\\`"*)
    git fetch -q origin main
    git merge -q origin/main || true
    printf 'def add(a, b):\\n    return a + b\\n' > calc.py
    git add calc.py
    git commit -q --no-edit
    ;;
  *plus*) sed -i 's/return a - b/return a + b/' calc.py ;;
  *) sed -i 's/return a - b/return sum((a, b))/' calc.py ;;
esac
grep -q '# checked' test_calc.py || echo '# checked' >> test_calc.py
git commit -qam "Fix add(): one way" || true
"""


def overlap(world, number: int, other: int) -> str | None:
    for line in world.status(number).splitlines():
        if line.startswith(f"⚠️ **Overlap:** #{number} and #{other}"):
            return line
    return None


def test_two_prs_on_one_line_are_warned_then_conflict_in_that_file_and_resolve_lands_it(world):
    protect(world, checks=())
    world.start_hangar(TWO_WAYS)
    first_issue, _ = world.ask("/hangar fix it with plus", title="fix one way")
    second_issue, _ = world.ask("/hangar fix it with sum", title="fix another way")
    first, second = verified_pr(world, first_issue), verified_pr(world, second_issue)
    a, b = first["number"], second["number"]

    # Before either lands, each PR's status warns of the other, with git's prediction.
    warned = wait_until(lambda: overlap(world, b, a), 60, "the overlap warning on the second")
    assert warned == (f"⚠️ **Overlap:** #{b} and #{a} both change `calc.py`, `test_calc.py`; "
                      f"#{b} will conflict with #{a} in `calc.py` if #{a} lands first")
    assert wait_until(lambda: overlap(world, a, b), 30, "the warning on the first").endswith(
        f"#{a} will conflict with #{b} in `calc.py` if #{b} lands first")
    assert not pr_now(world, a)["merged"] and not pr_now(world, b)["merged"]

    approve(world, a)
    wait_until(lambda: landed(world, a), 90, "the first to land")
    approve(world, b)
    line = wait_until(lambda: says(world, b, "conflicts with main"), 60, "the conflict")
    # exactly the file git conflicts in; test_calc.py, changed on both sides, merges
    assert "conflicts with main in `calc.py`;" in line and "test_calc.py" not in line
    assert "`/hangar resolve`" in line
    check = land_check(world, second["head"]["sha"])
    assert check["conclusion"] == "failure"
    assert [a["label"] for a in check["actions"]] == ["Resolve conflicts"]
    assert merge_calls(world, b) == []

    world.hub.comment(world.repo, b, "/hangar resolve", as_user=world.maintainer)
    resolved = wait_until(lambda: (p := pr_now(world, b))["head"]["sha"] != second["head"]["sha"]
                          and world.checks(p["head"]["sha"]).get("hangar / verify", {}).get(
                              "conclusion") == "success" and p, 120, "the resolved, verified head")
    # hangar / land turns to the new head once its verification is in: a moment after
    wait_until(lambda: says(world, b, "waiting for 1 approval(s) of `"
                            + resolved["head"]["sha"][:7]), 60, "the wait for the new head")
    approve(world, b)
    wait_until(lambda: landed(world, b), 90, "the resolved PR to land")
    assert world.hub.read_file(world.repo, "calc.py") == b"def add(a, b):\n    return a + b\n"
    assert world.hub.read_file(world.repo, "test_calc.py").count(b"# checked") == 1
    # once both landed, neither warns any more
    wait_until(lambda: overlap(world, b, a) is None, 30, "the warning gone")


def test_a_branch_behind_is_rebased_by_the_land_worker_and_its_approval_kept(world):
    protect(world, checks=(), dismiss_stale=False)
    on_main(world, {".github/hangar.yml": (
        "land:\n  update: rebase\n  approval_survives_clean_update: true\n")})
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    old = pr["head"]["sha"]
    base = on_main(world, {"README.md": "# widgets\n\nAdds numbers.\n"})
    approve(world, pr["number"], sha=old)

    done = wait_until(lambda: landed(world, pr["number"]), 120, "the rebased PR to land")
    assert merge_calls(world, pr["number"]) == [200]
    rebased = done["head"]["sha"]
    assert rebased != old
    # a rebase, not a merge: the new head sits on the moved base, one parent
    from fakehub import gitrepo

    info = gitrepo.commit_info(world.hub.repo_path(world.repo), rebased)
    assert info.parents == [base]
    # pushed by hangar's land worker through the proxy, forced, as the App
    pushes = [d.payload for d in world.hub.deliveries(world.app.id, "push")
              if d.payload["ref"] == f"refs/heads/{pr['head']['ref']}"]
    assert [p["forced"] for p in pushes][-1] is True
    assert pushes[-1]["before"] == old and pushes[-1]["after"] == rebased
    # the approval of the head before hangar's clean update landed it
    assert f"approved by @rita at `{old[:7]}`" in land_line(world, pr["number"])
    assert world.hub.read_file(world.repo, "README.md") == b"# widgets\n\nAdds numbers.\n"


BREAKS_THEN_FIXES = """\
set -e
if [ "$HANGAR_TURN" = 1 ]; then
  printf 'def add(a, b):\\n    return a * b\\n' > calc.py
else
  printf 'def add(a, b):\\n    return a + b\\n' > calc.py
fi
git commit -qam "turn $HANGAR_TURN"
"""


def test_a_draft_is_marked_ready_once_verified_and_an_approval_waits_for_it(world):
    protect(world, checks=())
    on_main(world, {".github/hangar.yml": "autofix: {enabled: false}\n"})
    world.start_hangar(BREAKS_THEN_FIXES)
    issue, _ = world.ask("/hangar fix the failing test")
    pr = wait_until(lambda: world.verified(issue), 90, "the first verification")
    number = pr["number"]
    assert pr["draft"] is True  # verification failed: still a draft
    opened = [d.payload for d in world.hub.deliveries(world.app.id, "pull_request")
              if d.payload["number"] == number and d.payload["action"] == "opened"]
    assert opened and opened[0]["pull_request"]["draft"] is True
    approve(world, number)
    # what holds it is the failed verification, not the draft it leaves
    line = wait_until(lambda: says(world, number, "required check(s) failed"), 60,
                      "the failed verification said")
    assert line.endswith(": hangar / verify") and "draft" not in line
    assert merge_calls(world, number) == []

    world.hub.comment(world.repo, number, "/hangar fix add()", as_user=world.maintainer)
    ready = wait_until(lambda: not (p := pr_now(world, number))["draft"] and p, 120,
                       "the PR marked ready")
    assert world.checks(ready["head"]["sha"])["hangar / verify"]["conclusion"] == "success"
    actions = [d.payload["action"] for d in world.hub.deliveries(world.app.id, "pull_request")
               if d.payload["number"] == number]
    assert actions.count("ready_for_review") == 1
    approve(world, number)
    wait_until(lambda: landed(world, number), 90, "the ready PR to land")


LARGE = FIX_AGENT.replace('git commit -qam "Fix add()"', (
    'for i in 1 2 3 4 5 6; do echo "# note $i" >> calc.py; done\ngit commit -qam "Fix add()"'))


def test_a_change_above_max_diff_lines_lands_only_with_an_approvers_ack(world):
    protect(world, checks=())
    on_main(world, {".github/hangar.yml": "land: {max_diff_lines: 3}\n"})
    world.start_hangar(LARGE)
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    number = pr["number"]
    approve(world, number)
    line = wait_until(lambda: says(world, number, "max_diff_lines"), 60, "the ack asked for")
    assert "changes 8 lines, more than land.max_diff_lines (3)" in line
    assert "`/hangar land --ack-large`" in line
    # the requester's acknowledgement is no approver's
    world.hub.comment(world.repo, number, "/hangar land --ack-large", as_user=world.maintainer)
    refused = wait_until(lambda: [r for r in world.replies(number) if "does not count" in r],
                         30, "the refusal")
    assert "Your acknowledgement of the change's size does not count: @mona asked" in refused[0]
    assert stays_unmerged(world, number)
    world.hub.comment(world.repo, number, "/hangar land --ack-large", as_user=world.reviewer)
    wait_until(lambda: landed(world, number), 60, "the acknowledged PR to land")


def test_an_approval_not_landed_in_time_expires_and_a_new_one_restarts_it(world):
    protect(world, checks=("ci / slow",))
    on_main(world, {".github/hangar.yml": "land: {approval_ttl_minutes: 0.1}\n"})
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    number, head = pr["number"], pr["head"]["sha"]
    approve(world, number)
    line = wait_until(lambda: says(world, number, "expired"), 60, "the expiry")
    assert "not landed within 0.1 minutes of the approval (land.approval_ttl_minutes)" in line
    assert f"a new approval of `{head[:7]}` starts it again" in line
    assert land_check(world, head)["conclusion"] == "timed_out"
    world.hub.complete_check(world.repo, head, "ci / slow", "success")
    assert stays_unmerged(world, number)  # green now, but the approval expired
    approve(world, number)
    wait_until(lambda: landed(world, number), 60, "the PR to land on the new approval")


DOCS_OR_WORKFLOW = """\
set -e
mkdir -p docs .github
echo "How to add numbers." > docs/usage.md
case "$HANGAR_PROMPT" in
  *owners*) echo "* @mona" > .github/CODEOWNERS ;;
esac
git add -A
git commit -qm "Docs"
"""


def test_auto_land_lands_a_docs_change_by_its_rule_and_never_one_on_a_sensitive_path(world):
    protect(world, approvals=0, checks=())
    on_main(world, {".github/hangar.yml": "land:\n  auto_land: {enabled: true}\n"})
    world.start_hangar(DOCS_OR_WORKFLOW, verify="test -f docs/usage.md")
    docs_issue, _ = world.ask("/hangar document add()", title="docs")
    done = wait_until(lambda: (p := world.pr_for(docs_issue)) and landed(world, p["number"]),
                      120, "the docs change to auto-land")
    line = land_line(world, done["number"])
    assert ("approved by the policy (auto_land: verification: pass, checks: pass, at most 150 "
            "changed lines, only_paths: docs/**, tests/**) at `") in line
    assert world.hub.reviews(world.repo, done["number"]) == []  # no person reviewed it

    owners_issue, _ = world.ask("/hangar document add() and set the owners", title="owners")
    pr = verified_pr(world, owners_issue)
    line = wait_until(lambda: says(world, pr["number"], "auto-land does not apply"), 60,
                      "auto-land's refusal")
    assert ("it changes sensitive paths (`.github/CODEOWNERS`), which auto-land never lands"
            in line)
    assert "waiting for 1 approval(s)" in line
    assert stays_unmerged(world, pr["number"]) and merge_calls(world, pr["number"]) == []


FIX_AND_NOTE = FIX_AGENT.replace('git commit -qam "Fix add()"', (
    'echo "- $(date +%s%N)" >> NOTES.md\ngit add -A\ngit commit -qm "Fix add()"'))


def test_a_policy_edit_applies_to_new_requests_not_to_one_in_flight(world):
    protect(world, checks=())
    world.start_hangar(FIX_AND_NOTE)
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    number = pr["number"]
    world.hub.comment(world.repo, number, "/hangar land", as_user=world.maintainer)
    wait_until(lambda: says(world, number, "waiting for 1 approval(s)"), 60, "the request")
    # the base's policy now asks two approvals: the request made before keeps its one
    on_main(world, {".github/hangar.yml": "land: {required_approvals: 2}\n"})
    approve(world, number)  # of the head before the base moved: hangar updates the branch
    new_head = wait_until(lambda: (h := pr_now(world, number)["head"]["sha"]) != pr["head"][
        "sha"] and world.checks(h).get("hangar / verify", {}).get("conclusion") == "success"
        and h, 120, "the branch updated and verified again")
    wait_until(lambda: says(world, number, f"waiting for 1 approval(s) of `{new_head[:7]}`"),
               60, "the kept policy's one approval")
    approve(world, number, sha=new_head)
    wait_until(lambda: landed(world, number), 60, "the PR to land on one approval")
    # a request made now is held to the edited policy
    other, _ = world.ask("/hangar fix the failing test", title="again")
    later = verified_pr(world, other)
    approve(world, later["number"])  # one approval that counts: one of the two asked
    wait_until(lambda: says(world, later["number"], "waiting for 1 approval(s)"), 60,
               "the second approval asked for")
    assert stays_unmerged(world, later["number"])


def test_a_landing_freeze_holds_approved_prs_and_they_land_once_it_is_lifted(world):
    protect(world, checks=())
    world.start_hangar(settings={"land": False})
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    number = pr["number"]
    approve(world, number)
    line = wait_until(lambda: says(world, number, "switched off"), 60, "the freeze said")
    assert "for all repositories by hangar's operator (HANGAR_LAND=off)" in line
    assert merge_calls(world, number) == []
    world.hangar.stop()
    world.running.remove(world.hangar)
    world.start_hangar(settings={"land": True})
    wait_until(lambda: landed(world, number), 90, "the PR to land once lifted")


TAMPERS = """\
set -e
printf 'import unittest\\n\\n\\nclass AddTest(unittest.TestCase):\\n    def test_adds(self):\\n\
        self.assertTrue(True)\\n' > test_calc.py
git commit -qam "Make the test pass"
"""


def test_a_test_the_change_rewrote_is_restored_from_the_base_before_verification(world):
    on_main(world, {".github/hangar.yml": (
        "environment:\n  verify: {restore_paths: [test_calc.py]}\n")})
    world.start_hangar(TAMPERS)
    issue, _ = world.ask("/hangar make the test pass")
    pr = verified_pr(world, issue)
    check = world.checks(pr["head"]["sha"])["hangar / verify"]
    assert check["conclusion"] == "failure"  # the base's test, against the unfixed add()
    assert "restored from the base (`" in check["output"]["summary"]
    assert "before the command ran: `test_calc.py`" in check["output"]["summary"]


def test_the_api_resolves_a_conflicting_pr_and_answers_bad_input_with_4xx(world):
    """`POST /api/jobs/{id}/resolve`: the turn `/hangar resolve` starts, asked by a script."""
    protect(world, checks=())
    world.api_token = TOKEN
    world.start_hangar(TWO_WAYS)
    first_issue, _ = world.ask("/hangar fix it with plus", title="fix one way")
    second_issue, _ = world.ask("/hangar fix it with sum", title="fix another way")
    first, second = verified_pr(world, first_issue), verified_pr(world, second_issue)
    a, b = first["number"], second["number"]
    approve(world, a)
    wait_until(lambda: landed(world, a), 90, "the first to land")
    approve(world, b)
    wait_until(lambda: says(world, b, "conflicts with main"), 60, "the conflict")
    job = re.search(r"`(job-[0-9a-f]+)`", world.status(second_issue)).group(1)
    path = f"/api/jobs/{job}/resolve"

    # Bad input is answered, and starts nothing.
    reader = make_token(world, "reader", ["read"])
    for body, token, status, reason in [
        ({}, None, 401, "Bearer"),
        ({}, reader, 403, "operate"),
        ({"pr": a}, TOKEN, 422, f"#{a} is not a pull request of {job}; its PRs: #{b}"),
        ({"pr": 0}, TOKEN, 422, "pr"),
        ({"pr": b, "force": True}, TOKEN, 422, "force"),
    ]:
        got, answer = call(world, "POST", path, body, token=token)
        assert (got, reason in str(answer)) == (status, True), (body, got, answer)
    got, answer = call(world, "POST", "/api/jobs/job-0000000000/resolve", {})
    assert got == 404 and "no job with this id" in answer["error"]
    assert pr_now(world, b)["head"]["sha"] == second["head"]["sha"]

    got, answer = call(world, "POST", path, {})  # the job's one PR is the one meant
    assert got == 202 and answer["pr"] == b and answer["job"] == job
    resolved = wait_until(lambda: (p := pr_now(world, b))["head"]["sha"] != second["head"]["sha"]
                          and world.checks(p["head"]["sha"]).get("hangar / verify", {}).get(
                              "conclusion") == "success" and p, 120, "the resolved, verified head")
    wait_until(lambda: says(world, b, "waiting for 1 approval(s) of `"
                            + resolved["head"]["sha"][:7]), 60, "the wait for the new head")
    approve(world, b)
    wait_until(lambda: landed(world, b), 90, "the resolved PR to land")
    assert world.hub.read_file(world.repo, "calc.py") == b"def add(a, b):\n    return a + b\n"
