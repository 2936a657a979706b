"""Commit statuses (the older CI API): results for landing and auto-fix."""

from gidgethub import routing, sansio

from app.payloads import StatusEvent

router = routing.Router()


@router.register("status")
async def new_status(event: sansio.Event, *, engine, **_) -> None:
    status = StatusEvent.model_validate(event.data)
    if status.state != "pending":
        await engine.record_ci(status.repository.full_name, status.sha)
