"""`/hangar …` comments on issues and pull requests."""

from gidgethub import routing, sansio

from app.payloads import IssueCommentEvent, parts_as

router = routing.Router()


@router.register("issue_comment", action="created")
async def new_comment(event: sansio.Event, *, engine, parts=None, **_) -> None:
    # Edits and deletions never trigger: a command runs once, when it is written.
    await engine.record_comment(parts_as(IssueCommentEvent, event.data, parts))
