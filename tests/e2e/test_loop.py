"""The core loop end to end: `/hangar <prompt>` → sandboxed agent → verified PR.

Through fakehub over real HTTP, real git through hangar's push proxy, and the local
(bubblewrap) provider.
"""

from __future__ import annotations

import contextlib
import os
import signal

import pytest

from tests.e2e.conftest import FIX_AGENT, own_sleep, pids_with, wait_until, wrappers_above

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("world", ["sqlite", "postgresql"], indirect=True)
def test_happy_path_reacts_reports_opens_a_verified_pr(world):
    world.start_hangar()
    issue, comment = world.ask("/hangar fix the failing test")
    reactions = lambda: world.hub.reactions(world.repo, comment)  # noqa: E731
    wait_until(lambda: any(r["content"] == "eyes" for r in reactions()), 10, "the 👀 reaction")
    pr = wait_until(lambda: world.verified(issue), 60, "a verified PR")

    assert pr["user"]["login"] == world.app.bot_login  # opened as the App
    assert pr["head"]["ref"].startswith(f"hangar/{issue}-")
    assert pr["base"]["ref"] == "main"
    body = pr["body"]
    assert f"Closes #{issue}" in body
    assert "Fix add()" in body  # the commit list comes from GitHub's compare
    assert "1 commit(s), 1 file(s) changed, +1 −1" in body
    assert "Agent says (unverified)" in body and "Fixed add()." in body
    checks = world.checks(pr["head"]["sha"])
    assert checks["hangar / verify"]["conclusion"] == "success"
    assert checks["hangar / agent"]["conclusion"] == "success"
    assert checks["hangar / verify"]["external_id"].startswith("run-")
    # exactly one status comment, edited in place, ending with the PR and the facts
    # (edits are spaced a second apart, as GitHub asks: "passed" may show before "done")
    status = wait_until(lambda: "✅ done" in world.status(issue) and world.status(issue), 10)
    assert len(world.status_comments(issue)) == 1
    assert f"#{pr['number']}" in status and "passed" in status
    # the PR thread gets the same status comment, once (posted once the turn's end is
    # recorded, which may come a moment after the issue's comment says done)
    wait_until(lambda: world.status_comments(pr["number"]), 30, "the PR's status comment")
    assert len(world.status_comments(pr["number"])) == 1
    # main is untouched until someone lands it
    assert world.hub.get_pr(world.repo, pr["number"])["merged"] is False


@pytest.mark.parametrize("provider", ["local", "docker"])
def test_an_agents_end_is_acted_on_at_once_not_at_the_next_look(world, provider, request):
    """hangar looks at a running agent every `run_watch_interval_seconds`; where the
    sandbox's process can be waited for (sandbox.exits), its end wakes the run at once
    and its work is pushed then. With a minute between looks, the PR comes well before
    the look after the agent's start."""
    import time

    if provider == "docker":
        request.getfixturevalue("docker_engine")
    # Still working at hangar's first look, so the next look is a minute and a half away.
    world.start_hangar("sleep 2\n" + FIX_AGENT, provider=provider,
                       settings={"run_watch_interval_seconds": 90})
    asked = time.monotonic()
    issue, _ = world.ask("/hangar fix the failing test")
    pr = wait_until(lambda: world.verified(issue), 60, "a verified PR")
    took = time.monotonic() - asked
    assert took < 60, f"the PR took {took:.0f} s: the end waited for the next look"
    assert world.checks(pr["head"]["sha"])["hangar / agent"]["conclusion"] == "success"


def test_agent_that_commits_nothing_gets_a_clear_status_and_no_pr(world):
    world.start_hangar("echo 'I looked around and changed nothing.'\n")
    issue, _ = world.ask("/hangar fix the failing test")
    status = wait_until(lambda: "no pull request" in world.status(issue) and world.status(issue),
                        60, "the no-changes status")
    assert "made no commits" in status
    assert world.hangar_prs() == []


def test_agent_that_breaks_a_test_but_claims_success(world):
    liar = """\
set -e
printf 'def add(a, b):\\n    return a * b\\n' > calc.py
git commit -qam "Rewrite add()"
echo "All tests pass now, everything is green."
"""
    world.start_hangar(liar)
    issue, _ = world.ask("/hangar fix the failing test")
    pr = wait_until(lambda: world.verified(issue), 60, "verification")
    check = world.checks(pr["head"]["sha"])["hangar / verify"]
    assert check["conclusion"] == "failure"
    assert "AssertionError" in check["output"]["text"] or "FAILED" in check["output"]["text"]
    # the Fix-with-hangar button is offered on a failed verification
    assert {a["identifier"] for a in check["actions"]} == {"verify", "autofix"}
    body = world.hub.get_pr(world.repo, pr["number"])["body"]
    assert "failed on" in body  # the verification line, from hangar's sandbox
    claim_block = body[body.index("Agent says (unverified)"):]
    assert "everything is green" in claim_block
    assert "everything is green" not in body[: body.index("Agent says (unverified)")]


