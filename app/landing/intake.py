"""What landing does when the engine records an event: note a review, a push or a close,
a finished check on the row, and wake it. Nothing here awaits: the step does the work."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.intents import job_for_pr
from app.landing.rows import (
    RESTARTABLE,
    LandRequest,
    LandState,
    ReviewRecord,
    ensure_request,
    get,
    land_id,
    move,
    save,
    wake_request,
)
from app.landing.rules import LAND_CHECK, LandReason, stopped_by_checks
from app.render.reasons import Why

if TYPE_CHECKING:
    from app.engine import StepContext
    from app.payloads import PullRequestEvent, PullRequestReviewEvent


def record_review(engine: StepContext, event: PullRequestReviewEvent) -> None:
    job = job_for_pr(engine, event.repository.full_name, event.pull_request.number)
    if job is None:
        return
    request = ensure_request(engine, job, event.pull_request.number)
    existing = next((r for r in request.reviews if r.id == event.review.id), None)
    # A dismissal names the review it dismisses: mark it; a redelivery changes nothing.
    if event.action == "dismissed" and existing is not None and not existing.dismissed:
        existing.dismissed = True
        wake_request(request)
        save(engine, request)
        return
    if existing is not None:
        return
    state = event.review.state.lower()
    request.reviews.append(ReviewRecord(
        id=event.review.id, user=event.review.user.login, user_type=event.review.user.type,
        state=state, commit_id=event.review.commit_id, dismissed=event.action == "dismissed"))
    if state == "approved" and request.state in RESTARTABLE:
        move(engine, request, LandState.QUEUED, Why(LandReason.NEW_APPROVAL))
    wake_request(request)
    save(engine, request)


def record_pull_request(engine: StepContext, event: PullRequestEvent) -> None:
    job = job_for_pr(engine, event.repository.full_name, event.number)
    if job is None:
        return
    request = get(engine, land_id(job.thread.repo, event.number))
    if request:  # a close or a merge is the step's to record: it reads the PR and shows it
        wake_request(request)
        save(engine, request)
    if event.action == "synchronize":
        if request and request.state in RESTARTABLE:
            move(engine, request, LandState.QUEUED, Why(LandReason.NEW_HEAD))


def record_ci(
    engine: StepContext, repo: str, head_sha: str, *, check: str | None = None, ours: bool = False
) -> None:
    """A check or status completed on head_sha: wake the landings of that head, and look
    again at one that checks stopped (a re-run may have passed). hangar's own land check
    and check suite say nothing new about CI: looking again on them would loop."""
    says_ci = not (ours and check in (None, LAND_CHECK))
    for request in engine.store.all("land", LandRequest, active=True):
        if request.repo == repo and request.head_sha == head_sha:
            if says_ci:
                wake_request(request)
            else:
                request.due_at = 0
            if says_ci and stopped_by_checks(request):
                move(engine, request, LandState.QUEUED, Why(LandReason.CHECKS_AGAIN))
            save(engine, request)
