"""Reviews on pull requests: approvals feed landing, change requests feed auto-fix."""

from gidgethub import routing, sansio

from app.payloads import PullRequestReviewEvent

router = routing.Router()


@router.register("pull_request_review", action="submitted")
async def new_review(event: sansio.Event, *, engine, **_) -> None:
    await engine.record_review(PullRequestReviewEvent.model_validate(event.data))


@router.register("pull_request_review", action="dismissed")
async def dismissed_review(event: sansio.Event, *, engine, **_) -> None:
    await engine.record_review(PullRequestReviewEvent.model_validate(event.data))
