"""A repository's new name, on the engine with every concern registered: each kind's rows
follow it (`RowKind.follows_rename`), ids made from the name are made again, and a row
keeps what the store knows of it besides its data (active, notes, its place in order).
So a command on the renamed repository's PR, CI's event for its auto-fix, a fan-out's
grading and a review thread all find their rows under the name GitHub now sends."""

from __future__ import annotations

import asyncio

import pytest

from app import landing
from app.autofix.rows import ensure_row
from app.fanout import grading
from app.landing.overlaps import Overlaps, overlap_id
from app.landing.queue import MergeGroup, group_id
from app.models import (
    AutofixRow,
    Intent,
    Job,
    Rename,
    Run,
    RunStage,
    RunState,
    Thread,
    autofix_row_id,
)
from app.review_threads import TABLE as THREADS
from app.review_threads import ThreadReply, reply_id
from app.reviewers import TABLE as ASKS
from app.reviewers import ReviewAsk, ask_id
from app.wiring import register_concerns
from tests.recording_github import HEAD, PR_NUMBER, REPO, RecordingGitHub

NEW = "acme/tools"
OTHER = "acme/gadgets"


@pytest.fixture
def engine(step_engine):
    engine = step_engine(RecordingGitHub())
    register_concerns(engine)
    return engine


def a_job(engine, repo: str) -> Job:
    job = engine.save_job(Job(thread=Thread(repo=repo, number=1, installation_id=1),
                              requested_by="mona", prompt="fix",
                              clone_url=f"https://github.example/{repo}.git",
                              base_branch="main"))
    engine.save_run(Run(job_id=job.id, branch="hangar/1-abc", base_branch="main",
                        state=RunState.RUNNING, stage=RunStage.PENDING, pr_number=PR_NUMBER,
                        head_sha=HEAD))
    engine.save_intent(Intent(id=f"comment-{job.id}", comment_id=1, author="mona",
                              command="land", thread=Thread(repo=repo, number=PR_NUMBER,
                                                            installation_id=1, is_pr=True)))
    landing.save(engine, landing.LandRequest(
        id=landing.land_id(repo, PR_NUMBER), job_id=job.id, repo=repo, installation_id=1,
        pr_number=PR_NUMBER, base="main", branch="hangar/1-abc", requested_by="mona",
        head_sha=HEAD, woken=False, due_at=10**10))
    ensure_row(engine, job, PR_NUMBER)
    grading.start(engine, job.id, repo, {1: HEAD}, {1: HEAD}, wait=600)
    store = engine.store
    store.put(ASKS, ask_id(repo, PR_NUMBER), ReviewAsk(
        id=ask_id(repo, PR_NUMBER), job_id=job.id, repo=repo, pr_number=PR_NUMBER,
        head_sha=HEAD), active=False)
    store.put(THREADS, reply_id(repo, PR_NUMBER, 5), ThreadReply(
        id=reply_id(repo, PR_NUMBER, 5), job_id=job.id, repo=repo, pr_number=PR_NUMBER,
        root=5, run_id="run-1"), active=True)
    store.put("land_overlap", overlap_id(repo, "main"), Overlaps(
        id=overlap_id(repo, "main"), repo=repo, base="main", installation_id=1,
        clone_url=f"https://github.example/{repo}.git"), active=False)
    store.put("merge_group", group_id(repo, HEAD), MergeGroup(
        id=group_id(repo, HEAD), repo=repo, installation_id=1, head_sha=HEAD,
        head_ref="gh-readonly-queue/main/pr-7-b", base_ref="main", base_sha="b" * 40,
        pr_number=PR_NUMBER, job_id=job.id), active=True)
    engine.note(landing.land_id(repo, PR_NUMBER), "queued by @mona")
    return job


def rows_of(engine, repo: str) -> dict[str, str]:
    """Each kind's row ids that name `repo`."""
    found = {}
    for kind in engine.kinds.values():
        for row in engine.store.all(kind.table, kind.model):
            named = getattr(row, "repo", None) or getattr(getattr(row, "thread", None),
                                                          "repo", None)
            if named == repo:
                found.setdefault(kind.kind, []).append(row.id)
    return found


