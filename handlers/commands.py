"""What `/hangar` commands hear: a comment on an issue or a pull request, a review's body,
a line comment on a review's diff, a label added to an issue. Each `/hangar …` line
becomes an intent, once; so does each label added (the repository's trigger label starts
a job). Writing an intent wakes the engine for that row alone; a comment with no command
wakes nothing."""

from gidgethub import routing, sansio

from app import commands
from app.intake.payloads import (
    IssueCommentEvent,
    IssuesEvent,
    PullRequestReviewEvent,
    ReviewCommentEvent,
    parts_as,
)

router = routing.Router()


@router.register("issue_comment", action="created")
async def new_comment(event: sansio.Event, *, engine, parts=None, **_) -> None:
    # Edits and deletions never trigger: a command runs once, when it is written.
    commands.record_comment(engine, parts_as(IssueCommentEvent, event.data, parts))


@router.register("issues", action="labeled")
async def labeled_issue(event: sansio.Event, *, engine, parts=None, **_) -> None:
    # Whether it is the trigger label (the repository's config) is read by the intent's step.
    commands.record_label(engine, parts_as(IssuesEvent, event.data, parts), event.delivery_id)


@router.register("pull_request_review", action="submitted")
async def new_review(event: sansio.Event, *, engine, parts=None, **_) -> None:
    commands.record_review_body(engine, parts_as(PullRequestReviewEvent, event.data, parts))


@router.register("pull_request_review_comment", action="created")
async def new_review_comment(event: sansio.Event, *, engine, parts=None, **_) -> None:
    # A `/hangar …` line in a comment on the diff is a command like any other.
    commands.record_review_comment(engine, parts_as(ReviewCommentEvent, event.data, parts))
