"""The GitHub calls of one job, from the `/hangar` comment to its verified PR with both
status comments saying so, then to its landing, counted from fakehub's log: hangar spaces
every write a second apart, so each write there is a second before a person sees the
result, and every read is charged to the installation's hourly allowance unless GitHub
answers 304. The counts hold what was removed: a call that comes back fails here."""

from __future__ import annotations

import re

import pytest

from app.models import Job, JobState
from app.web.keys import STORE
from tests.e2e.conftest import FIX_AGENT, wait_until
from tests.e2e.test_landing import approve, landed, protect

pytestmark = pytest.mark.slow

FOLD_S = 30
# Still working when hangar first looks at it (every half second): its first steps wait an
# interval, as the status comment's edits do, past the start its check run says already.
WORKS_A_MOMENT = "echo 'reading calc.py'\nsleep 2\n" + FIX_AGENT


def shape(method: str, path: str) -> str:
    return f"{method} " + re.sub(r"/\d+", "/{n}", re.sub(r"/[0-9a-f]{40}", "/{sha}",
                                                         path.split("?")[0]))


def job_at_rest(world, issue: int) -> bool:
    """The issue's job ended, with no status edit owed or asked."""
    jobs = [j for j in world.hangar.app[STORE].all("job", Job) if j.thread.number == issue]
    return bool(jobs) and all(j.state != JobState.ACTIVE and not j.status_due_at
                              and not j.status_asked for j in jobs)


def test_one_job_to_verified_makes_only_the_calls_a_person_needs(world):
    protect(world, checks=())  # a ruleset asking one approval, as the landing below needs
    # Status edits folded over a span the whole job fits in, even on a loaded machine: the
    # count is the job's, not the machine's speed.
    world.start_hangar(WORKS_A_MOMENT, settings={"status_edit_interval_seconds": FOLD_S})
    world.hub.reset_api_calls()
    issue, _ = world.ask("/hangar fix the failing test")
    pr = wait_until(lambda: world.verified(issue), 60, "a verified PR")
    number = pr["number"]
    wait_until(lambda: all("passed" in world.status(n) for n in (issue, number))
               and job_at_rest(world, issue), 2 * FOLD_S, "both status comments saying so")
    calls = world.hub.api_calls(world.app.id, charged_to="installation")
    kinds = [shape(m, p) for m, p, _ in calls]
    # GraphQL reads are POSTs too: the one here reads the repository's config and its
    # code owners' files at the base in one query, for the job's start and the PR's
    # review request alike (no REST read of the config, nor a second query).
    assert kinds.count("POST /graphql") == 1, kinds
    writes = [k for k in kinds if not k.startswith("GET ") and k != "POST /graphql"]
    repo = "/repos/acme/widgets"
    # The PR opens once, with its verification in its body, ready (land.draft_pr: a passed
    # verification known as it opens leaves nothing to mark ready: no `ready_for_review`).
    assert writes.count(f"POST {repo}/pulls") == 1
    assert f"PATCH {repo}/pulls/{{n}}" not in writes
    opened = [d.payload for d in world.hub.deliveries(world.app.id, "pull_request")
              if d.payload["number"] == number]
    assert [p["action"] for p in opened] == ["opened"]
    assert opened[0]["pull_request"]["draft"] is False
    # `hangar / agent` in progress from the turn's start and completed on the commit it
    # started from, and on the PR's head; `hangar / verify` made once, completed.
    assert writes.count(f"POST {repo}/check-runs") == 3, writes
    assert writes.count(f"PATCH {repo}/check-runs/{{n}}") == 1, writes
    # One status comment per thread; the PR's is posted with the issue's first edit, so
    # each says everything in one write after its post.
    assert writes.count(f"POST {repo}/issues/{{n}}/comments") == 2, writes
    assert writes.count(f"PATCH {repo}/issues/comments/{{n}}") == 1, writes
    assert writes.count(f"POST {repo}/issues/comments/{{n}}/reactions") == 1
    assert len(writes) == 9, writes
    # The repository's config is read once for the job, at the base's commit, in that query.
    assert f"GET {repo}/contents/.github/hangar.yml" not in kinds, kinds
    # The command was the issue's first comment (its webhook says so): no listing of them.
    assert f"GET {repo}/issues/{{n}}/comments" not in kinds, kinds

    # A person approves; hangar lands it. The base's open PRs are listed once for the job
    # (when the PR's files were first known): the PR's close changes no other PR's overlap.
    approve(world, number)
    wait_until(lambda: landed(world, number) and job_at_rest(world, issue), 2 * FOLD_S + 60,
               "the PR landed and its status comments saying so")
    whole = [shape(m, p) for m, p, _ in
             world.hub.api_calls(world.app.id, charged_to="installation")]
    assert f"PUT {repo}/pulls/{{n}}/merge" in whole, whole
    # `hangar / land` is made once, completed, as the merge is known: never looked for by
    # name nor written again unchanged (also when an event about the merge wrote the land
    # request while it was made: tests/app/test_creates_once.py).
    assert whole.count(f"POST {repo}/check-runs") == 4, whole
    assert whole.count(f"PATCH {repo}/check-runs/{{n}}") == 1, whole
    looked = [p for _, p, _ in world.hub.api_calls(world.app.id) if "check_name=" in p]
    assert looked == [], looked
    assert whole.count(f"GET {repo}/pulls") == 1, whole
    # Landing reads the config by the base's name: what the job's query read answers it;
    # that query also said the base has no classic protection (a 404 GitHub charges).
    assert f"GET {repo}/contents/.github/hangar.yml" not in whole, whole
    assert f"GET {repo}/branches/main/protection" not in whole, whole
