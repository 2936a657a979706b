"""What landing hears: reviews (an approval bound to its commit), a pull request's new
head, close, reopen or dequeue, CI finishing on a head, "Re-run" and "Resolve conflicts"
on `hangar / land`, a conversation resolved, a merge group to check, and a change to what
guards a branch."""

from typing import Any

from gidgethub import routing, sansio

from app import landing
from app.intake.payloads import (
    CheckRunEvent,
    CheckSuiteEvent,
    MergeGroupEvent,
    PullRequestEvent,
    PullRequestReviewEvent,
    ReviewThreadEvent,
    RulesChangedEvent,
    parts_as,
)
from handlers.ci import listen_for_ci

router = routing.Router()


def record_ci(*args: Any, **kwargs: Any) -> None:
    landing.fresh(landing.record_ci, *args, **kwargs)


listen_for_ci(router, record_ci, concern="landing")


@router.register("pull_request_review", action="submitted")
@router.register("pull_request_review", action="dismissed")
async def new_review(event: sansio.Event, *, engine, parts=None, **_) -> None:
    landing.fresh(landing.record_review, engine,
                  parts_as(PullRequestReviewEvent, event.data, parts))
    engine.wake()


@router.register("pull_request", action="synchronize")
@router.register("pull_request", action="dequeued")
@router.register("pull_request", action="reopened")
@router.register("pull_request", action="ready_for_review")
@router.register("pull_request", action="closed")
async def pr_changed(event: sansio.Event, *, engine, parts=None, **_) -> None:
    landing.fresh(landing.record_pull_request, engine,
                  parts_as(PullRequestEvent, event.data, parts))
    engine.wake()


@router.register("check_run", action="rerequested")
async def land_rerun(event: sansio.Event, *, engine, parts=None, **_) -> None:
    # "Re-run" on check run `hangar / land` looks at the request again.
    landing.fresh(landing.record_land_rerun, engine, parts_as(CheckRunEvent, event.data, parts))
    engine.wake()


@router.register("check_run", action="requested_action")
async def land_button(event: sansio.Event, *, engine, parts=None, **_) -> None:
    # "Resolve conflicts" on check run `hangar / land`: a turn that resolves them.
    landing.fresh(landing.record_resolve_button, engine,
                  parts_as(CheckRunEvent, event.data, parts))
    engine.wake()


@router.register("check_suite", action="rerequested")
async def rerun_all_checks(event: sansio.Event, *, engine, parts=None, **_) -> None:
    # "Re-run all checks" on hangar's suite: landings of that head look again.
    landing.fresh(landing.record_suite_rerun, engine, parts_as(CheckSuiteEvent, event.data, parts))
    engine.wake()


@router.register("pull_request_review_thread")
async def thread_resolved(event: sansio.Event, *, engine, parts=None, **_) -> None:
    # A conversation resolved (or not): a landing waiting for it looks again.
    landing.fresh(landing.record_thread, engine, parts_as(ReviewThreadEvent, event.data, parts))
    engine.wake()


@router.register("merge_group")
async def merge_group(event: sansio.Event, *, engine, parts=None, **_) -> None:
    # GitHub's merge queue asks for checks on a group (hangar reports hangar / verify).
    landing.fresh(landing.record_merge_group, engine, parts_as(MergeGroupEvent, event.data, parts))
    engine.wake()


@router.register("branch_protection_rule")
@router.register("repository_ruleset")
async def gate_changed(event: sansio.Event, *, engine, parts=None, **_) -> None:
    # The cached classic protection (or its absence) is stale; waiting landings look again.
    landing.fresh(landing.record_gate_changed, engine,
                  parts_as(RulesChangedEvent, event.data, parts))
    engine.wake()
