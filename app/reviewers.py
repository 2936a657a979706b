"""Review requests: once a hangar PR's head is verified it waits for a person's approval,
so hangar asks GitHub to request review from the code owners of the changed files (the
base's CODEOWNERS, as landing reads it) and from the repository's `land.reviewers`
(people or teams), never from the person who asked for the work when their approval
would not count; and the job's status comment names the asker once. GitHub's own
notifications then tell the reviewers to act.

One row per PR, advanced when a turn's verification of a new head passed; asking again
for the same head does nothing, so a step repeated after a crash asks once.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from gidgethub import HTTPException
from pydantic import BaseModel, Field

from app.engine import PrNotes, Registrations, RowKind
from app.github.reads import GitHubReads
from app.landing import (
    AWAITING_REVIEW,
    CODEOWNERS_PATHS,
    get,
    land_id,
    owners_of,
    parse_codeowners,
)
from app.models import Job, Run, RunStage, follows_repo, now
from app.render import reviewers as words
from app.repoconfig import CONFIG_PATH, parse_repo_config
from app.runs import ask_status_edit
from app.store import Store

TABLE = "review_ask"


class ReviewersContext(Protocol):
    """What asking for reviews uses of the engine: its own rows and the land request in
    the store; the job and its turns (who asked, which head passed); GitHub through
    `github` (the base's config and CODEOWNERS, who may write); and wake."""

    store: Store
    github: GitHubReads

    def wake(self, *row_ids: str) -> None: ...
    def get_job(self, job_id: str) -> Job | None: ...
    def get_run(self, run_id: str) -> Run | None: ...
    def runs_of(self, job_id: str) -> list[Run]: ...
    def patch_job(self, job_id: str, **fields: Any) -> Job: ...


class ReviewAsk(BaseModel):
    id: str
    job_id: str
    repo: str
    pr_number: int
    head_sha: str  # the verified head the request is for
    asked_head: str | None = None  # the head reviewers were last asked for
    users: list[str] = []  # asked, as GitHub took them
    teams: list[str] = []
    refused: str | None = None  # GitHub's answer when it took none (a 422's message)
    updated_at: float = Field(default_factory=now)


def ask_id(repo: str, pr_number: int) -> str:
    return f"ask-{repo.replace('/', '-')}-{pr_number}"


def after_run_step(engine: ReviewersContext, run_id: str) -> None:
    """A turn's verification of its head passed: the PR waits for a reviewer now."""
    run = engine.get_run(run_id)
    if (run is None or run.stage != RunStage.DONE or run.pr_number is None
            or run.verification is None or not run.verification.passed
            or run.verification.head_sha != run.head_sha or not run.head_sha):
        return
    job = engine.get_job(run.job_id)
    if job is None:
        return
    row_id = ask_id(job.thread.repo, run.pr_number)
    row = engine.store.get(TABLE, row_id, ReviewAsk)
    if row is not None and row.head_sha == run.head_sha:
        return
    row = (row.model_copy(update={"head_sha": run.head_sha}) if row is not None else
           ReviewAsk(id=row_id, job_id=job.id, repo=job.thread.repo, pr_number=run.pr_number,
                     head_sha=run.head_sha))
    engine.store.put(TABLE, row_id, row, active=True)
    engine.wake(row_id)


def candidates(owners: list[str], reviewers: list[str]) -> tuple[list[str], list[str]]:
    """(people, teams) from CODEOWNERS owners (`@login`, `@org/team`, or an email, which
    GitHub cannot be asked for) and `land.reviewers` (`login`, `org/team`, `@` optional);
    each once, in order. A team is named by its slug, as the review request takes it."""
    people: list[str] = []
    teams: list[str] = []
    for name in [*owners, *reviewers]:
        name = name.strip().lstrip("@")
        if not name or "@" in name:
            continue  # an email owner
        if "/" in name:
            slug = name.split("/", 1)[1]
            if slug.lower() not in (t.lower() for t in teams):
                teams.append(slug)
        elif name.lower() not in (p.lower() for p in people):
            people.append(name)
    return people, teams


def code_owners(codeowners: str | None, changed_files: list[str]) -> list[str]:
    """The owners of the changed files (the last matching CODEOWNERS line of each)."""
    rules = parse_codeowners(codeowners or "")
    found: list[str] = []
    for path in changed_files:
        rule = owners_of(path, rules)
        for owner in rule.owners if rule else ():
            if owner not in found:
                found.append(owner)
    return found


def askers(engine: ReviewersContext, job: Job, pr_number: int) -> set[str]:
    """Who asked for the work on this PR: the job and every turn on it."""
    runs: list[Run] = [r for r in engine.runs_of(job.id) if r.pr_number == pr_number]
    return {job.requested_by.lower(), *(r.requested_by.lower() for r in runs if r.requested_by)}


async def advance_ask(engine: ReviewersContext, row_id: str) -> None:
    row = engine.store.get(TABLE, row_id, ReviewAsk)
    job = engine.get_job(row.job_id) if row else None
    if row is None or job is None or row.asked_head == row.head_sha:
        if row is not None:
            engine.store.put(TABLE, row_id, row, active=False)
        return
    ops = await engine.github.repo_ops(job.thread)
    # The verified turn says the head, the base and the files: no read of the PR (a PR
    # closed meanwhile makes GitHub refuse the request, which is recorded).
    run = next((r for r in engine.runs_of(job.id)
                if r.pr_number == row.pr_number and r.head_sha == row.head_sha and r.compare),
               None)
    if run is None:
        return finish(engine, row)
    base = run.base_branch
    compare = (run.compare or {}) if run else {}
    files = [name for f in compare.get("files") or []
             for name in (f.get("filename"), f.get("previous_filename")) if name]
    # Read at the compare's base commit, as landing reads them: kept for that commit (a
    # 404 too), so asking again for a later head costs no second read.
    base_sha = compare.get("base_sha")
    await engine.github.read_at(ops, base_sha, [CONFIG_PATH, *CODEOWNERS_PATHS])
    config, _ = parse_repo_config(await engine.github.config_text(ops, base, base_sha))
    codeowners = None
    for path in CODEOWNERS_PATHS:
        codeowners = await engine.github.config_text(ops, base, base_sha, path=path)
        if codeowners is not None:
            break
    people, teams = candidates(code_owners(codeowners, files), config.land.reviewers)
    # Never the one whose approval would not count, nor someone who cannot approve.
    excluded = askers(engine, job, row.pr_number) if config.land.forbid_self_approval else set()
    people = [p for p in people
              if p.lower() not in excluded and await engine.github.may_write(ops, p)]
    refused = None
    if people or teams:
        try:
            await ops.gh.post(f"{ops.base}/pulls/{row.pr_number}/requested_reviewers",
                              data={"reviewers": people, "team_reviewers": teams})
        except HTTPException as exc:
            if int(exc.status_code) != 422:
                raise
            refused = str(exc) or "422"
    finish(engine, row, users=[] if refused else people, teams=[] if refused else teams,
           refused=refused)
    ask_status_edit(engine, job.id)  # its status comment names the asker now


def finish(engine: ReviewersContext, row: ReviewAsk, **fields: object) -> None:
    """Record the ask for the head this step read, on the row as it is now: a newer
    verified head that came while the step awaited GitHub keeps the row going."""
    fresh = engine.store.get(TABLE, row.id, ReviewAsk) or row
    newer = fresh.head_sha != row.head_sha
    engine.store.put(TABLE, row.id, fresh.model_copy(update={
        **fields, "asked_head": row.head_sha, "updated_at": time.time()}), active=newer)
    if newer:
        engine.wake(row.id)


def status_notes(engine: ReviewersContext, repo: str, pr_number: int) -> PrNotes:
    """While the PR waits for a reviewer: the asker, named once, and who was asked."""
    row = engine.store.get(TABLE, ask_id(repo, pr_number), ReviewAsk)
    if row is None or row.asked_head != row.head_sha:
        return PrNotes()
    land = get(engine, land_id(repo, pr_number))
    if land is not None and land.state not in AWAITING_REVIEW:
        return PrNotes()  # approved and landing, landed, or stopped: landing's note says
    job = engine.get_job(row.job_id)
    if job is None:
        return PrNotes()
    return PrNotes((words.waiting_note(job.requested_by, pr_number, row.users, row.teams,
                                       refused=row.refused),))


def register(engine: Registrations) -> None:
    """A verified PR's review request as a row, woken by its verified head; the asker
    named in the job's status comment."""
    engine.register(RowKind("review_ask", TABLE, ReviewAsk, advance_ask,
                            follows_rename=follows_repo(
                                lambda row: ask_id(row.repo, row.pr_number))))
    # A verified head waits for a person: hangar asks its reviewers.
    engine.after_step("run", after_run_step)
    engine.status_notes(status_notes)
