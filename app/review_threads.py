"""Answering in review threads: a turn asked for in a review thread (a `/hangar` line in a
line comment or a reply) ends with hangar's reply in that thread, saying what changed —
the turn's commits and files as GitHub compares them, its verification, the agent's
words only in the labelled block — or, when the turn failed or made no commits, how it
ended (render's words). With `.github/hangar.yml` `review: {resolve_threads: true}`, a
reply saying the turn's commits passed verification also resolves the thread (GraphQL
`resolveReviewThread`: REST cannot).

One reply per thread, edited in place: a row per thread records the comment hangar made
there, so a repeated step, a redelivered event or a later turn on the same thread edits
that comment and never posts a second. The turn's prompt reads the thread
(app.runs.review_thread).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Protocol

from gidgethub import HTTPException
from pydantic import BaseModel, Field, field_validator

from app.creates import Creating, Mark, Plan, marks_of
from app.github.ops import PAGE
from app.github.reads import GitHubReads
from app.models import Job, Run, follows_repo, now
from app.render import threads as words
from app.repoconfig import parse_repo_config
from app.runs import REVIEW_THREAD_MARKER, is_hangar_reply
from app.store import Store

if TYPE_CHECKING:
    from app.engine import Registrations
    from app.github.ops import RepoOps

TABLE = "thread_reply"


class ThreadsContext(Protocol):
    """What replying in review threads uses of the engine: its own rows in the store; the
    job and its turns (which turn answers a thread, what it pushed); GitHub through
    `github` (the repository's config); the job's record of writes that may have gone
    out before a crash (`creating`); and wake."""

    store: Store
    github: GitHubReads

    def wake(self, *row_ids: str) -> None: ...
    def get_job(self, job_id: str) -> Job | None: ...
    def get_run(self, run_id: str) -> Run | None: ...
    def runs_of(self, job_id: str) -> list[Run]: ...
    def creating(self, job_id: str) -> Creating: ...


class ThreadReply(BaseModel):
    id: str
    job_id: str
    repo: str
    pr_number: int
    root: int  # the id of the thread's first comment
    run_id: str  # the latest finished turn that answers the thread
    replied_run: str | None = None  # the turn the reply says now
    comment_id: int | None = None  # hangar's reply in the thread
    # A reply was being posted (app.creates): it may exist, so it is looked for first.
    posting: Mark | None = None
    updated_at: float = Field(default_factory=now)

    _mark_stored_before = field_validator("posting", mode="before")(marks_of)


def reply_id(repo: str, pr_number: int, root: int) -> str:
    return f"thread-{repo.replace('/', '-')}-{pr_number}-{root}"


def after_run_step(engine: ThreadsContext, run_id: str) -> None:
    """A turn that answers review threads has finished: each thread's reply is due."""
    run = engine.get_run(run_id)
    if run is not None:
        reply_due(engine, run)


def after_job_step(engine: ThreadsContext, job_id: str) -> None:
    """A turn whose step failed until hangar gave up ends without a run step after it:
    its job's step is woken, and looks."""
    for run in engine.runs_of(job_id):
        reply_due(engine, run)


def reply_due(engine: ThreadsContext, run: Run) -> None:
    if not run.review_threads or not run.finished or run.pr_number is None:
        return
    job = engine.get_job(run.job_id)
    if job is None:
        return
    for root in run.review_threads:
        row_id = reply_id(job.thread.repo, run.pr_number, root)
        row = engine.store.get(TABLE, row_id, ThreadReply)
        if row is not None and (row.run_id == run.id or later_turn(engine, row.run_id, run)):
            continue
        row = (row.model_copy(update={"run_id": run.id}) if row is not None else
               ThreadReply(id=row_id, job_id=job.id, repo=job.thread.repo,
                           pr_number=run.pr_number, root=root, run_id=run.id))
        engine.store.put(TABLE, row_id, row, active=True)
        engine.wake(row_id)


def later_turn(engine: ThreadsContext, recorded: str, run: Run) -> bool:
    """Whether the turn the row names came after `run` (an older turn never overwrites)."""
    other = engine.get_run(recorded)
    return other is not None and (other.attempt, other.turn) > (run.attempt, run.turn)


async def advance_reply(engine: ThreadsContext, row_id: str) -> None:
    row = engine.store.get(TABLE, row_id, ThreadReply)
    job = engine.get_job(row.job_id) if row else None
    run = engine.get_run(row.run_id) if row else None
    if row is None or job is None or run is None or row.replied_run == row.run_id:
        if row is not None:
            engine.store.put(TABLE, row_id, row, active=False)
        return
    ops = await engine.github.repo_ops(job.thread)
    # This turn's own commits: from where the agent began to the head it left.
    turn = (await ops.compare(run.start_sha, run.head_sha)
            if run.start_sha and run.head_sha and run.head_sha != run.start_sha else None)
    marker = REVIEW_THREAD_MARKER.format(root=row.root)
    text = f"{marker}\n{words.thread_reply(run, turn)}"
    comment_id = row.comment_id
    if comment_id is None:  # one reply, made once (app.creates)
        claimed, plan = claim(engine, row)
        comment_id = claimed.comment_id  # another replica's, saved meanwhile
        if comment_id is None and plan != Plan.CREATE:
            comment_id = await find_reply(ops, row, marker)
        if comment_id is None and plan == Plan.LOOK_ONLY:
            raise Creating.in_flight("a reply in a review thread", claimed.posting)
    if comment_id is not None and not await edited(ops, comment_id, text):
        comment_id = None  # deleted since (or not hangar's): a new reply
        claim(engine, row)
    if comment_id is None:
        made = await ops.gh.post(
            f"{ops.base}/pulls/{row.pr_number}/comments/{row.root}/replies",
            data={"body": text})
        comment_id = made["id"]
    if verified(run, turn):
        # Only a reply saying the turn's commits passed verification may close the thread.
        config, _ = parse_repo_config(await engine.github.config_text(ops, run.base_branch))
        if config.review.resolve_threads:
            await ops.resolve_thread(row.pr_number, row.root)
    finish(engine, row, comment_id)


def verified(run: Run, turn: dict | None) -> bool:
    """The turn pushed commits and its head passed verification."""
    v = run.verification
    return bool((turn or {}).get("commits") and v and v.passed and v.head_sha == run.head_sha)


async def find_reply(ops: RepoOps, row: ThreadReply, marker: str) -> int | None:
    url = f"{ops.base}/pulls/{row.pr_number}/comments?per_page={PAGE}"
    async for comment in ops.gh.getiter(url):
        if (comment.get("in_reply_to_id") == row.root and is_hangar_reply(comment)
                and marker in (comment.get("body") or "")):
            return comment["id"]
    return None


async def edited(ops: RepoOps, comment_id: int, text: str) -> bool:
    try:
        await ops.gh.patch(f"{ops.base}/pulls/comments/{comment_id}", data={"body": text})
    except HTTPException as exc:
        if int(exc.status_code) in (403, 404):
            return False
        raise
    return True


def claim(engine: ThreadsContext, row: ThreadReply) -> tuple[ThreadReply, Plan]:
    """Mark the reply as this replica's to post, on the row as it is now, unless another
    replica's post of it may be on its way: the row as it is now (its turn may be newer
    than the step's, which says the step's own), and how to post."""
    creating = engine.creating(row.job_id)
    plan = Plan.LOOK

    def mark(fresh: ThreadReply) -> ThreadReply:
        nonlocal plan
        marks, plan = creating.claim({"reply": fresh.posting} if fresh.posting else {},
                                     "reply")
        if plan == Plan.LOOK_ONLY:
            return fresh
        return fresh.model_copy(update={"posting": marks["reply"], "updated_at": time.time()})

    return engine.store.update(TABLE, row.id, ThreadReply, mark,
                               placed=lambda _: (True, None)), plan


def finish(engine: ThreadsContext, row: ThreadReply, comment_id: int) -> None:
    """Record the reply for the turn this step said, on the row as it is now: a later turn
    that finished while the step awaited GitHub keeps the row going."""
    fresh = engine.store.get(TABLE, row.id, ThreadReply) or row
    newer = fresh.run_id != row.run_id
    engine.store.put(TABLE, row.id, fresh.model_copy(update={
        "comment_id": comment_id, "replied_run": row.run_id, "posting": None,
        "updated_at": time.time()}), active=newer)
    if newer:
        engine.wake(row.id)


def register(engine: Registrations) -> None:
    """A thread's reply as a row, active while it has a reply to make; the ends of turns
    and jobs that answer in threads."""
    from app.engine import RowKind

    # A reply is active only while it has a reply to make: due at once, and again after
    # a failed try's backoff (a lost answer, GitHub down).
    engine.register(RowKind("thread_reply", TABLE, ThreadReply, advance_reply,
                            next_at=lambda _row: 0.0, follows_rename=follows_repo(
                                lambda row: reply_id(row.repo, row.pr_number, row.root))))
    # A finished turn asked in review threads answers in each of them.
    engine.after_step("run", after_run_step)
    engine.after_step("job", after_job_step)
