"""Fan-out's ranking and grading are written against `FanoutContext`, not the engine:
here they run on a small object of the test's own (the job and runs in dicts, GitHub a
table of CI by head), in milliseconds, and wait for CI on a head only while it runs."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from app.fanout import grading
from app.fanout.steps import advance_grading, rank_attempts
from app.models import Job, Run, Thread, Verification, changed
from app.settings import Settings
from app.store import Store

THREAD = Thread(repo="acme/widgets", number=7, installation_id=1)
HEADS = {1: "1" * 40, 2: "2" * 40}


@dataclass
class Ops:
    """CI on each head, as GitHub lists it: one check run of the repository's CI App."""

    ci: dict[str, str]  # head -> "in_progress" | a conclusion

    async def check_runs(self, sha: str, query: str = "") -> list[dict]:
        state = self.ci[sha]
        done = state != "in_progress"
        return [{"name": "ci / test", "head_sha": sha, "app": {"id": 99},
                 "status": "completed" if done else "in_progress",
                 "conclusion": state if done else None}]

    async def statuses(self, sha: str) -> list[dict]:
        return []


@dataclass
class GitHub:
    ops: Ops

    async def repo_ops(self, thread: Any) -> Ops:
        return self.ops

    async def config_text(self, ops: Any, ref: str, *_: Any) -> str:
        return ""  # no .github/hangar.yml: the defaults


@dataclass
class Fanout:
    """The parts of FanoutContext fan-out uses; nothing of an Engine."""

    settings: Settings
    store: Store
    github: GitHub
    jobs: dict[str, Job] = field(default_factory=dict)
    runs: list[Run] = field(default_factory=list)
    woken: list[str] = field(default_factory=list)

    def wake(self, *row_ids: str) -> None:
        self.woken += row_ids

    def get_job(self, job_id: str) -> Job | None:
        return self.jobs.get(job_id)

    def runs_of(self, job_id: str) -> list[Run]:
        return [run for run in self.runs if run.job_id == job_id]

    def patch_job(self, job_id: str, **fields: Any) -> Job:
        self.jobs[job_id] = changed(self.jobs[job_id], **fields)
        return self.jobs[job_id]


@pytest.fixture
def fanout(settings, tmp_path) -> Fanout:
    job = Job(thread=THREAD, requested_by="mona", prompt="fix it", clone_url="x",
              base_branch="main", attempts=2)
    runs = [Run(job_id=job.id, attempt=a, branch=f"hangar/7-{a}", base_branch="main",
                pr_number=10 + a, head_sha=head, state="exited", finished_at=time.time(),
                verification=Verification(command="pytest", head_sha=head, passed=True))
            for a, head in HEADS.items()]
    return Fanout(settings=settings.model_copy(update={"grading_wait_seconds": 600}),
                  store=Store(tmp_path / "rows.db"),
                  github=GitHub(Ops({HEADS[1]: "success", HEADS[2]: "in_progress"})),
                  jobs={job.id: job}, runs=runs)


async def test_the_status_is_asked_again_only_when_the_heads_waited_on_change(fanout):
    [job] = fanout.jobs.values()
    fanout.github.ops.ci[HEADS[1]] = "in_progress"
    await rank_attempts(fanout, job)
    assert fanout.jobs[job.id].grading["waiting"] == {"1": HEADS[1], "2": HEADS[2]}
    fanout.github.ops.ci[HEADS[1]] = "success"
    await advance_grading(fanout, job.id)
    assert fanout.jobs[job.id].grading["waiting"] == {"2": HEADS[2]}
    assert fanout.woken == [job.id]  # the status names one head fewer
    await advance_grading(fanout, job.id)
    assert fanout.woken == [job.id]  # nothing changed: no ask


async def test_the_ranking_waits_for_ci_on_a_head_and_ranks_once_it_finishes(fanout):
    [job] = fanout.jobs.values()
    await rank_attempts(fanout, job)
    row = grading.get_row(fanout, job.id)
    assert row is not None and not row.done and fanout.jobs[job.id].ranking == []
    assert fanout.jobs[job.id].grading["waiting"] == {"2": HEADS[2]}

    await advance_grading(fanout, job.id)  # CI still runs on the same head: it waits on
    # The status says so already; asking again would wake the job's id, this row's too,
    # and step it again at once: a loop reading CI a thousand times a second.
    assert fanout.jobs[job.id].ranking == [] and fanout.woken == []
    assert grading.get_row(fanout, job.id).due_at == row.until  # until an event or the end

    fanout.github.ops.ci[HEADS[2]] = "failure"
    grading.on_ci(fanout, THREAD.repo, HEADS[2])
    assert grading.get_row(fanout, job.id).due_at == 0.0  # the event wakes it
    await advance_grading(fanout, job.id)
    ranking = fanout.jobs[job.id].ranking
    assert [(entry["attempt"], entry["ci"]) for entry in ranking] == [
        (1, "passed"), (2, "failed")]
    assert grading.get_row(fanout, job.id).done and "unfinished" not in fanout.jobs[
        job.id].grading


async def test_past_the_wait_the_ranking_names_the_head_whose_ci_had_not_finished(fanout):
    [job] = fanout.jobs.values()
    await rank_attempts(fanout, job)
    row = grading.get_row(fanout, job.id)
    fanout.store.put(grading.TABLE, job.id, row.model_copy(update={"until": time.time()}),
                     active=True)
    await advance_grading(fanout, job.id)
    after = fanout.jobs[job.id]
    assert [entry["attempt"] for entry in after.ranking] == [1, 2]
    assert after.ranking[1]["ci_unfinished"] == HEADS[2]
    assert after.grading["unfinished"] == {"2": HEADS[2]}


async def test_with_every_heads_ci_finished_it_ranks_at_once(fanout):
    [job] = fanout.jobs.values()
    fanout.github.ops.ci[HEADS[2]] = "success"
    await rank_attempts(fanout, job)
    assert grading.get_row(fanout, job.id) is None
    assert [entry["ci"] for entry in fanout.jobs[job.id].ranking] == ["passed", "passed"]
