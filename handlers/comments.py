"""`/hangar …` comments on issues and pull requests."""

from gidgethub import routing, sansio

from app.payloads import IssueCommentEvent

router = routing.Router()


@router.register("issue_comment", action="created")
async def new_comment(event: sansio.Event, *, engine, **_) -> None:
    # Edits and deletions never trigger: a command runs once, when it is written.
    await engine.record_comment(IssueCommentEvent.model_validate(event.data))
