"""The App being installed, removed or given other repositories."""

import logging

from gidgethub import routing, sansio

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
