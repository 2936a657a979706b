"""Fan-out's grading: once every attempt has ended, the ranking waits for the
repository's CI on the attempts' heads, woken by CI's events, bounded by
HANGAR_GRADING_WAIT_SECONDS; past it the ranking names the heads whose CI had not
finished."""

from __future__ import annotations

import time

from app import fanout, render
from app.fanout import grading
from app.models import Job, Run, RunStage, RunState, Thread, Verification, changed
from tests.recording_github import HEAD, REPO, RecordingGitHub, check

ISSUE = Thread(repo=REPO, number=1, installation_id=1)


def fan_out(engine, attempts: int = 2) -> Job:
    """A `/hangar try N` whose attempts all ended verified, each with a PR on HEAD."""
    job = engine.save_job(Job(thread=ISSUE, requested_by="mona", prompt="fix add()",
                              clone_url="x", base_branch="main", attempts=attempts))
    for n in range(1, attempts + 1):
        engine.save_run(Run(
            job_id=job.id, attempt=n, branch=f"hangar/1-abc-{n}", base_branch="main",
            pr_number=10 + n, state=RunState.EXITED, stage=RunStage.DONE, outcome="pr",
            head_sha=HEAD, started_at=0.0, finished_at=float(n),
            verification=Verification(command="t", head_sha=HEAD, passed=True, attempts=1),
            compare={"files": [{"filename": "calc.py", "additions": n, "deletions": 0}]}))
    return job


def status_of(engine, job_id: str) -> str:
    job = engine.get_job(job_id)
    return render.status_comment(job, engine.runs_of(job_id))


async def test_ranking_waits_for_running_ci_and_an_event_ends_the_wait(step_engine):
    gh = RecordingGitHub(check_runs=[check("ci / test", None)])
    engine = step_engine(gh, grading_wait_seconds=600)
    job = fan_out(engine)

    await fanout.rank_attempts(engine, job)
    waiting = engine.get_job(job.id)
    assert waiting.ranking == []
    assert waiting.grading["waiting"] == {"1": HEAD, "2": HEAD}
    row = grading.get_row(engine, job.id)
    assert row.due_at == row.until and row.until >= time.time() + 590
    said = status_of(engine, job.id)
    assert ("**Grading:** every attempt has ended; the ranking waits for the repository's "
            "CI, still running on attempt 1's head `aaaaaaa`, attempt 2's head `aaaaaaa`, "
            "until ") in said
    assert "**Ranking**" not in said

    # still running when it looks again: it waits on, for an event or the deadline
    await fanout.advance_grading(engine, job.id)
    assert engine.get_job(job.id).ranking == []
    assert grading.get_row(engine, job.id).due_at == row.until

    # hangar's own check finishing is not the repository's CI: nothing wakes
    fanout.on_ci(engine, REPO, HEAD, check="hangar / verify", ours=True)
    assert grading.get_row(engine, job.id).due_at == row.until
    fanout.on_ci(engine, "acme/other", HEAD)  # another repository's head: not this one
    assert grading.get_row(engine, job.id).due_at == row.until

    gh.check_runs = [check("ci / test", "success")]
    fanout.on_ci(engine, REPO, HEAD, check="ci / test")
    assert grading.get_row(engine, job.id).due_at == 0.0
    await fanout.advance_grading(engine, job.id)
    ranked = engine.get_job(job.id)
    assert [e["attempt"] for e in ranked.ranking] == [1, 2]
    assert {e["ci"] for e in ranked.ranking} == {"passed"}
    assert ranked.grading == {}
    assert engine.store.all(grading.TABLE, grading.Grading, active=True) == []
    said = status_of(engine, job.id)
    assert "**Ranking**" in said and "**Grading:**" not in said
    assert "had not finished" not in said


async def test_no_running_ci_ranks_at_once(step_engine):
    gh = RecordingGitHub(check_runs=[check("ci / test", "failure")])
    engine = step_engine(gh)
    job = fan_out(engine)
    await fanout.rank_attempts(engine, job)
    ranked = engine.get_job(job.id)
    assert [e["ci"] for e in ranked.ranking] == ["failed", "failed"]
    assert grading.get_row(engine, job.id) is None


