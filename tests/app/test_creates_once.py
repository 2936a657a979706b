"""What hangar creates on GitHub is created once, with two replicas on one database too:
a replica that stalled past its lease may still send the create it marked, after the
other replica took the row over (app.creates). Two engines here share one store under
two replica names; GitHub is a recorder whose creates can be held on their way."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import pytest

from app.creates import IN_FLIGHT_S, CreateInFlight, Creating, Mark, Plan
from app.engine import Engine
from app.github.ops import RepoOps
from app.landing import rows as land_rows
from app.landing.steps import explain_reviews, show_check
from app.metrics import Metrics
from app.models import Job, Run, Thread
from app.runs.jobs import refresh_status
from app.runs.sandbox import upsert_check
from app.store import Store
from app.wiring import register_concerns

ISSUE = Thread(repo="acme/widgets", number=7, installation_id=1)
HEAD = "a" * 40
BOT = {"login": "hangar[bot]", "type": "Bot"}


class GitHub:
    """Issue comments and check runs as GitHub keeps them; while `held`, the first create
    waits on its way."""

    def __init__(self):
        self.comments: list[dict] = []
        self.check_runs: list[dict] = []
        self.held: asyncio.Event | None = None
        self.sent = asyncio.Event()  # a create reached GitHub and waits there

    async def getiter(self, url: str, iterable_key: str | None = None):
        if iterable_key == "check_runs":
            name = re.search(r"check_name=([^&]+)", url)
            for run in self.check_runs:
                if name is None or run["name"] == name.group(1):
                    yield run
            return
        thread = re.search(r"/issues/(\d+)/comments", url)
        for comment in self.comments if thread else []:  # else: no rules on the branch
            if comment["number"] == int(thread.group(1)):
                yield comment

    async def post(self, url: str, data: dict) -> dict:
        if self.held is not None and not self.sent.is_set():  # the first create only
            self.sent.set()
            await self.held.wait()
        made = {"id": 1000 + len(self.comments) + len(self.check_runs), **data}
        if url.endswith("/check-runs"):
            self.check_runs.append(made)
        else:
            made.update(number=int(url.split("/")[-2]), user=BOT)
            self.comments.append(made)
        return made

    async def patch(self, url: str, data: dict) -> dict:
        found = next(x for x in self.comments + self.check_runs
                     if x["id"] == int(url.rsplit("/", 1)[1]))
        found.update(data)
        return found


def replica(settings, name: str, github: GitHub) -> Engine:
    engine = Engine(settings=settings, store=Store(settings.db_path, owner=name), auth=None,
                    metrics=Metrics(), tokens=None)
    register_concerns(engine)
    ops = RepoOps(github, ISSUE.repo)  # type: ignore[arg-type]

    async def repo_ops(thread: Any) -> RepoOps:
        return ops

    engine.github.repo_ops = repo_ops
    return engine


@pytest.fixture
def two(settings):
    github = GitHub()
    return replica(settings, "a", github), replica(settings, "b", github), github


def test_who_may_create_what_a_mark_names():
    mine = Creating("a", inherited=False)
    now = time.time()
    assert mine.plan(None) == Plan.CREATE
    assert Creating("a", inherited=True).plan(None) == Plan.LOOK
    assert mine.plan(Mark(by="a", at=now)) == Plan.LOOK  # its own, earlier step is over
    assert mine.plan(Mark(by="b", at=now - 1)) == Plan.LOOK_ONLY  # may be on its way
    assert mine.plan(Mark(by="b", at=now - IN_FLIGHT_S)) == Plan.LOOK  # landed or failed
    assert mine.plan(Mark()) == Plan.LOOK  # a mark older rows kept
    marks, plan = mine.claim({"x": Mark(by="b", at=now)}, "x")
    assert plan == Plan.LOOK_ONLY and marks["x"].by == "b"  # another's mark stays
    marks, plan = mine.claim({str(n): Mark() for n in range(12)}, "new", keep=10)
    assert plan == Plan.CREATE and list(marks) == [*map(str, range(3, 12)), "new"]


async def race(first, second, github: GitHub) -> None:
    """`first` marks its create and sends it; GitHub holds it. `second` runs meanwhile
    (the other replica, which took the row over) and must not create a second. Then the
    held create lands."""
    github.held = asyncio.Event()
    task = asyncio.create_task(first())
    await asyncio.wait_for(github.sent.wait(), 10)
    with pytest.raises(CreateInFlight) as waited:
        await second()
    assert time.time() + IN_FLIGHT_S - 5 < waited.value.until <= time.time() + IN_FLIGHT_S
    github.held.set()
    await task
    github.held = None
    github.sent.clear()


async def test_a_status_comment_another_replica_is_posting_is_not_posted_again(two):
    a, b, github = two
    job = a.save_job(Job(thread=ISSUE, requested_by="mona", prompt="fix it",
                         clone_url="x", base_branch="main"))
    a.save_run(Run(job_id=job.id, branch="hangar/7-a", base_branch="main"))
    await race(lambda: refresh_status(a, job.id, force=True),
               lambda: refresh_status(b, job.id, force=True), github)
    await refresh_status(b, job.id, force=True)  # b now edits a's comment
    assert len(github.comments) == 1
    assert b.get_job(job.id).status_comments == {7: github.comments[0]["id"]}
    assert b.get_job(job.id).status_posting == {}


async def test_a_mark_left_by_a_replica_that_died_is_posted_once_it_is_old(two):
    a, b, github = two
    job = a.save_job(Job(thread=ISSUE, requested_by="mona", prompt="fix it",
                         clone_url="x", base_branch="main"))
    a.save_run(Run(job_id=job.id, branch="hangar/7-a", base_branch="main"))
    a.patch_job(job.id, status_posting={7: Mark(by="a", at=time.time())})  # then died
    with pytest.raises(CreateInFlight):
        await refresh_status(b, job.id, force=True)
    assert github.comments == []
    b.patch_job(job.id, status_posting={7: Mark(by="a", at=time.time() - IN_FLIGHT_S)})
    await refresh_status(b, job.id, force=True)
    assert len(github.comments) == 1
    # a, restarted under its own name, looks for what it marked and posts it if not there
    a.patch_job(job.id, status_comments={}, status_posting={7: Mark(by="a", at=time.time())})
    github.comments.clear()
    await refresh_status(a, job.id, force=True)
    assert len(github.comments) == 1


async def test_a_runs_check_run_another_replica_is_creating_is_not_created_again(two):
    a, b, github = two
    job = a.save_job(Job(thread=ISSUE, requested_by="mona", prompt="fix it",
                         clone_url="x", base_branch="main"))
    run = a.save_run(Run(job_id=job.id, branch="hangar/7-a", base_branch="main"))
    ops = await a.github.repo_ops(ISSUE)
    await race(lambda: upsert_check(a, ops, run, "hangar / agent", HEAD, status="in_progress"),
               lambda: upsert_check(b, ops, run, "hangar / agent", HEAD, status="in_progress"),
               github)
    await upsert_check(b, ops, run, "hangar / agent", HEAD, status="completed",
                       conclusion="success")
    assert [(c["name"], c["status"]) for c in github.check_runs] == [
        ("hangar / agent", "completed")]
    assert b.get_run(run.id).posting == {}


def land_request(engine: Engine) -> land_rows.LandRequest:
    """PR #12's land request, with a head to show its check run on."""
    job = engine.save_job(Job(thread=ISSUE, requested_by="mona", prompt="fix it",
                              clone_url="x", base_branch="main"))
    engine.save_run(Run(job_id=job.id, branch="hangar/7-a", base_branch="main",
                        pr_number=12))
    request = land_rows.ensure_request(engine, job, 12)
    request.head_sha = HEAD
    return land_rows.save(engine, request)


