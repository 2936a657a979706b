"""What landing does when the engine records an event: note a review, a push or a close,
a finished check on the row, and wake it. Nothing here awaits: the step does the work."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.commands import job_for_pr
from app.landing.overlaps import wake_overlaps
from app.landing.rows import (
    RESTARTABLE,
    LandRequest,
    LandState,
    ReviewRecord,
    ensure_request,
    fresh,
    get,
    land_id,
    move,
    save,
    wake_request,
)
from app.landing.rules import LAND_CHECK, LandReason, stopped_by_checks
from app.models import Intent, Job, Thread
from app.render.landing import RESOLVE_ACTION
from app.render.reasons import Why

if TYPE_CHECKING:
    from app.intake.payloads import (
        CheckRunEvent,
        CheckSuiteEvent,
        PullRequestEvent,
        PullRequestReviewEvent,
        ReviewThreadEvent,
        RulesChangedEvent,
    )
    from app.landing.context import LandingContext


def record_review(engine: LandingContext, event: PullRequestReviewEvent) -> None:
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
    request.quiet = False
    wake_request(request)  # before the move's write: the review and its wake are one write
    if state == "approved" and request.state in RESTARTABLE:
        if request.state == LandState.EXPIRED:
            request.policy = None  # a new request: the policy in force now is kept
        move(engine, request, LandState.QUEUED, Why(LandReason.NEW_APPROVAL))
    save(engine, request)


def record_pull_request(engine: LandingContext, event: PullRequestEvent) -> None:
    job = job_for_pr(engine, event.repository.full_name, event.number)
    if job is None:
        return
    if event.action in ("closed", "reopened", "synchronize", "edited"):
        # the open hangar PRs on the base, or one's files, changed: look at overlaps again
        wake_overlaps(engine, repo=job.thread.repo, base=event.pull_request.base.ref,
                      installation_id=job.thread.installation_id, clone_url=job.clone_url,
                      closed=event.number if event.action == "closed" else None)
    request = get(engine, land_id(job.thread.repo, event.number))
    if request:  # a close or a merge is the step's to record: it reads the PR and shows it
        wake_request(request)
        save(engine, request)
    if event.action == "synchronize":
        if request and request.state in RESTARTABLE:
            move(engine, request, LandState.QUEUED, Why(LandReason.NEW_HEAD))
    if event.action == "dequeued" and request is not None:
        request.dequeued = event.reason  # the queue's word, said when the step sees it
        save(engine, request)
    if event.action == "reopened" and request and request.state == LandState.CANCELLED \
            and request.reason_code == LandReason.PR_CLOSED:
        # Closing ended the request, not the wish: a reopened PR lands again once approved.
        move(engine, request, LandState.QUEUED, Why(LandReason.REOPENED))


def after_run_step(engine: LandingContext, run_id: str) -> None:
    """A turn or a verification of a hangar PR finished: the PR's files are known (its
    overlaps with the base's other open hangar PRs are looked at), and a verified head
    is looked at by landing (auto-land may approve it; a waiting request moves on)."""
    run = engine.get_run(run_id)
    if run is None or not run.finished or run.pr_number is None:
        return
    job = engine.get_job(run.job_id)
    if job is None:
        return
    wake_overlaps(engine, repo=job.thread.repo, base=run.base_branch,
                  installation_id=job.thread.installation_id, clone_url=job.clone_url)
    if run.verification is None or run.verification.passed is not True:
        return
    fresh(wake_verified, engine, job, run.pr_number)


def wake_verified(engine: LandingContext, job: Job, pr_number: int) -> None:
    request = ensure_request(engine, job, pr_number, quiet=True)
    if request.active:
        wake_request(request)
        save(engine, request)


def record_land_rerun(engine: LandingContext, event: CheckRunEvent) -> None:
    """"Re-run" on check run `hangar / land`: the request is looked at again from the start."""
    if event.action != "rerequested" or event.check_run.name != LAND_CHECK:
        return
    request = get(engine, event.check_run.external_id or "")
    if request is None or request.repo != event.repository.full_name:
        return
    wake_request(request)
    if request.state in RESTARTABLE:
        move(engine, request, LandState.QUEUED, Why(LandReason.RERUN))
    save(engine, request)


def record_resolve_button(engine: LandingContext, event: CheckRunEvent) -> None:
    """"Resolve conflicts" on check run `hangar / land`: as `/hangar resolve` from whoever
    pressed it (their write access is checked like a comment's)."""
    action = (event.requested_action or {}).get("identifier")
    if (event.action != "requested_action" or event.check_run.name != LAND_CHECK
            or action != RESOLVE_ACTION or event.installation is None or event.sender.is_bot):
        return
    request = get(engine, event.check_run.external_id or "")
    if request is None or request.repo != event.repository.full_name:
        return
    intent_id = f"check-{event.check_run.id}-resolve-{event.check_run.head_sha[:12]}"
    if engine.store.get("intent", intent_id, Intent):
        return
    thread = Thread(repo=request.repo, number=request.pr_number,
                    installation_id=event.installation.id, is_pr=True)
    engine.save_intent(Intent(id=intent_id, thread=thread, comment_id=0,
                              author=event.sender.login, command="resolve",
                              args={"prompt": ""}))


def record_suite_rerun(engine: LandingContext, event: CheckSuiteEvent) -> None:
    """"Re-run all checks" on hangar's suite: landings of that head look again."""
    head = event.check_suite.get("head_sha")
    if head:
        record_ci(engine, event.repository.full_name, head)


def record_thread(engine: LandingContext, event: ReviewThreadEvent) -> None:
    """A conversation was resolved or unresolved: a landing waiting for it looks again."""
    request = get(engine, land_id(event.repository.full_name, event.pull_request.number))
    if request is not None and request.active:
        wake_request(request)
        save(engine, request)


def record_gate_changed(engine: LandingContext, event: RulesChangedEvent) -> None:
    """A ruleset or classic protection changed: forget what was kept, look again."""
    repo = event.repository.full_name if event.repository else None
    engine.github.forget_protection(repo)
    for request in engine.store.all("land", LandRequest, active=True):
        if repo is None or request.repo == repo:
            wake_request(request)
            if request.state == LandState.REJECTED:
                move(engine, request, LandState.QUEUED, Why(LandReason.GATE_CHANGED))
            save(engine, request)


def record_ci(
    engine: LandingContext, repo: str, head_sha: str, *, check: str | None = None,
    ours: bool = False,
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
