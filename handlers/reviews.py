"""Reviews on pull requests: approvals feed landing, change requests feed auto-fix, and
`/hangar …` in a review body or a line comment is a command."""

from gidgethub import routing, sansio

from app.payloads import (
    PullRequestReviewEvent,
    ReviewCommentEvent,
    ReviewThreadEvent,
    parts_as,
)

router = routing.Router()


@router.register("pull_request_review", action="submitted")
async def new_review(event: sansio.Event, *, engine, parts=None, **_) -> None:
    await engine.record_review(parts_as(PullRequestReviewEvent, event.data, parts))


@router.register("pull_request_review", action="dismissed")
async def dismissed_review(event: sansio.Event, *, engine, parts=None, **_) -> None:
    await engine.record_review(parts_as(PullRequestReviewEvent, event.data, parts))


@router.register("pull_request_review_comment", action="created")
async def new_review_comment(event: sansio.Event, *, engine, parts=None, **_) -> None:
    # A `/hangar …` line in a comment on the diff is a command like any other.
    await engine.record_review_comment(parts_as(ReviewCommentEvent, event.data, parts))


@router.register("pull_request_review_thread")
async def thread_resolved(event: sansio.Event, *, engine, parts=None, **_) -> None:
    # A conversation resolved (or not): a landing waiting for it looks again.
    await engine.record_event("review_thread", parts_as(ReviewThreadEvent, event.data, parts))