def test_a_pr_number_in_the_agents_words_is_ignored(world):
    boaster = FIX_AGENT + 'echo "Opened PR #999: https://example.invalid/pull/999"\n'
    world.start_hangar(boaster)
    issue, _ = world.ask("/hangar fix the failing test")
    pr = wait_until(lambda: world.verified(issue), 60, "verification")
    assert pr["number"] != 999
    status = wait_until(lambda: "✅ done" in world.status(issue) and world.status(issue), 10)
    assert f"#{pr['number']}" in status and "#999" not in status


def test_lost_agent_still_has_its_pushed_commits_collected(world):
    # The agent commits, pushes its own branch (allowed), then hangs until killed.
    asleep = own_sleep(3021)
    pusher = FIX_AGENT + f"""\
git push -q origin HEAD:refs/heads/$(git rev-parse --abbrev-ref HEAD)
echo ready > /workspace/.hangar/pushed
exec {asleep}
"""
    world.start_hangar(pusher)
    issue, _ = world.ask("/hangar fix the failing test")
    wait_until(lambda: world.hub.list_prs(world.repo) == [] and _branch_pushed(world, issue),
               60, "the agent's own push")
    pids = wait_until(lambda: pids_with(asleep), 30, "the agent's process")
    wrappers = wrappers_above(pids)
    # The wrapper first: killed after its child, it would still record an exit code.
    for pid in wrappers + pids:
        with contextlib.suppress(ProcessLookupError):  # gone between pgrep and kill
            os.kill(pid, signal.SIGKILL)
    pr = wait_until(lambda: world.verified(issue), 60, "collection after the loss")
    assert world.checks(pr["head"]["sha"])["hangar / verify"]["conclusion"] == "success"
    status = wait_until(lambda: "lost" in world.status(issue) and world.status(issue), 10)
    assert "lost" in status


def test_follow_up_turn_on_the_pr(world):
    followup = """\
set -e
if [ "$HANGAR_TURN" = 1 ]; then
  sed -i 's/return a - b/return a + b/' calc.py
  git commit -qam "Fix add()"
else
  printf '\\n\\ndef sub(a, b):\\n    return a - b\\n' >> calc.py
  git commit -qam "Add sub() as asked: $HANGAR_PROMPT" -q
fi
echo "turn $HANGAR_TURN done"
"""
    world.start_hangar(followup)
    issue, _ = world.ask("/hangar fix the failing test")
    pr = wait_until(lambda: world.verified(issue), 60, "the first turn")
    first_head = pr["head"]["sha"]
    world.hub.comment(world.repo, pr["number"], "/hangar also add sub()",
                      as_user=world.maintainer)

    def second_turn_verified():
        now = world.hub.get_pr(world.repo, pr["number"])
        if now["head"]["sha"] == first_head:
            return None
        check = world.checks(now["head"]["sha"]).get("hangar / verify")
        return now if check and check["status"] == "completed" else None

    pr2 = wait_until(second_turn_verified, 60, "the follow-up turn")
    assert len(world.hangar_prs()) == 1  # the same PR, a new head
    assert "Add sub()" in pr2["body"] and "2 commit(s)" in pr2["body"]
    status = wait_until(lambda: "follow-up turn 1" in world.status(issue)
                        and world.status(issue), 10)
    assert "follow-up turn 1" in status


def test_cancel_stops_the_agent(world):
    asleep = own_sleep(3022)
    world.start_hangar(f"echo starting; exec {asleep}\n")
    issue, _ = world.ask("/hangar fix the failing test")
    wait_until(lambda: pids_with(asleep), 30, "the agent running")
    world.hub.comment(world.repo, issue, "/hangar cancel", as_user=world.maintainer)
    status = wait_until(lambda: "cancelled" in world.status(issue) and world.status(issue),
                        30, "cancelled")
    assert "cancelled" in status
    wait_until(lambda: not pids_with(asleep), 15, "the agent's process to be gone")
    assert world.hangar_prs() == []


