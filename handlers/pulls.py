"""Pull request changes: a new head lapses approvals; a closed PR ends its work."""

from gidgethub import routing, sansio

from app.payloads import PullRequestEvent

router = routing.Router()


@router.register("pull_request", action="synchronize")
async def new_head(event: sansio.Event, *, engine, **_) -> None:
    await engine.record_pull_request(PullRequestEvent.model_validate(event.data))


@router.register("pull_request", action="closed")
async def closed_pr(event: sansio.Event, *, engine, **_) -> None:
    await engine.record_pull_request(PullRequestEvent.model_validate(event.data))
