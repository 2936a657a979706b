"""The App taken away mid-turn, end to end: its account's owner uninstalls it, suspends
it, or takes the repository out of it while an agent works. The turn stops at once (its
sandbox ends), the job says why in its notes, and hangar asks nothing more of GitHub for
what it may no longer touch. Through fakehub over real HTTP, real git and bubblewrap.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from app.models import Job, JobState
from app.web.keys import METRICS, STORE
from tests.e2e.conftest import own_sleep, pids_with, wait_until

pytestmark = pytest.mark.slow


def job_of(world, issue: int) -> Job | None:
    return next((j for j in world.hangar.app[STORE].all("job", Job)
                 if j.thread.number == issue), None)


def notes_of(world, job: Job) -> list[str]:
    return [what for _, what in world.hangar.app[STORE].notes(job.id)]


TOKEN = "installation-api-token-0123456789"


def api(world, path: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"{world.hangar.url}{path}", method="POST", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())


def agent_at_work(world) -> tuple[int, str]:
    """hangar started, asked, and its agent running (a sleep this test alone carries)."""
    asleep = own_sleep(3600)
    world.start_hangar(f"exec {asleep}\n")
    issue, _ = world.ask("/hangar fix the failing test")
    wait_until(lambda: pids_with(asleep), 30, "the agent's process")
    # hangar's last edits for the turn's start are made: none is on its way to GitHub
    # when the App is taken away (that one GitHub would refuse, and rightly).
    wait_until(lambda: "turn 1, working since" in world.status(issue), 30,
               "the status comment to show the turn at work")
    return issue, asleep


def stopped(world, issue: int, asleep: str, says: str) -> Job:
    """The turn's sandbox gone, the job cancelled and its notes saying why."""
    wait_until(lambda: not pids_with(asleep), 30, "the agent's sandbox to end")
    job = wait_until(lambda: (j := job_of(world, issue)) and j.state == JobState.CANCELLED
                     and j, 30, "the job to be cancelled")
    assert says in notes_of(world, job)
    return job


def refused_since(world, mark: int) -> list[tuple[str, str, int]]:
    """GitHub's refusals since `mark`: denied, or a write that failed (a read of what is
    not there, such as a branch not pushed yet, is an answer)."""
    return [(method, path, status) for method, path, status in world.hub.api_calls()[mark:]
            if status in (401, 403) or (status >= 400 and method != "GET")]


def step_errors(world) -> float:
    """Engine steps that raised, of every kind."""
    counter = world.hangar.app[METRICS].engine_step_errors
    return sum(counter.value(kind=kind) or 0 for kind in ("job", "run", "land", "command"))


@pytest.mark.parametrize("how", ["uninstall", "suspend"])
def test_the_app_taken_away_mid_turn_stops_the_turn_and_asks_github_nothing_more(world, how):
    issue, asleep = agent_at_work(world)
    mark = len(world.hub.api_calls())
    getattr(world.hub, how)(world.installation_id)
    said = "uninstalled" if how == "uninstall" else "suspended"
    stopped(world, issue, asleep, f"hangar's GitHub App was {said} on acme: stopped")
    world.settle("hangar to take in the App's removal")
    # hangar knew from the webhook: it sent GitHub nothing it would refuse (no edit of a
    # status comment it may no longer touch, no token asked for), and no step failed.
    assert refused_since(world, mark) == [], refused_since(world, mark)
    assert step_errors(world) == 0


def test_an_unsuspended_installation_takes_commands_again(world):
    issue, asleep = agent_at_work(world)
    world.hub.suspend(world.installation_id)
    stopped(world, issue, asleep, "hangar's GitHub App was suspended on acme: stopped")
    world.hub.unsuspend(world.installation_id)
    world.settle("hangar to take in the unsuspension")
    again, _ = world.ask("/hangar fix the failing test")
    # The same agent: a turn starts again, with a token minted after the suspension.
    wait_until(lambda: len(pids_with(asleep)) > 0, 30, "a new turn's agent")
    job = wait_until(lambda: job_of(world, again), 30, "the new job")
    assert job.state == JobState.ACTIVE
    world.hub.uninstall(world.installation_id)  # and then taken away for good
    stopped(world, again, asleep, "hangar's GitHub App was uninstalled on acme: stopped")


def test_a_repository_taken_out_of_the_installation_stops_its_turn(world):
    issue, asleep = agent_at_work(world)
    mark = len(world.hub.api_calls())
    world.hub.remove_repositories(world.installation_id, [world.repo])
    stopped(world, issue, asleep, f"{world.repo} was removed from hangar's installation: stopped")
    world.settle("hangar to take in the repository's removal")
    assert refused_since(world, mark) == [], refused_since(world, mark)
    assert step_errors(world) == 0


def test_the_api_says_why_it_cannot_act_where_the_app_is_suspended(world):
    world.api_token = TOKEN
    issue, asleep = agent_at_work(world)
    world.hub.suspend(world.installation_id)
    job = stopped(world, issue, asleep, "hangar's GitHub App was suspended on acme: stopped")
    other = world.hub.create_issue(world.repo, "another", "", as_user=world.maintainer)

    status, answer = api(world, "/api/jobs", {"repo": world.repo, "issue": other,
                                              "prompt": "fix it"})
    assert status == 409
    assert answer["error"] == ("hangar's GitHub App was suspended on acme; an owner of acme "
                               "unsuspends it in the installation's settings on GitHub")
    status, answer = api(world, f"/api/jobs/{job.id}/cancel", {})
    assert status == 409
    assert answer["error"] == (f"hangar may no longer act on {world.repo} (hangar's GitHub "
                               "App was suspended on acme)")
    assert job_of(world, other) is None


@pytest.mark.parametrize("how", ["remove", "suspend"])
def test_work_done_and_awaiting_review_is_left_as_it_is_without_a_refused_call(world, how):
    """A job whose PR is verified and waits for an approval: taking the repository away
    ends its land request, and hangar edits nothing GitHub would refuse (its status
    comment stays as it was)."""
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test")
    pr = wait_until(lambda: world.verified(issue), 120, "the verified PR")
    wait_until(lambda: "waiting for" in world.status(issue), 30, "the status comment")
    world.settle("hangar to say the PR waits for a review")
    mark = len(world.hub.api_calls())
    if how == "remove":
        world.hub.remove_repositories(world.installation_id, [world.repo])
    else:
        world.hub.suspend(world.installation_id)
    job = wait_until(lambda: (j := job_of(world, issue)) and j.off_limits and j, 30,
                     "hangar to take in the removal")
    world.settle("hangar to take in the removal")
    assert refused_since(world, mark) == [], refused_since(world, mark)
    assert step_errors(world) == 0
    assert job.state == JobState.DONE  # its work was done: it stays done
    assert pr["state"] == "open"