def test_user_without_write_access_gets_one_polite_reply(world):
    world.start_hangar()
    issue, comment = world.ask("/hangar fix the failing test", as_user=world.reader)
    reply = wait_until(lambda: world.replies(issue), 30, "the reply")
    assert len(reply) == 1 and "write access" in reply[0] and f"@{world.reader}" in reply[0]
    # a second try by the same person does not add a second reply
    world.hub.comment(world.repo, issue, "/hangar please fix it", as_user=world.reader)
    world.hub.settle()
    wait_until(lambda: True, 1)
    assert len(world.replies(issue)) == 1
    assert world.status_comments(issue) == [] and world.hangar_prs() == []
    assert not any(r["content"] == "eyes" for r in world.hub.reactions(world.repo, comment))


def test_bot_comments_are_ignored(world):
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test", as_user="dependabot[bot]")
    world.hub.settle()
    wait_until(lambda: True, 1.5)
    assert world.replies(issue) == [] and world.status_comments(issue) == []


def test_usage_reply_for_a_malformed_command(world):
    world.start_hangar()
    issue, _ = world.ask("/hangar try 0 fix it")
    reply = wait_until(lambda: world.replies(issue), 30, "the usage reply")
    assert "from 1 to 10" in reply[0] and "/hangar help" in reply[0]
    # Looked for once (a step taken again finds it), then posted: one listing, one post.
    calls = [(m, p.split("?")[0]) for m, p, _ in world.hub.api_calls(world.app.id)]
    thread = f"/repos/{world.repo}/issues/{issue}/comments"
    assert calls.count(("GET", thread)) == 1 and calls.count(("POST", thread)) == 1, calls


def test_a_pull_request_command_on_an_issue_says_where_it_works(world):
    world.start_hangar()
    issue, comment = world.ask("/hangar land")
    reply = wait_until(lambda: world.replies(issue), 30, "the reply")
    assert len(reply) == 1 and "works on pull requests, not on issues" in reply[0]
    assert world.status_comments(issue) == [] and world.hangar_prs() == []
    assert not any(r["content"] == "eyes" for r in world.hub.reactions(world.repo, comment))


def test_concurrency_cap_queues_the_fourth_job(world):
    slow = "sleep 2\n" + FIX_AGENT
    # Each comment says where its job stands at once, so one look sees all four.
    world.start_hangar(slow, max_agents=3, settings={"status_edit_interval_seconds": 0})
    issues = [world.ask("/hangar fix the failing test", title=f"bug {i}")[0] for i in range(4)]
    # A comment says "queued" until its job's next refresh (a tick) after it started: look
    # until exactly one job is shown waiting for a slot.
    wait_until(
        lambda: len([i for i in issues if "queued (position 1" in world.status(i)]) == 1, 30,
        "exactly one job shown as queued")
    for issue in issues:
        wait_until(lambda issue=issue: world.verified(issue), 90, f"PR for #{issue}")
    assert len(world.hangar_prs()) == 4


@pytest.mark.parametrize("stage", ["running", "verifying", "pr-opened"])
def test_kill_9_at_each_stage_then_restart_finishes_once(world, stage):
    # The agent's own sleep marks it: the status comment may fold "working" into a later
    # edit (one edit per interval), so the agent's process is what says it runs.
    marker = own_sleep(2)
    world.start_hangar(f"{marker}\n{FIX_AGENT}", process=True,
                       verify="sleep 2 && python3 -m unittest -q")
    issue, _ = world.ask("/hangar fix the failing test")

    def reached():
        if stage == "running":
            return bool(pids_with(marker))
        pr = world.pr_for(issue)
        if pr is None:
            return False
        if stage == "pr-opened":
            return True
        check = world.checks(pr["head"]["sha"]).get("hangar / verify")
        return check is not None and check["status"] == "in_progress"

    wait_until(reached, 60, stage)
    world.hangar.kill9()
    world.restart()
    pr = wait_until(lambda: world.verified(issue), 90, "the job to finish after the restart")
    wait_until(lambda: "✅ done" in world.status(issue), 15, "the final status")
    assert len(world.hangar_prs()) == 1
    assert len(world.status_comments(issue)) == 1
    names = [c["name"] for c in world.hub.check_runs(world.repo, pr["head"]["sha"])]
    assert sorted(names) == ["hangar / agent", "hangar / verify"]
    assert world.checks(pr["head"]["sha"])["hangar / verify"]["conclusion"] == "success"


def _branch_pushed(world, issue: int) -> bool:
    from fakehub import gitrepo

    repo = world.hub.hub.repo(world.repo)
    return any(ref.startswith(f"refs/heads/hangar/{issue}-")
               for ref in gitrepo.list_refs(repo.path))




