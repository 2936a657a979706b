"""What auto-fix hears: CI finishing on a head (a failure may want a fix turn), a review
asking for changes, a push to a hangar PR (a human's pauses it) and its close."""

from gidgethub import routing, sansio

from app import autofix
from app.intake.payloads import (
    CheckRunEvent,
    CheckSuiteEvent,
    DeploymentStatusEvent,
    PullRequestEvent,
    PullRequestReviewEvent,
    StatusEvent,
    parts_as,
)

router = routing.Router()


@router.register("pull_request_review", action="submitted")
async def new_review(event: sansio.Event, *, engine, parts=None, **_) -> None:
    # A review asking for changes starts a turn (unless it holds a `/hangar` command).
    autofix.on_review(engine, parts_as(PullRequestReviewEvent, event.data, parts))
    engine.wake()


@router.register("pull_request", action="synchronize")
@router.register("pull_request", action="closed")
async def pr_changed(event: sansio.Event, *, engine, parts=None, **_) -> None:
    autofix.on_pull_request(engine, parts_as(PullRequestEvent, event.data, parts))
    engine.wake()


@router.register("check_run", action="completed")
async def finished_check(event: sansio.Event, *, engine, parts=None, **_) -> None:
    check = parts_as(CheckRunEvent, event.data, parts)
    ours = (check.check_run.app or {}).get("id") == engine.settings.app_id
    autofix.on_ci(engine, check.repository.full_name, check.check_run.head_sha,
                  check=check.check_run.name, ours=ours)
    engine.wake()


@router.register("check_suite", action="completed")
async def finished_suite(event: sansio.Event, *, engine, parts=None, **_) -> None:
    suite = parts_as(CheckSuiteEvent, event.data, parts)
    head_sha = suite.check_suite.get("head_sha")
    ours = (suite.check_suite.get("app") or {}).get("id") == engine.settings.app_id
    if head_sha:
        autofix.on_ci(engine, suite.repository.full_name, head_sha, ours=ours)
    engine.wake()


@router.register("status")
async def new_status(event: sansio.Event, *, engine, parts=None, **_) -> None:
    status = parts_as(StatusEvent, event.data, parts)
    if status.state != "pending":
        autofix.on_ci(engine, status.repository.full_name, status.sha)
    engine.wake()


@router.register("deployment_status")
async def deployment_status(event: sansio.Event, *, engine, parts=None, **_) -> None:
    status = parts_as(DeploymentStatusEvent, event.data, parts)
    autofix.on_ci(engine, status.repository.full_name, status.deployment.sha)
    engine.wake()