def test_every_concerns_rows_follow_a_renamed_repository(engine):
    job = a_job(engine, REPO)
    other = a_job(engine, OTHER)
    before_other = rows_of(engine, OTHER)
    kinds = set(rows_of(engine, REPO))
    assert {"job", "intent", "land", "autofix", "fanout_grading", "review_ask",
            "thread_reply", "land_overlap", "merge_group"} <= kinds

    moved = engine.rename_repositories(Rename(REPO, NEW))

    assert rows_of(engine, REPO) == {}
    assert set(rows_of(engine, NEW)) == kinds
    assert rows_of(engine, OTHER) == before_other  # another repository's rows stay
    store = engine.store
    # Ids made from the name are made again, so lookups by the new name find the rows.
    request = landing.get(engine, landing.land_id(NEW, PR_NUMBER))
    assert request.job_id == job.id and request.woken and request.due_at == 0
    assert landing.job_for_pr(engine, NEW, PR_NUMBER).id == job.id
    assert store.get("autofix", autofix_row_id(NEW, PR_NUMBER), AutofixRow).job_id == job.id
    assert store.get(ASKS, ask_id(NEW, PR_NUMBER), ReviewAsk) is not None
    assert store.get(THREADS, reply_id(NEW, PR_NUMBER, 5), ThreadReply) is not None
    assert store.get("land_overlap", overlap_id(NEW, "main"), Overlaps).clone_url \
        == f"https://github.example/{NEW}.git"
    assert store.get("merge_group", group_id(NEW, HEAD), MergeGroup).job_id == job.id
    assert grading.get_row(engine, job.id).repo == NEW
    renamed = engine.get_job(job.id)
    assert renamed.clone_url == f"https://github.example/{NEW}.git"
    assert engine.get_job(other.id).thread.repo == OTHER
    # What the store knows besides the data stays: active or not, and the row's notes.
    active = {row.id for row in store.all("review_ask", ReviewAsk, active=False)}
    assert ask_id(NEW, PR_NUMBER) in active
    assert [what for _, what in store.notes(landing.land_id(NEW, PR_NUMBER))] \
        == ["queued by @mona"]
    # Each moved row is looked at once, under its new id.
    assert landing.land_id(NEW, PR_NUMBER) in moved and job.id in moved
    assert engine._woken >= set(moved)


def test_an_accounts_repositories_move_at_once_reading_each_kind_once(engine, monkeypatch):
    """An account rename moves all its repositories: each kind's rows are read once for
    all of them, and only the rows that hold one of the names are parsed."""
    a_job(engine, REPO)
    a_job(engine, OTHER)
    elsewhere = a_job(engine, "octo/widgets")
    reads = []
    mentioning = engine.store.mentioning

    def reading(table, model, text):
        rows = mentioning(table, model, text)
        reads.append((table, {getattr(row, "repo", None) or row.thread.repo for row in rows}))
        return rows

    monkeypatch.setattr(engine.store, "mentioning", reading)
    # The rename event spells the names in another case than the rows keep them.
    engine.rename_repositories(Rename("ACME/Widgets", "acme-inc/widgets"),
                               Rename("Acme/gadgets", "acme-inc/gadgets"))
    tables = [table for table, _ in reads]
    assert len(tables) == len(set(tables)) == len(
        [k for k in engine.kinds.values() if k.follows_rename is not None])
    assert all(repos <= {REPO, OTHER} for _, repos in reads)  # octo's rows are never parsed
    assert rows_of(engine, REPO) == rows_of(engine, OTHER) == {}
    assert set(rows_of(engine, "acme-inc/widgets")) == set(rows_of(engine, "acme-inc/gadgets")) \
        == set(rows_of(engine, "octo/widgets"))
    assert engine.get_job(elsewhere.id).thread.repo == "octo/widgets"


