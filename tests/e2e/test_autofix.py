"""Auto-fix turns end to end: CI fails on a hangar PR, hangar tries to fix it, within a bound.

CI is fakehub's own runner (a separate CI App reporting `ci / test`), running a real test
in a checkout of each new PR head. The agent is a script that sees which turn it is in
(`HANGAR_TURN`) and commits the prompt it got, so a test can read what hangar told it.
"""

from __future__ import annotations

import re

import pytest

from tests.e2e.conftest import wait_until

pytestmark = pytest.mark.slow

# A test CI runs but hangar's verify (`python3 -m unittest`, pattern test*.py) does not:
# hangar's own verification passes while CI fails.
CI_TEST = (
    "import unittest\n\nfrom calc import add\n\n\n"
    "class NegativeTest(unittest.TestCase):\n"
    "    def test_negative(self):\n"
    "        self.assertEqual(add(-2, -3), -5)\n"
)
CI = "python3 -m unittest -q test_calc ci_test"

# Each turn commits the prompt it was given, then edits calc.py as `$1` says for its turn.
AGENT = """\
set -e
mkdir -p prompts
printf '%s\\n' "$HANGAR_PROMPT" > "prompts/turn-$HANGAR_TURN.txt"
case "$HANGAR_TURN" in
{cases}
esac
git add -A
git commit -qm "turn $HANGAR_TURN"
echo "turn $HANGAR_TURN done"
"""
ABS = "printf 'def add(a, b):\\n    return abs(a) + abs(b)\\n' > calc.py"
RIGHT = "printf 'def add(a, b):\\n    return a + b\\n' > calc.py"


def agent(**turns: str) -> str:
    """turns: t1="…", t2="…", other="…" (shell for that HANGAR_TURN)."""
    cases = [f"  {key.removeprefix('t')}) {cmd} ;;" for key, cmd in turns.items()
             if key != "other"]
    cases.append(f"  *) {turns.get('other', RIGHT)} ;;")
    return AGENT.format(cases="\n".join(cases))


def with_ci(world, ci: str | None = CI, files: dict[str, str] | None = None) -> None:
    world.hub.push_files(world.repo, "main", {"ci_test.py": CI_TEST, **(files or {})},
                         "Add the CI-only test", as_user="acme", bypass_rules=True)
    if ci:
        world.hub.set_ci(world.repo, ci)


def autofix_labels(world, issue: int) -> list[str]:
    status = world.status(issue).replace("\u200b", "")  # hangar's guard against mentions
    return re.findall(r"auto-fix turn \d+ of \d+: [^\n]*?(?=`*: [⏳🛠📤🔎🧪✅❌➖🚫])", status)


def head(world, pr_number: int) -> str:
    return world.hub.get_pr(world.repo, pr_number)["head"]["sha"]


def conclusion(world, sha: str, name: str) -> str | None:
    check = world.checks(sha).get(name)
    return check["conclusion"] if check and check["status"] == "completed" else None


def prompt_of(world, pr_number: int, turn: int) -> str:
    branch = world.hub.get_pr(world.repo, pr_number)["head"]["ref"]
    data = world.hub.read_file(world.repo, f"prompts/turn-{turn}.txt", ref=branch)
    return data.decode() if data else ""


def idle(world, issue: int) -> bool:
    """Nothing running: the status comment's "Now" and every turn are done."""
    status = world.status(issue)
    return bool(status) and not re.search(r"⏳|🛠️|📤|🔎|🧪", status)


def first_pr(world, issue: int) -> dict:
    return wait_until(lambda: world.pr_for(issue), 60, "the PR")


# -- the cases ---------------------------------------------------------------------------


