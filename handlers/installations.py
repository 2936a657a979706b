"""The App being installed, removed or given other repositories."""

import logging

from gidgethub import routing, sansio

from app.payloads import InstallationEvent, InstallationRepositoriesEvent, parts_as

router = routing.Router()
log = logging.getLogger(__name__)


@router.register("installation")
@router.register("installation_repositories")
async def installation_changed(event: sansio.Event, **_) -> None:
    installation = event.data.get("installation") or {}
    account = (installation.get("account") or {}).get("login")
    log.info(
        "installation %s for %s", event.data.get("action"), account,
        extra={"installation_id": installation.get("id"), "event": event.event},
    )


@router.register("installation_repositories", action="removed")
async def repositories_removed(event: sansio.Event, *, engine, parts=None, **_) -> None:
    # hangar may no longer touch them: their jobs stop.
    await engine.record_event("repositories_removed",
                              parts_as(InstallationRepositoriesEvent, event.data, parts))


@router.register("installation", action="new_permissions_accepted")
async def permissions_accepted(event: sansio.Event, *, engine, parts=None, **_) -> None:
    # Tokens minted before carry the old permissions: the next one carries the new.
    await engine.record_event("permissions_accepted",
                              parts_as(InstallationEvent, event.data, parts))