# On SQLite only: on PostgreSQL, a missed delivery asked for again by the chores is
# test_replicas's.
def test_a_comment_made_while_hangar_was_down_is_caught_after_the_restart(world):
    world.start_hangar(process=True)
    world.hangar.kill9()
    issue, _ = world.ask("/hangar fix the failing test")
    world.hub.settle()
    failed = world.hub.wait_for_delivery(event="issue_comment")
    assert failed.status_code is None and failed.error  # refused; GitHub would not retry
    world.restart()
    pr = wait_until(lambda: world.verified(issue), 60, "the job from the redelivered comment")
    assert world.checks(pr["head"]["sha"])["hangar / verify"]["conclusion"] == "success"
    redelivered = [d for d in world.hub.deliveries(event="issue_comment") if d.redelivery]
    assert len(redelivered) == 1


def test_the_repos_own_config_chooses_the_verify_command(world):
    world.hub.push_files(world.repo, "main", {".github/hangar.yml": (
        "environment:\n  verify:\n    command: python3 -m unittest -q && echo repo-verify-ran\n"
    )}, "configure hangar", as_user="acme", bypass_rules=True)
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test")
    pr = wait_until(lambda: world.verified(issue), 60, "verification")
    check = world.checks(pr["head"]["sha"])["hangar / verify"]
    assert check["conclusion"] == "success"
    assert "repo-verify-ran" in check["output"]["text"]


def test_a_malformed_config_is_answered_and_the_defaults_apply(world):
    world.hub.push_files(world.repo, "main", {".github/hangar.yml": (
        "environment: default\nautofix:\n  max_turns: lots\n"
    )}, "configure hangar", as_user="acme", bypass_rules=True)
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test")
    pr = wait_until(lambda: world.verified(issue), 60, "verification")
    assert world.checks(pr["head"]["sha"])["hangar / verify"]["conclusion"] == "success"
    status = wait_until(lambda: "max_turns" in world.status(issue) and world.status(issue), 15,
                        "the config problem in the status comment")
    assert ".github/hangar.yml:3: autofix.max_turns" in status
    assert "write a whole number" in status and "the default applies" in status


@pytest.mark.docker
def test_happy_path_in_a_docker_sandbox(world, docker_engine):
    world.start_hangar(provider="docker")
    issue, _ = world.ask("/hangar fix the failing test")
    pr = wait_until(lambda: world.verified(issue), 120, "a verified PR from docker sandboxes")
    assert world.checks(pr["head"]["sha"])["hangar / verify"]["conclusion"] == "success"
    assert "Fix add()" in pr["body"]


def test_follow_up_prompt_carries_the_prs_review_comments(world):
    echo_prompt = """\
set -e
if [ "$HANGAR_TURN" = 1 ]; then
  sed -i 's/return a - b/return a + b/' calc.py
else
  printf '%s\\n' "$HANGAR_PROMPT" > PROMPT.txt
fi
git add -A && git commit -qm "turn $HANGAR_TURN"
"""
    world.start_hangar(echo_prompt)
    issue, _ = world.ask("/hangar fix the failing test")
    pr = wait_until(lambda: world.verified(issue), 60, "the first turn")
    world.hub.review(world.repo, pr["number"], as_user=world.reviewer, event="COMMENT",
                     body="Please name the operands.",
                     comments=[{"path": "calc.py", "line": 1, "body": "use x and y"}])
    world.hub.comment(world.repo, pr["number"], "/hangar rename the operands",
                      as_user=world.maintainer)

    def prompt_file():
        from fakehub import gitrepo

        repo = world.hub.hub.repo(world.repo)
        found = gitrepo.read_blob(repo.path, pr["head"]["ref"], "PROMPT.txt")
        return found[0].decode() if found else None

    prompt = wait_until(prompt_file, 60, "the follow-up turn's commit")
    assert "rename the operands" in prompt
    assert "Please name the operands." in prompt
    assert "calc.py:1: use x and y" in prompt


def test_verify_again_by_comment_and_by_button(world):
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test")
    pr = wait_until(lambda: world.verified(issue), 60, "the first verification")
    head = pr["head"]["sha"]

    def verify_runs():
        return [c for c in world.hub.check_runs(world.repo, head)
                if c["name"] == "hangar / verify"]

    world.hub.comment(world.repo, pr["number"], "/hangar verify", as_user=world.maintainer)
    wait_until(lambda: len(verify_runs()) == 2
               and all(c["status"] == "completed" for c in verify_runs()), 60,
               "a second verification")
    button = verify_runs()[0]
    world.hub.press_check_button(world.repo, button["id"], "verify", as_user=world.maintainer)
    wait_until(lambda: len(verify_runs()) == 3
               and all(c["status"] == "completed" for c in verify_runs()), 60,
               "a third verification, from the button")
    assert all(c["conclusion"] == "success" for c in verify_runs())
    # verifying again adds verifications only: the head keeps its one `hangar / agent` run
    agent_runs = [c for c in world.hub.check_runs(world.repo, head)
                  if c["name"] == "hangar / agent"]
    assert len(agent_runs) == 1