async def test_past_the_deadline_the_ranking_names_the_heads_whose_ci_had_not_finished(
        step_engine):
    gh = RecordingGitHub(check_runs=[check("ci / test", None)])
    engine = step_engine(gh, grading_wait_seconds=1800)
    job = fan_out(engine)
    await fanout.rank_attempts(engine, job)
    row = grading.get_row(engine, job.id)
    # the deadline passed (the row's clock, moved back instead of waiting half an hour)
    engine.store.put(grading.TABLE, row.id,
                     changed(row, since=row.since - 1800, until=time.time() - 1), active=True)

    await fanout.advance_grading(engine, job.id)
    ranked = engine.get_job(job.id)
    assert [e["attempt"] for e in ranked.ranking] == [1, 2]
    assert all(e["ci"] == "pending" and e["ci_unfinished"] == HEAD for e in ranked.ranking)
    assert ranked.grading["unfinished"] == {"1": HEAD, "2": HEAD}
    assert ("**CI had not finished** after 30 min on attempt 1's head `aaaaaaa`, attempt "
            "2's head `aaaaaaa`; the ranking counts their CI as pending."
            ) in status_of(engine, job.id)
    assert engine.store.all(grading.TABLE, grading.Grading, active=True) == []


async def test_no_wait_configured_ranks_at_once_and_says_what_had_not_finished(step_engine):
    gh = RecordingGitHub(check_runs=[check("ci / test", None)])
    engine = step_engine(gh, grading_wait_seconds=0)
    job = fan_out(engine)
    await fanout.rank_attempts(engine, job)
    ranked = engine.get_job(job.id)
    assert len(ranked.ranking) == 2 and grading.get_row(engine, job.id) is None
    assert ranked.grading["unfinished"] == {"1": HEAD, "2": HEAD}


async def test_an_event_while_a_look_reads_ci_is_not_lost(step_engine):
    gh = RecordingGitHub(check_runs=[check("ci / test", None)])
    engine = step_engine(gh, grading_wait_seconds=600)
    job = fan_out(engine)
    await fanout.rank_attempts(engine, job)
    read = grading.get_row(engine, job.id)  # a look read the row, then CI, still running
    fanout.on_ci(engine, REPO, HEAD, check="ci / test")  # CI finished meanwhile
    grading.wait_again(engine, read, {1: HEAD, 2: HEAD})
    assert grading.get_row(engine, job.id).due_at == 0.0  # it looks again at once
    # with no event since its read, a look sleeps until the deadline
    fresh = grading.get_row(engine, job.id)
    grading.wait_again(engine, fresh, {1: HEAD, 2: HEAD})
    assert grading.get_row(engine, job.id).due_at == fresh.until


async def test_a_repository_shortens_the_wait_and_never_lengthens_it(step_engine):
    # fanout.ci_wait_minutes: 5 under the operator's 30 minutes waits 5 minutes
    gh = RecordingGitHub(check_runs=[check("ci / test", None)],
                         contents={".github/hangar.yml": "fanout: {ci_wait_minutes: 5}\n"})
    engine = step_engine(gh, grading_wait_seconds=1800)
    job = fan_out(engine)
    await fanout.rank_attempts(engine, job)
    row = grading.get_row(engine, job.id)
    assert 290 <= row.until - row.since <= 300

    # 120 minutes asked under the operator's 10: the operator's bound stands
    gh = RecordingGitHub(check_runs=[check("ci / test", None)],
                         contents={".github/hangar.yml": "fanout: {ci_wait_minutes: 120}\n"})
    engine = step_engine(gh, grading_wait_seconds=600)
    job = fan_out(engine)
    await fanout.rank_attempts(engine, job)
    row = grading.get_row(engine, job.id)
    assert row.until - row.since == 600


async def test_a_repository_that_asks_for_no_wait_is_ranked_at_once(step_engine):
    gh = RecordingGitHub(check_runs=[check("ci / test", None)],
                         contents={".github/hangar.yml": "fanout: {ci_wait_minutes: 0}\n"})
    engine = step_engine(gh, grading_wait_seconds=1800)
    job = fan_out(engine)
    await fanout.rank_attempts(engine, job)
    ranked = engine.get_job(job.id)
    assert len(ranked.ranking) == 2 and grading.get_row(engine, job.id) is None
    assert ranked.grading["unfinished"] == {"1": HEAD, "2": HEAD}


async def test_runs_ranked_by_hand_in_one_repository_use_its_weights(step_engine):
    # attempt 2 changed more lines; weights that prefer more lines put it first
    gh = RecordingGitHub(check_runs=[check("ci / test", "success")], contents={
        ".github/hangar.yml": "fanout: {weights: {diff_lines: 1}}\n"})
    engine = step_engine(gh)
    runs = engine.runs_of(fan_out(engine).id)
    ranked = await fanout.ranking_of(engine, runs)
    assert [e["attempt"] for e in ranked] == [2, 1]
    assert [e["score"] for e in ranked] == [2.0, 1.0]

    # without weights: the fixed order (the smaller diff first), and no score
    engine = step_engine(RecordingGitHub(check_runs=[check("ci / test", "success")]))
    ranked = await fanout.ranking_of(engine, engine.runs_of(fan_out(engine).id))
    assert [e["attempt"] for e in ranked] == [1, 2] and "score" not in ranked[0]