def test_ci_failure_is_fixed_in_one_turn_and_events_twice_or_reordered_start_one(world):
    with_ci(world)
    world.start_hangar(agent(t1=ABS))
    issue, _ = world.ask("/hangar fix the failing test")
    pr = first_pr(world, issue)
    number, first_head = pr["number"], pr["head"]["sha"]
    wait_until(lambda: conclusion(world, first_head, "ci / test") == "failure", 60,
               "CI failing on the first head")
    # The same CI events again, newest first, while hangar decides: still one turn.
    sent = [d for d in world.hub.deliveries(world.app.id)
            if d.event in ("check_run", "check_suite") and d.action == "completed"
            and (d.payload.get("check_run") or d.payload.get("check_suite"))["head_sha"]
            == first_head]
    assert {d.event for d in sent} == {"check_run", "check_suite"}
    for delivery in reversed(sent):
        world.hub.redeliver(delivery.guid)

    def fixed():
        sha = head(world, number)
        return (sha != first_head and conclusion(world, sha, "ci / test") == "success"
                and conclusion(world, sha, "hangar / verify") == "success" and sha)

    fixed_head = wait_until(fixed, 120, "CI green on the auto-fix turn's head")
    # hangar's own verification passed on the first head: only CI saw the bug
    assert conclusion(world, first_head, "hangar / verify") == "success"
    # The status comment is edited at most every interval: "idle" may still be the first
    # turn's ending, so the wait is for the auto-fix turn's line itself.
    wait_until(lambda: idle(world, issue)
               and "auto-fix turn 1 of 2: ci / test failed" in world.status(issue), 30,
               "the status comment to say the auto-fix turn")
    # the turn's prompt named the failed check and carried CI's own output
    prompt = prompt_of(world, number, 2)
    assert "ci / test failed" in prompt and "AssertionError: 5 != -5" in prompt
    assert "test_negative" in prompt

    for delivery in sent:  # and once more after the fix, in the original order
        world.hub.redeliver(delivery.guid)
    world.settle("hangar to handle the redelivered CI events")
    assert len(autofix_labels(world, issue)) == 1 and head(world, number) == fixed_head
    assert len(world.hangar_prs()) == 1


def test_a_fix_that_fails_the_same_way_stops_after_the_repeat(world):
    with_ci(world)
    same = "printf '# tried again\\n' >> calc.py"
    world.start_hangar(agent(t1=ABS, other=same))
    issue, _ = world.ask("/hangar fix the failing test")
    status = wait_until(lambda: "failed the same way" in world.status(issue)
                        and world.status(issue), 200, "hangar to stop repeating itself")
    assert autofix_labels(world, issue) == ["auto-fix turn 1 of 2: ci / test failed"]
    assert "Comment `/hangar <instruction>` with a hint" in status
    pr = world.pr_for(issue)
    assert conclusion(world, pr["head"]["sha"], "ci / test") == "failure"
    assert len(autofix_labels(world, issue)) == 1  # and no more later: test_autofix_steps


def test_failures_that_differ_each_turn_stop_at_the_bound_of_two(world):
    with_ci(world)
    # Each turn adds another 10 for negatives: a new failure every time.
    worse = ("printf 'def add(a, b):\\n    return abs(a) + abs(b) + %s * (a < 0)\\n' "
             "$(( (HANGAR_TURN - 1) * 10 )) > calc.py")
    world.start_hangar(agent(other=worse))
    issue, _ = world.ask("/hangar fix the failing test")
    status = wait_until(lambda: "used its 2 turn(s)" in world.status(issue)
                        and world.status(issue), 200, "hangar to stop at the bound")
    assert autofix_labels(world, issue) == ["auto-fix turn 1 of 2: ci / test failed",
                                            "auto-fix turn 2 of 2: ci / test failed"]
    assert "fix it by hand" in status
    pr = world.pr_for(issue)
    assert "AssertionError: 15 != -5" in prompt_of(world, pr["number"], 3)
    assert len(autofix_labels(world, issue)) == 2  # and no third later: test_autofix_steps


def test_autofix_off_starts_no_turn_and_on_starts_one(world):
    world.start_hangar(agent(t1=RIGHT))
    issue, _ = world.ask("/hangar fix the failing test")
    pr = wait_until(lambda: world.verified(issue), 60, "a verified PR")
    number, sha = pr["number"], pr["head"]["sha"]
    comment = world.hub.comment(world.repo, number, "/hangar autofix off", as_user="mona")
    wait_until(lambda: "auto-fix is off for this pull request" in world.status(number), 30,
               "the status comment to say auto-fix is off")
    assert any(r["content"] == "eyes" for r in world.hub.reactions(world.repo, comment))
    world.hub.set_status(world.repo, sha, "lint", "failure",
                         description="lint found 3 problems",
                         target_url="http://127.0.0.1:9/lint/1")
    world.settle("hangar to handle the failed status")
    assert autofix_labels(world, issue) == [] and head(world, number) == sha  # no turn: off
    # the positive control: turned back on, the same failure starts a turn
    world.hub.comment(world.repo, number, "/hangar autofix on", as_user="mona")
    wait_until(lambda: autofix_labels(world, issue) == ["auto-fix turn 1 of 2: lint failed"],
               60, "a turn once auto-fix is on again")
    wait_until(lambda: head(world, number) != sha, 60, "the turn's commit")
    prompt = prompt_of(world, number, 2)
    assert "lint found 3 problems" in prompt and "http://127.0.0.1:9/lint/1" in prompt


