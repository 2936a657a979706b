"""What auto-fix hears: CI finishing on a head (a failure may want a fix turn), a review
asking for changes, a push to a hangar PR (a human's pauses it) and its close."""

from gidgethub import routing, sansio

from app import autofix
from app.intake.payloads import (
    PullRequestEvent,
    PullRequestReviewEvent,
    parts_as,
)
from handlers.ci import listen_for_ci

router = routing.Router()
listen_for_ci(router, autofix.on_ci, concern="autofix")


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




