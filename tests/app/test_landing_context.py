"""Landing's steps are written against `LandingContext`, not the engine: a merge group's
step runs here on a small object of the test's own (rows in dicts, GitHub a recorder),
in milliseconds, and decides whether a verified PR head stands for the group."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from app.landing import MergeGroup, queue
from app.models import Run, Verification

REPO = "acme/widgets"
HEAD = "a" * 40
BASE_SHA = "b" * 40
GROUP_HEAD = "c" * 40


def group(**fields: Any) -> MergeGroup:
    return MergeGroup(**{
        "id": queue.group_id(REPO, GROUP_HEAD), "repo": REPO, "installation_id": 1,
        "head_sha": GROUP_HEAD, "head_ref": "gh-readonly-queue/main/pr-7-" + GROUP_HEAD,
        "base_ref": "main", "base_sha": BASE_SHA, "pr_number": 7, "job_id": "job-1",
        **fields})


def verified_run(**fields: Any) -> Run:
    return Run(**{
        "id": "run-1", "job_id": "job-1", "branch": "hangar/7-ab", "base_branch": "main",
        "pr_number": 7, "head_sha": HEAD, "state": "exited", "finished_at": time.time(),
        "compare": {"base_sha": BASE_SHA, "behind_by": 0},
        "verification": Verification(command="pytest", head_sha=HEAD, passed=True),
        **fields})


@dataclass
class Store:
    rows: dict[tuple[str, str], Any] = field(default_factory=dict)

    def get(self, table: str, row_id: str, model: type) -> Any:
        return self.rows.get((table, row_id))

    def put(self, table: str, row_id: str, row: Any, *, active: bool) -> None:
        self.rows[(table, row_id)] = row


@dataclass
class Ops:
    checks: list[tuple[str, str, dict]] = field(default_factory=list)

    async def upsert_check_run(self, name: str, head_sha: str, external_id: str, *,
                               status: str, conclusion: str | None = None,
                               output: dict | None = None, **_: Any) -> None:
        self.checks.append((name, head_sha, {"status": status, "conclusion": conclusion}))


@dataclass
class GitHub:
    ops: Ops = field(default_factory=Ops)

    async def repo_ops(self, thread: Any) -> Ops:
        return self.ops


@dataclass
class Job:
    thread: Any


@dataclass
class Landing:
    """The parts of LandingContext a merge group's step uses; nothing of an Engine."""

    runs: list[Run]
    store: Store = field(default_factory=Store)
    github: GitHub = field(default_factory=GitHub)
    woken: list[str] = field(default_factory=list)
    saved: list[Run] = field(default_factory=list)

    def runs_of(self, job_id: str) -> list[Run]:
        return [run for run in self.runs if run.job_id == job_id]

    def existing_job(self, job_id: str) -> Job:
        return Job(thread=type("Thread", (), {"number": 7})())

    def get_run(self, run_id: str) -> Run | None:
        return next((run for run in self.runs + self.saved if run.id == run_id), None)

    def save_run(self, run: Run) -> Run:
        self.saved.append(run)
        return run

    def wake(self, *row_ids: str) -> None:
        self.woken += row_ids


@pytest.mark.parametrize(("why", "run", "reused"), [
    ("the head verified on the group's very base", verified_run(), True),
    ("behind its base: the group's tree is not the head's",
     verified_run(compare={"base_sha": BASE_SHA, "behind_by": 1}), False),
    ("verified on another base commit", verified_run(compare={"base_sha": "e" * 40,
                                                              "behind_by": 0}), False),
    ("verified on another base branch", verified_run(base_branch="release"), False),
    ("its verification failed", verified_run(verification=Verification(
        command="pytest", head_sha=HEAD, passed=False)), False),
    ("verified an older head", verified_run(verification=Verification(
        command="pytest", head_sha="f" * 40, passed=True)), False),
    ("another PR's run", verified_run(pr_number=8), False),
])
def test_a_verified_head_stands_for_the_group_only_when_the_group_holds_it_exactly(
        why, run, reused):
    found = queue.reusable(Landing(runs=[run]), group())
    assert (found is not None) == reused, why


async def test_a_group_holding_a_verified_head_passes_without_a_run_of_its_own():
    landing = Landing(runs=[verified_run()])
    row = group()
    landing.store.put("merge_group", row.id, row, active=True)
    await queue.advance_group(landing, row.id)
    after = landing.store.get("merge_group", row.id, MergeGroup)
    assert (after.state, after.reused) == ("done", HEAD)
    assert landing.github.ops.checks == [
        ("hangar / verify", GROUP_HEAD, {"status": "completed", "conclusion": "success"})]
    assert landing.saved == [] and landing.woken == []


async def test_a_group_holding_an_unverified_head_is_verified_in_a_run_of_its_own():
    landing = Landing(runs=[verified_run(compare={"base_sha": BASE_SHA, "behind_by": 2})])
    row = group()
    landing.store.put("merge_group", row.id, row, active=True)
    await queue.advance_group(landing, row.id)
    after = landing.store.get("merge_group", row.id, MergeGroup)
    [run] = landing.saved
    assert (after.state, after.run_id) == ("verifying", run.id)
    assert (run.kind, run.head_sha, run.base_sha) == ("verify", GROUP_HEAD, BASE_SHA)
    assert landing.woken == [run.id] and landing.github.ops.checks == []
