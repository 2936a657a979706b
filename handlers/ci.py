"""CI finishing on a head, as every concern that waits for CI hears it: a check run or a
check suite completed, a commit status no longer pending, a deployment's status. Each
concern gives the function its intake takes it with; the handlers are named after it."""

from __future__ import annotations

from typing import Protocol

from gidgethub import routing, sansio

from app.intake.payloads import (
    CheckRunEvent,
    CheckSuiteEvent,
    DeploymentStatusEvent,
    StatusEvent,
    parts_as,
)


class OnCi(Protocol):
    def __call__(self, engine, repo: str, head_sha: str, *, check: str | None = None,
                 ours: bool = False) -> None: ...


def listen_for_ci(router: routing.Router, on_ci: OnCi, *, concern: str) -> None:
    """Register on `router` the handlers that hand CI's results on `head_sha` to on_ci
    (`ours`: the check is hangar's own App's); `concern` names them in logs and metrics."""

    @router.register("check_run", action="completed")
    async def finished_check(event: sansio.Event, *, engine, parts=None, **_) -> None:
        check = parts_as(CheckRunEvent, event.data, parts)
        ours = (check.check_run.app or {}).get("id") == engine.settings.app_id
        on_ci(engine, check.repository.full_name, check.check_run.head_sha,
              check=check.check_run.name, ours=ours)
        engine.wake()

    @router.register("check_suite", action="completed")
    async def finished_suite(event: sansio.Event, *, engine, parts=None, **_) -> None:
        suite = parts_as(CheckSuiteEvent, event.data, parts)
        head_sha = suite.check_suite.get("head_sha")
        ours = (suite.check_suite.get("app") or {}).get("id") == engine.settings.app_id
        if head_sha:
            on_ci(engine, suite.repository.full_name, head_sha, ours=ours)
        engine.wake()

    @router.register("status")
    async def new_status(event: sansio.Event, *, engine, parts=None, **_) -> None:
        status = parts_as(StatusEvent, event.data, parts)
        if status.state != "pending":
            on_ci(engine, status.repository.full_name, status.sha)
        engine.wake()

    @router.register("deployment_status")
    async def deployment_status(event: sansio.Event, *, engine, parts=None, **_) -> None:
        # A deployment a ruleset requires may have succeeded: what waits on the head looks.
        status = parts_as(DeploymentStatusEvent, event.data, parts)
        on_ci(engine, status.repository.full_name, status.deployment.sha)
        engine.wake()

    for handler in (finished_check, finished_suite, new_status, deployment_status):
        handler.__module__ = f"handlers.{concern}"  # "landing.finished_check" in the log
