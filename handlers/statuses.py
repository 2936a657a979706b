"""Commit statuses (the older CI API): results for landing and auto-fix."""

from gidgethub import routing, sansio

from app.payloads import DeploymentStatusEvent, StatusEvent, parts_as

router = routing.Router()


@router.register("status")
async def new_status(event: sansio.Event, *, engine, parts=None, **_) -> None:
    status = parts_as(StatusEvent, event.data, parts)
    if status.state != "pending":
        await engine.record_ci(status.repository.full_name, status.sha)


@router.register("deployment_status")
async def deployment_status(event: sansio.Event, *, engine, parts=None, **_) -> None:
    # A deployment a ruleset requires may have succeeded: landings of that head look again.
    status = parts_as(DeploymentStatusEvent, event.data, parts)
    await engine.record_ci(status.repository.full_name, status.deployment.sha)
