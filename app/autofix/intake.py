"""What auto-fix does when the engine records an event or ends a run step.

The engine calls these (app/wiring.py registers them) for the events auto-fix hears of,
beside landing's own listeners: one's failure never keeps the other from hearing. They
only change the row (and save an intent for a change request); the step acts later."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from app import commands  # the `/hangar` grammar, not this folder's commands.py
from app.autofix.rows import ensure_row, get_row, patch, row_id, save
from app.autofix.rules import MAX_JUDGED, VERIFY_CHECK
from app.autofix.steps import last_turn
from app.commands import job_for_pr
from app.models import AutofixRow, Intent, Job, Run, RunStage, Thread

if TYPE_CHECKING:
    from app.autofix.context import AutofixContext
    from app.intake.payloads import PullRequestEvent, PullRequestReviewEvent


def on_review(engine: AutofixContext, event: PullRequestReviewEvent) -> None:
    """A review asking for changes starts a turn; one that holds a `/hangar` command is
    that command instead."""
    if (event.action == "dismissed" or event.review.state.lower() != "changes_requested"
            or commands.parse(event.review.body or "")):
        return
    job = job_for_pr(engine, event.repository.full_name, event.pull_request.number)
    if job is not None:
        record_change_request(engine, job, event)


def on_pull_request(engine: AutofixContext, event: PullRequestEvent) -> None:
    if event.action not in ("closed", "synchronize"):
        return
    job = job_for_pr(engine, event.repository.full_name, event.number)
    if job is None:
        return
    if event.action == "closed":
        record_closed(engine, job.thread.repo, event.number)
    else:
        record_push(engine, job, event)


def on_ci(engine: AutofixContext, repo: str, head_sha: str, *, check: str | None = None,
          ours: bool = False) -> None:
    # Of hangar's own checks only `verify` is evidence for auto-fix (and the end of a
    # turn wakes it too): its agent and land checks and its suite tell it nothing.
    if not ours or check == VERIFY_CHECK:
        record_ci(engine, repo, head_sha)


def after_run_step(engine: AutofixContext, run_id: str) -> None:
    """A turn is over once its verification is done: look at the head's CI now (a fix
    waits for the turn)."""
    run = engine.get_run(run_id)
    if run is None or run.stage != RunStage.DONE or run.verification is None:
        return
    job = engine.get_job(run.job_id)
    if job is not None and run.head_sha:
        record_ci(engine, job.thread.repo, run.head_sha)


def record_ci(engine: AutofixContext, repo: str, head_sha: str) -> None:
    """A check or status finished on head_sha: look again at the PR whose head it is.

    Only that PR: a busy repository's CI must not make every open PR ask GitHub again. A
    head hangar has not heard of yet is looked at when its push event comes (or by the
    slow poll)."""

    prs = set()
    for run in engine.store.find("run", Run, head_sha=head_sha):
        if run.pr_number:
            job = engine.get_job(run.job_id)
            if job is not None and job.thread.repo == repo:
                ensure_row(engine, job, run.pr_number)
                prs.add(run.pr_number)
    for row in engine.store.all("autofix", AutofixRow, active=True):
        if row.repo == repo and (row.pr_number in prs or head_sha in row.pushed_heads):
            patch(engine, row.id, due_at=0)


def record_closed(engine: AutofixContext, repo: str, pr_number: int) -> None:
    """GitHub said the PR was closed (or merged): nothing to fix there, no look needed.
    Any later event on it (a reopen, a push, CI) makes the row active again."""
    row = get_row(engine, row_id(repo, pr_number))
    if row is not None:
        save(engine, row, active=False)


def record_push(engine: AutofixContext, job: Job, event: PullRequestEvent) -> None:
    row = ensure_row(engine, job, event.number)
    last = last_turn(engine, job, event.number)  # a push makes its answer stale
    fields: dict[str, Any] = {"due_at": 0, "turn_seen": last.id if last else row.turn_seen,
                              "pushed_heads": [
        *row.pushed_heads[-MAX_JUDGED:], event.pull_request.head.sha],
        "unknown_heads": {h: t for h, t in row.unknown_heads.items()
                          if h != event.pull_request.head.sha}}
    if not event.sender.is_bot:
        fields["last_human_push_at"] = time.time()
        fields["pushers"] = list(dict.fromkeys([*row.pushers, event.sender.login]))
    patch(engine, row.id, **fields)


def record_change_request(engine: AutofixContext, job: Job, event: PullRequestReviewEvent) -> None:
    """A review asking for changes starts a turn that addresses that review only."""
    row = ensure_row(engine, job, event.pull_request.number)
    if event.review.id in row.seen_reviews or event.review.user.is_bot:
        return
    patch(engine, row.id, seen_reviews=[*row.seen_reviews, event.review.id])

    intent_id = f"review-{event.review.id}"
    if engine.store.get("intent", intent_id, Intent) or event.installation is None:
        return
    engine.save_intent(Intent(
        id=intent_id, comment_id=0, author=event.review.user.login, command="review_turn",
        thread=Thread(repo=job.thread.repo, number=event.pull_request.number,
                      installation_id=event.installation.id, is_pr=True),
        args={"review_id": event.review.id, "body": event.review.body or ""},
    ))