async def test_a_land_check_another_replica_is_creating_is_not_created_again(two):
    a, b, github = two
    request = land_request(a)

    async def show(engine: Engine) -> None:
        row = land_rows.get(engine, request.id)
        await show_check(engine, await engine.github.repo_ops(ISSUE), row, "shown",
                         status="queued")

    await race(lambda: show(a), lambda: show(b), github)
    await show(b)  # b now updates a's check run
    assert [c["external_id"] for c in github.check_runs] == [request.id]
    after = land_rows.get(b, request.id)
    assert after.check_ids == {HEAD: github.check_runs[0]["id"]} and after.check_posting == {}


async def test_a_land_checks_id_is_kept_when_the_request_changed_while_it_was_made(two):
    """Intake may write the land request (an event about the very merge) while its check
    run is being created: the id GitHub answered, and what it shows, are kept on the
    fresh row, so no step looks for the check run by name or writes it again unchanged."""
    a, _, github = two
    request = land_request(a)
    github.held = asyncio.Event()
    made = asyncio.create_task(show_check(
        a, await a.github.repo_ops(ISSUE), land_rows.get(a, request.id), "landed",
        status="completed", conclusion="success"))
    await asyncio.wait_for(github.sent.wait(), 10)
    meanwhile = land_rows.get(a, request.id)
    meanwhile.merge_sha = "b" * 40
    land_rows.save(a, meanwhile)
    github.held.set()
    await made
    after = land_rows.get(a, request.id)
    assert after.check_ids == {HEAD: github.check_runs[0]["id"]} and after.check_posting == {}
    assert after.shown == "landed"  # show() writes the check again only when this differs
    assert after.merge_sha == "b" * 40  # and what intake wrote stays