def test_fix_with_hangar_button_starts_a_turn_on_request(world):
    # Auto-fix is off for the repository: only the button starts a turn.
    with_ci(world, None, {".github/hangar.yml": "autofix:\n  enabled: false\n"})
    world.start_hangar(agent(t1="printf 'def add(a, b):\\n    return a * b\\n' > calc.py"))
    issue, _ = world.ask("/hangar fix the failing test")
    pr = wait_until(lambda: world.verified(issue), 60, "a verified PR")
    number, sha = pr["number"], pr["head"]["sha"]
    verify = world.checks(sha)["hangar / verify"]
    assert verify["conclusion"] == "failure"
    assert "autofix" in {a["identifier"] for a in verify["actions"]}
    wait_until(lambda: "auto-fix is off for this repository" in world.status(issue), 30,
               "the status comment to say why no turn started")
    assert autofix_labels(world, issue) == []

    world.hub.press_check_button(world.repo, verify["id"], "autofix", as_user="mona")
    delivery = world.hub.wait_for_delivery(
        "check_run", "requested_action", app_id=world.app.id,
        where=lambda p: p["check_run"]["id"] == verify["id"])
    assert delivery.payload["requested_action"] == {"identifier": "autofix"}

    def verified_again():
        now = head(world, number)
        return now != sha and conclusion(world, now, "hangar / verify") == "success"

    wait_until(verified_again, 90, "the requested turn's fix, verified")
    # The status comment is edited at most once per interval: it says so a moment later.
    wait_until(lambda: idle(world, issue) and autofix_labels(world, issue), 30,
               "the status comment to show the turn, settled")
    assert autofix_labels(world, issue) == ["auto-fix turn 1 of 2: hangar / verify failed"]
    prompt = prompt_of(world, number, 2)
    assert "hangar / verify failed" in prompt and "AssertionError" in prompt


def test_changes_requested_review_starts_a_turn_for_that_review_only(world):
    # The review comes while a follow-up turn runs: its turn starts when that one ends.
    world.hub.push_files(world.repo, "main", {".github/hangar.yml": (
        "review: {act_on_changes_requested: true}\n")}, "configure hangar", as_user="acme",
        bypass_rules=True)
    world.start_hangar(agent(t1=RIGHT, t2="sleep 6; printf '# more\\n' >> calc.py",
                             t3="printf '# documented\\n' >> calc.py"))
    issue, _ = world.ask("/hangar fix the failing test")
    pr = wait_until(lambda: world.verified(issue), 60, "a verified PR")
    number = pr["number"]
    wait_until(lambda: idle(world, issue), 30, "the first turn to finish")
    world.hub.comment(world.repo, number, "/hangar add a note", as_user="mona")
    wait_until(lambda: "follow-up turn 1" in world.status(issue)
               and "the agent is working" in world.status(issue), 30, "the follow-up running")
    world.hub.review(world.repo, number, "rita", "COMMENT", body="Just a thought.",
                     comments=[{"path": "calc.py", "line": 1, "body": "OTHER-REVIEW-NOTE"}])
    world.hub.review(world.repo, number, "rita", "REQUEST_CHANGES",
                     body="Please document add().",
                     comments=[{"path": "calc.py", "line": 2, "body": "ADD-A-COMMENT-HERE"}])
    wait_until(lambda: "when the running one ends" in world.status(issue), 10,
               "the review's turn waiting for the follow-up")
    wait_until(lambda: prompt_of(world, number, 3), 90, "the review turn's commit")
    wait_until(lambda: autofix_labels(world, issue)
               == ["auto-fix turn 1 of 2: changes requested by @rita"], 30, "the turn's label")
    prompt = prompt_of(world, number, 3)
    assert "Please document add()." in prompt and "calc.py:2: ADD-A-COMMENT-HERE" in prompt
    assert "OTHER-REVIEW-NOTE" not in prompt and "Just a thought" not in prompt
    assert "add a note" in prompt_of(world, number, 2)  # turn 2 was the follow-up
    wait_until(lambda: idle(world, issue), 60, "the turn to finish")
    assert len(autofix_labels(world, issue)) == 1