def test_a_row_already_under_the_new_name_is_kept(engine):
    """Webhooks come out of order: an event under the new name may have made its row
    before the rename is heard. That row is newer, and stays; the old one is left."""
    a_job(engine, REPO)
    job = a_job(engine, NEW)
    engine.rename_repository(Rename(REPO, NEW))
    assert landing.get(engine, landing.land_id(NEW, PR_NUMBER)).job_id == job.id
    assert landing.get(engine, landing.land_id(REPO, PR_NUMBER)) is not None


async def test_a_row_whose_step_runs_through_the_rename_moves_as_the_step_ends(engine):
    """A step holds the row it read while it asks GitHub; the rename heard meanwhile must
    not leave the row it writes back under the old id, beside (or instead of) the moved
    one: the row moves once the step has ended, with what the step wrote."""
    a_job(engine, REPO)
    old_id, new_id = landing.land_id(REPO, PR_NUMBER), landing.land_id(NEW, PR_NUMBER)
    read, answered = asyncio.Event(), asyncio.Event()

    async def step(engine_, row_id: str) -> None:
        request = landing.get(engine_, row_id)
        read.set()
        await answered.wait()  # GitHub answers after the rename was heard
        request.head_sha = "c" * 40
        landing.save(engine_, request)

    engine._schedule(old_id, "land", step, old_id)
    task = engine._tasks[old_id]
    await read.wait()
    moved = engine.rename_repositories(Rename(REPO, NEW))
    assert new_id not in moved
    assert landing.get(engine, old_id) is not None  # not moved under the running step
    answered.set()
    await task
    assert landing.get(engine, old_id) is None
    request = landing.get(engine, new_id)
    assert request.repo == NEW and request.head_sha == "c" * 40
    assert "land" not in rows_of(engine, REPO)
    assert new_id in engine._woken  # and it is looked at under its new id


async def test_a_row_whose_step_a_stop_cuts_moves_at_the_stop(engine):
    """The step never ends (the stop cancels it at its grace's end, or in a pause): its
    row still moves before the restart, not left under the old name for good."""
    from app.pauses import pause

    a_job(engine, REPO)
    old_id, new_id = landing.land_id(REPO, PR_NUMBER), landing.land_id(NEW, PR_NUMBER)
    pausing = asyncio.Event()

    async def step(_engine, _row_id: str) -> None:
        pausing.set()
        await pause(3600)  # GitHub asked it to wait

    engine.start()
    engine._schedule(old_id, "land", step, old_id)
    task = engine._tasks[old_id]
    await pausing.wait()
    engine.rename_repositories(Rename(REPO, NEW))
    assert landing.get(engine, old_id) is not None
    try:
        await engine.stop()
    finally:
        engine._loop_task.cancel()
    assert task.cancelled()
    assert landing.get(engine, old_id) is None
    assert landing.get(engine, new_id).repo == NEW


def test_a_kind_that_keeps_a_repository_name_says_how_it_follows_a_rename(engine):
    """A new concern's row that names its repository must say how it follows a rename,
    or a renamed repository's events would no longer find it. The kinds left out say why."""
    left_out = {
        # A lane per (repository, environment, provider): a renamed repository builds its
        # environment again under its new name, as a new repository would.
        "envbuild",
    }
    for kind in engine.kinds.values():
        fields = kind.model.model_fields
        if "repo" in fields or "thread" in fields:
            assert (kind.follows_rename is not None) != (kind.kind in left_out), kind.kind


@pytest.mark.parametrize("url, expected", [
    ("https://github.com/acme/widgets.git", "https://github.com/acme/tools.git"),
    ("https://github.com/Acme/Widgets", "https://github.com/acme/tools"),
    ("https://github.com/acme/widgets-two.git", "https://github.com/acme/widgets-two.git"),
])
def test_a_clone_url_follows_the_name(url, expected):
    assert Rename(REPO, NEW).url(url) == expected
    assert Rename(REPO, NEW, "https://x/acme/tools.git").url(url) == "https://x/acme/tools.git"