async def test_a_reply_on_a_review_is_recorded_when_the_request_changed_while_it_was_made(two):
    """The same for the reply saying why an approval does not count: recorded on the
    fresh row, so the next step neither looks for it nor writes it again."""
    a, _, github = two
    request = land_request(a)
    review = land_rows.ReviewRecord(id=77, user="rick", state="approved", commit_id=HEAD)
    github.held = asyncio.Event()
    said = asyncio.create_task(explain_reviews(
        a, await a.github.repo_ops(ISSUE), land_rows.get(a, request.id),
        [(review, "rick may not approve here")]))
    await asyncio.wait_for(github.sent.wait(), 10)
    meanwhile = land_rows.get(a, request.id)
    meanwhile.merge_sha = "b" * 40
    land_rows.save(a, meanwhile)
    github.held.set()
    with pytest.raises(land_rows.RowChanged):  # this step ends; the next reads it fresh
        await said
    after = land_rows.get(a, request.id)
    assert after.explained == [77] and after.merge_sha == "b" * 40
    await explain_reviews(a, await a.github.repo_ops(ISSUE), after,
                          [(review, "rick may not approve here")])
    assert [c["body"].count("does not count") for c in github.comments] == [1]


async def test_a_command_is_done_when_another_replica_is_creating_the_check_it_shows(two):
    """`/hangar land cancel` on b while a's create of the land check is on its way: the
    command is done (not taken again for a check run); the request's own step shows it."""
    from app.landing.commands import cancel
    from app.models import Intent

    a, b, github = two
    request = land_request(a)
    intent = Intent(id="comment-9-0", thread=ISSUE.model_copy(update={"number": 12}),
                    comment_id=9, author="mona", command="land_cancel", args={})

    async def show_on_a() -> None:
        row = land_rows.get(a, request.id)
        await show_check(a, await a.github.repo_ops(ISSUE), row, "shown", status="queued")

    github.held = asyncio.Event()
    task = asyncio.create_task(show_on_a())
    await asyncio.wait_for(github.sent.wait(), 10)
    said = await cancel(b, await b.github.repo_ops(ISSUE), intent, land_rows.get(b, request.id))
    assert said == "land cancelled" and github.check_runs == []
    after = land_rows.get(b, request.id)
    assert after.state == land_rows.LandState.CANCELLED and after.due_at == 0
    github.held.set()
    await task
    assert len(github.check_runs) == 1


async def test_a_thread_reply_keeps_a_newer_turn_written_while_it_posts(two):
    """A later turn's end names itself on the thread's row while the step for the earlier
    one is under way: the step's mark leaves it there, so the newer turn is still owed its
    reply (the row stays active and woken)."""
    from app.review_threads import TABLE, ThreadReply, advance_reply

    a, _, github = two
    job = a.save_job(Job(thread=ISSUE, requested_by="mona", prompt="fix it",
                         clone_url="x", base_branch="main"))
    done = {"state": "exited", "finished_at": time.time(), "pr_number": 12,
            "start_sha": HEAD, "head_sha": HEAD}
    first = a.save_run(Run(job_id=job.id, branch="hangar/7-a", base_branch="main", **done))
    later = a.save_run(Run(job_id=job.id, branch="hangar/7-a", base_branch="main", turn=2,
                           **done))
    row = ThreadReply(id="thread-1", job_id=job.id, repo=ISSUE.repo, pr_number=12, root=5,
                      run_id=first.id)
    a.store.put(TABLE, row.id, row, active=True)
    ops = await a.github.repo_ops(ISSUE)

    async def repo_ops(thread: Any) -> RepoOps:  # the later turn ends meanwhile
        a.store.put(TABLE, row.id, row.model_copy(update={"run_id": later.id}), active=True)
        return ops

    a.github.repo_ops = repo_ops
    woken = []
    a.wake = lambda *ids: woken.extend(ids)
    await advance_reply(a, row.id)
    after = a.store.get(TABLE, row.id, ThreadReply)
    assert (after.run_id, after.replied_run) == (later.id, first.id)
    assert [r.id for r in a.store.all(TABLE, ThreadReply, active=True)] == [row.id]
    assert woken == [row.id] and len(github.comments) == 1