def test_a_human_push_in_between_starts_no_turn(world):
    with_ci(world)
    world.start_hangar(agent(t1=RIGHT))
    issue, _ = world.ask("/hangar fix the failing test")
    pr = wait_until(lambda: world.verified(issue), 60, "a verified PR")
    number = pr["number"]
    wait_until(lambda: conclusion(world, pr["head"]["sha"], "ci / test") == "success", 60,
               "CI green on hangar's head")
    human = world.hub.push_files(world.repo, pr["head"]["ref"],
                                 {"calc.py": "def add(a, b):\n    return a * b\n"},
                                 "Try multiplying", as_user="mona")
    wait_until(lambda: conclusion(world, human, "ci / test") == "failure", 60,
               "CI failing on the human's head")
    status = wait_until(lambda: "someone pushed to the branch recently" in world.status(issue)
                        and world.status(issue), 30, "the reason in the status comment")
    assert "Fix with hangar" in status
    # the decision is in the status comment; that it holds on later looks: test_autofix_steps
    assert autofix_labels(world, issue) == [] and head(world, number) == human


def test_ci_on_a_human_push_heard_before_the_push_itself_starts_no_turn(world):
    with_ci(world)
    world.start_hangar(agent(t1=RIGHT))
    issue, _ = world.ask("/hangar fix the failing test")
    pr = wait_until(lambda: world.verified(issue), 60, "a verified PR")
    number = pr["number"]
    wait_until(lambda: conclusion(world, pr["head"]["sha"], "ci / test") == "success", 60,
               "CI green on hangar's head")
    world.hub.settle()
    # hangar hears nothing while a person pushes and CI fails on their head...
    hook = f"http://127.0.0.1:{world.settings.port}/webhook"
    before = {d.guid for d in world.hub.deliveries(world.app.id)}
    world.hub.set_webhook_url(world.app.id, None)
    human = world.hub.push_files(world.repo, pr["head"]["ref"],
                                 {"calc.py": "def add(a, b):\n    return a * b\n"},
                                 "Try multiplying", as_user="mona")
    wait_until(lambda: conclusion(world, human, "ci / test") == "failure", 60,
               "CI failing on the human's head")
    world.hub.settle()
    held = [d for d in world.hub.deliveries(world.app.id) if d.guid not in before]
    world.hub.set_webhook_url(world.app.id, hook)
    # ...then hears CI's verdict first and of the push last.
    pushes = [d for d in held if d.event == "pull_request"]
    assert [d.action for d in pushes] == ["synchronize"]
    assert any(d.event == "check_suite" for d in held)
    for delivery in held:
        if delivery.event != "pull_request":
            world.hub.redeliver(delivery.guid)
    world.settle("hangar to handle CI's verdict")
    # no turn before hangar knows who pushed
    assert autofix_labels(world, issue) == [] and head(world, number) == human
    world.hub.redeliver(pushes[0].guid)
    wait_until(lambda: "someone pushed to the branch recently" in world.status(issue), 30,
               "the reason in the status comment")
    assert autofix_labels(world, issue) == [] and head(world, number) == human


def test_a_change_request_starts_no_turn_unless_the_repository_opts_in(world):
    world.start_hangar(agent(t1=RIGHT, t2="printf '# documented\\n' >> calc.py"))
    issue, _ = world.ask("/hangar fix the failing test")
    pr = wait_until(lambda: world.verified(issue), 60, "a verified PR")
    number = pr["number"]
    wait_until(lambda: idle(world, issue), 30, "the first turn to finish")
    world.hub.review(world.repo, number, "rita", "REQUEST_CHANGES",
                     body="Please document add().",
                     comments=[{"path": "calc.py", "line": 2, "body": "ADD-A-COMMENT-HERE"}])
    status = wait_until(lambda: "act_on_changes_requested: true" in world.status(issue)
                        and world.status(issue), 60, "the reason no turn started")
    assert "@rita requested changes, but hangar did not start a turn" in status
    assert world.hub.get_pr(world.repo, number)["head"]["sha"] == pr["head"]["sha"]
    assert autofix_labels(world, issue) == []
