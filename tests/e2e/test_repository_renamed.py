"""A repository renamed, or its account renamed, while hangar's PR waits, end to end:
GitHub's events come under the new name from then on, and every part of the job that
hangar finds by name follows it. CI failing on the PR starts an auto-fix turn, whose push
lands under the new name, and an approval lands the PR. Through fakehub over real HTTP,
real git and bubblewrap.
"""

from __future__ import annotations

import pytest

from app.models import Thread
from app.web.keys import ENGINE
from tests.e2e.conftest import wait_until
from tests.e2e.test_autofix import RIGHT, agent, autofix_labels, conclusion, head
from tests.e2e.test_landing import approve, landed, protect

pytestmark = pytest.mark.slow


def refused(world, mark: int) -> list[tuple[str, str, int]]:
    """hangar's calls GitHub refused since `mark` (a read of what is not there, such as a
    branch not pushed yet, is an answer)."""
    return [(method, path, status)
            for method, path, status in world.hub.api_calls(world.app.id)[mark:]
            if status in (401, 403, 422) or (status >= 400 and method != "GET")]


@pytest.mark.parametrize("how", ["repository", "account"])
def test_a_renamed_repository_keeps_its_auto_fix_and_landing(world, how):
    protect(world, checks=())  # a ruleset asking one approval
    world.start_hangar(agent(t1=RIGHT))
    issue, _ = world.ask("/hangar fix the failing test")
    pr = wait_until(lambda: world.verified(issue), 60, "a verified PR")
    number, sha = pr["number"], pr["head"]["sha"]
    world.hub.comment(world.repo, number, "/hangar autofix off", as_user="mona")
    wait_until(lambda: "auto-fix is off for this pull request" in world.status(number), 30,
               "the status comment to say auto-fix is off")
    world.settle("hangar's edits for the verified PR")
    mark = len(world.hub.api_calls(world.app.id))

    if how == "repository":
        world.repo = world.hub.rename_repository(world.repo, "tools")
    else:
        world.hub.rename_account("acme", "acme-corp")
        world.repo = "acme-corp/widgets"
    world.settle("hangar to hear of the new name")

    # CI's event comes under the new name, and finds the PR's auto-fix as it was: off.
    world.hub.set_status(world.repo, sha, "lint", "failure",
                         description="lint found 3 problems",
                         target_url="http://127.0.0.1:9/lint/1")
    world.settle("hangar to handle the failed status")
    assert autofix_labels(world, issue) == [] and head(world, number) == sha
    # A command on the PR under its new name: turned on, the failure starts a turn.
    world.hub.comment(world.repo, number, "/hangar autofix on", as_user="mona")
    wait_until(lambda: autofix_labels(world, issue) == ["auto-fix turn 1 of 2: lint failed"],
               60, "an auto-fix turn once auto-fix is on again")
    fixed = wait_until(lambda: (new := head(world, number)) != sha
                       and conclusion(world, new, "hangar / verify") == "success" and new,
                       120, "the turn's head verified")
    # A person approves under the new name; hangar lands it there.
    approve(world, number, sha=fixed)
    wait_until(lambda: landed(world, number), 120, "the PR landed")
    assert refused(world, mark) == []
    assert world.hub.get_pr(world.repo, number)["base"]["repo"]["full_name"] == world.repo


def test_calls_under_the_old_name_follow_githubs_redirects(world):
    """Before hangar hears of a rename (its webhook lost, or still on its way), what it
    asks under the old name still reaches the repository: GitHub answers 301 to a read and
    307 to a write, and hangar's client repeats the request at the new address."""
    world.start_hangar("true\n")
    issue = world.hub.create_issue(world.repo, "add() is wrong", "It subtracts.",
                                   as_user=world.maintainer)
    old = world.repo
    world.hub.set_webhook_url(world.app.id, None)  # hangar hears nothing of the rename
    world.repo = world.hub.rename_repository(old, "tools")
    engine = world.hangar.app[ENGINE]

    async def under_the_old_name() -> tuple[str, int]:
        thread = Thread(repo=old, number=issue, installation_id=world.installation_id)
        ops = await engine.github.repo_ops(thread)
        title = (await ops.gh.getitem(f"/repos/{old}/issues/{issue}"))["title"]
        made = await ops.gh.post(f"/repos/{old}/issues/{issue}/comments",
                                 data={"body": "first"})
        await ops.gh.patch(f"/repos/{old}/issues/comments/{made['id']}",
                           data={"body": "edited"})
        return title, made["id"]

    title, comment_id = world.hangar.call(under_the_old_name())
    assert title == "add() is wrong"
    bodies = {c["id"]: c["body"] for c in world.hub.issue_comments(world.repo, issue)}
    assert bodies == {comment_id: "edited"}
    answered = [(method, status) for method, path, status in world.hub.api_calls(world.app.id)
                if f"/repos/{old}/" in path]
    assert sorted(answered) == [("GET", 301), ("PATCH", 307), ("POST", 307)]