def test_uncommitted_changes_are_reported_not_committed(world):
    world.start_hangar(FIX_AGENT + "echo 'scratch' > notes.txt\n")
    issue, _ = world.ask("/hangar fix the failing test")
    pr = wait_until(lambda: world.verified(issue), 60, "verification")
    status = wait_until(lambda: "uncommitted" in world.status(issue) and world.status(issue),
                        15, "the uncommitted-changes warning")
    assert "hangar did not commit them" in status
    # the PR's file list comes from GitHub's compare: the scratch file never left the sandbox
    assert "`calc.py`" in pr["body"] and "notes.txt" not in pr["body"]


def test_a_follow_up_asked_during_a_turn_waits_for_it(world):
    slow_turns = """\
set -e
if [ "$HANGAR_TURN" = 1 ]; then
  sed -i 's/return a - b/return a + b/' calc.py
else
  # turn 2 runs long enough for the second note to be asked during it; turn 3 need not
  [ "$HANGAR_TURN" = 2 ] && sleep 5
  printf '%s\n' "$HANGAR_PROMPT" | tail -n 1 >> NOTES.md
fi
git add -A && git commit -qm "turn $HANGAR_TURN"
"""
    world.start_hangar(slow_turns)
    issue, _ = world.ask("/hangar fix the failing test")
    pr = wait_until(lambda: world.verified(issue), 60, "the first turn")
    world.hub.comment(world.repo, pr["number"], "/hangar first note", as_user=world.maintainer)
    wait_until(lambda: "the agent is working" in world.status(pr["number"]), 30, "turn 2")
    second = world.hub.comment(world.repo, pr["number"], "/hangar second note",
                               as_user=world.maintainer)
    reply = wait_until(lambda: world.replies(pr["number"]), 30, "the waiting reply")
    assert "as soon as it ends" in reply[0]

    def notes():
        from fakehub import gitrepo

        found = gitrepo.read_blob(world.hub.hub.repo(world.repo).path, pr["head"]["ref"],
                                  "NOTES.md")
        return found[0].decode() if found and found[0].count(b"\n") == 2 else None

    text = wait_until(notes, 90, "both follow-up turns")
    assert text == "first note\nsecond note\n"  # in the order asked, one after the other
    # While it waited, the command was reacted to once and not looked at every tick.
    calls = world.hub.api_calls(world.app.id)
    assert [c for c in calls if c[0] == "POST" and c[1].endswith(f"/{second}/reactions")] \
        == [("POST", f"/repos/{world.repo}/issues/comments/{second}/reactions", 201)]


def test_a_huge_pr_description_and_huge_output_are_cut_to_githubs_limits(world):
    # 60 files under 1,400-character paths: the PR body's file table alone is past
    # GitHub's 65,536 characters, and the agent prints 5 MB of multibyte text.
    huge = """\
set -e
sed -i 's/return a - b/return a + b/' calc.py
deep=$(printf 'd%.0s' $(seq 200))
dir="$deep/$deep/$deep/$deep/$deep/$deep/$deep"
mkdir -p "$dir"
for i in $(seq 60); do echo "$i" > "$dir/file-$i.txt"; done
git add -A && git commit -qm "Fix add() and add many files"
for i in $(seq 40000); do echo "ünïcödé output line $i: ✅🙂✅🙂✅🙂✅🙂✅🙂✅🙂"; done
"""
    world.start_hangar(huge)
    issue, _ = world.ask("/hangar fix the failing test")
    pr = wait_until(lambda: world.verified(issue), 90, "a verified PR")
    body = pr["body"]
    assert len(body) <= 65_536
    assert body.endswith("… (cut: GitHub takes at most 65,536 characters here; see the Files "
                         "changed tab and the `hangar / agent` check run)")
    assert body.startswith("<!-- hangar:pr ") and f"Closes #{issue}" in body
    assert pr["changed_files"] == 61
    checks = world.checks(pr["head"]["sha"])
    assert checks["hangar / verify"]["conclusion"] == "success"
    agent = checks["hangar / agent"]["output"]
    assert len(agent["text"].encode()) <= 65_535 and "output line 40000" in agent["text"]
    wait_until(lambda: "passed" in world.status(issue), 15, "the status comment")
    assert len(world.status_comments(issue)) == 1
