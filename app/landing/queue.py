"""Landing through GitHub's merge queue: on a branch whose rules require one, hangar
enqueues the approved pull request (GraphQL `enqueuePullRequest`), reports
`hangar / verify` on each merge group's head (reusing the PR head's verification when the
group holds exactly that head on the same base, else verifying the group's commit in a
clean sandbox), and follows the queue's outcome: merged, removed, failed.

A merge group is a row (`MergeGroup`), made by the `merge_group` event and advanced by its
step; the land request stays `merging` while its PR waits in the queue."""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from app.commands import job_for_pr
from app.landing.rules import VERIFY_CHECK
from app.models import Run, RunKind, RunStage, RunState, Thread, Verification, now
from app.render import landing as words

if TYPE_CHECKING:
    from app.intake.payloads import MergeGroupEvent
    from app.landing.context import LandingContext

GROUP_REF = re.compile(r"^(?:refs/heads/)?gh-readonly-queue/.+/pr-(\d+)-[0-9a-f]{40}$")


class MergeGroup(BaseModel):
    """One merge group GitHub asked checks of: hangar's `hangar / verify` on its head."""

    id: str
    repo: str
    installation_id: int
    head_sha: str
    head_ref: str
    base_ref: str
    base_sha: str
    pr_number: int
    job_id: str
    state: str = "new"  # new → verifying (a run of its own) → done; or destroyed
    run_id: str | None = None
    reused: str | None = None  # the PR head whose verification stood for the group
    destroyed: str | None = None  # GitHub's reason: merged, invalidated, dequeued
    due_at: float = 0.0
    updated_at: float = Field(default_factory=now)

    @property
    def active(self) -> bool:
        return self.state not in ("done", "destroyed")


def group_id(repo: str, head_sha: str) -> str:
    return f"group-{repo.replace('/', '-')}-{head_sha}"


def save_group(engine: LandingContext, group: MergeGroup) -> None:
    group.updated_at = time.time()
    engine.store.put("merge_group", group.id, group, active=group.active)


def record_merge_group(engine: LandingContext, event: MergeGroupEvent) -> None:
    """`merge_group` checks_requested: a row that reports hangar / verify on the group;
    destroyed: that row ends (the PR's own events say whether it merged)."""
    mg = event.merge_group
    found = GROUP_REF.match(mg.head_ref)
    if found is None or event.installation is None:
        return
    repo = event.repository.full_name
    row_id = group_id(repo, mg.head_sha)
    existing = engine.store.get("merge_group", row_id, MergeGroup)
    if event.action == "destroyed":
        if existing is not None and existing.active:
            existing.state, existing.destroyed = "destroyed", event.reason
            save_group(engine, existing)
        return
    if event.action != "checks_requested" or existing is not None:
        return
    job = job_for_pr(engine, repo, int(found.group(1)))
    if job is None:
        return  # not hangar's pull request: another App's checks are its own
    save_group(engine, MergeGroup(
        id=row_id, repo=repo, installation_id=event.installation.id, head_sha=mg.head_sha,
        head_ref=mg.head_ref.removeprefix("refs/heads/"),
        base_ref=mg.base_ref.removeprefix("refs/heads/"), base_sha=mg.base_sha,
        pr_number=int(found.group(1)), job_id=job.id))
    engine.wake(row_id)


def reusable(engine: LandingContext, group: MergeGroup) -> Verification | None:
    """hangar's passed verification of a PR head the group holds exactly: the head was up
    to date with the very base commit the group is built on, so the group's tree is the
    head's (whatever the queue's merge method)."""
    for run in reversed(engine.runs_of(group.job_id)):
        compare = run.compare or {}
        verified = run.verification
        if (run.pr_number == group.pr_number and verified is not None
                and verified.passed is True and verified.head_sha == run.head_sha
                and run.base_branch == group.base_ref
                and compare.get("base_sha") == group.base_sha
                and compare.get("behind_by") == 0):
            return verified
    return None


async def advance_group(engine: LandingContext, row_id: str) -> None:
    group = engine.store.get("merge_group", row_id, MergeGroup)
    if group is None or not group.active:
        return
    if group.state == "verifying":
        run = engine.get_run(group.run_id or "")
        if run is None or run.finished:
            group.state = "done"
            save_group(engine, group)
        return
    job = engine.existing_job(group.job_id)
    ops = await engine.github.repo_ops(Thread(repo=group.repo, number=job.thread.number,
                                       installation_id=group.installation_id))
    reused = reusable(engine, group)
    if reused is not None:
        await ops.upsert_check_run(
            VERIFY_CHECK, group.head_sha, group.id, status="completed", conclusion="success",
            output=words.group_reused_output(reused.command, reused.head_sha,
                                             group.base_ref, group.base_sha))
        group.state, group.reused = "done", reused.head_sha
        save_group(engine, group)
        return
    # The group's commit is new: verify it in a clean sandbox, as any head.
    last = max((r for r in engine.runs_of(group.job_id) if r.pr_number == group.pr_number),
               key=lambda r: r.turn)
    run = engine.save_run(Run(
        job_id=group.job_id, attempt=last.attempt, turn=last.turn, kind=RunKind.VERIFY,
        base_branch=group.base_ref, base_sha=group.base_sha, branch=group.head_ref,
        head_sha=group.head_sha, state=RunState.EXITED, stage=RunStage.VERIFYING,
        agent=last.agent))
    group.state, group.run_id = "verifying", run.id
    save_group(engine, group)
    engine.wake(run.id)


def wake_group(engine: LandingContext, run_id: str) -> None:
    """A run step ended: the merge group verifying with it looks again."""
    for group in engine.store.all("merge_group", MergeGroup, active=True):
        if group.run_id == run_id:
            engine.wake(group.id)
