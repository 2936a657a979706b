"""A repository renamed or transferred, and changes to what guards its branches."""

from gidgethub import routing, sansio

from app.payloads import RepositoryEvent, RulesChangedEvent, parts_as

router = routing.Router()


@router.register("repository", action="renamed")
@router.register("repository", action="transferred")
async def repository_moved(event: sansio.Event, *, engine, parts=None, **_) -> None:
    await engine.record_event("repository_moved", parts_as(RepositoryEvent, event.data, parts))


@router.register("branch_protection_rule")
@router.register("repository_ruleset")
async def gate_changed(event: sansio.Event, *, engine, parts=None, **_) -> None:
    # The cached classic protection (or its absence) is stale; waiting landings look again.
    await engine.record_event("gate_changed", parts_as(RulesChangedEvent, event.data, parts))
