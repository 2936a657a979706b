"""Pull request changes: a new head lapses approvals; a closed PR ends its work."""

from gidgethub import routing, sansio

from app.payloads import MergeGroupEvent, PullRequestEvent, parts_as

router = routing.Router()


@router.register("pull_request", action="synchronize")
async def new_head(event: sansio.Event, *, engine, parts=None, **_) -> None:
    await engine.record_pull_request(parts_as(PullRequestEvent, event.data, parts))


@router.register("pull_request", action="dequeued")
@router.register("pull_request", action="reopened")
@router.register("pull_request", action="ready_for_review")
@router.register("pull_request", action="closed")
async def closed_pr(event: sansio.Event, *, engine, parts=None, **_) -> None:
    await engine.record_pull_request(parts_as(PullRequestEvent, event.data, parts))


@router.register("merge_group")
async def merge_group(event: sansio.Event, *, engine, parts=None, **_) -> None:
    # GitHub's merge queue asks for checks on a group (hangar reports hangar / verify).
    await engine.record_event("merge_group", parts_as(MergeGroupEvent, event.data, parts))
