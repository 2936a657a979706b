"""Who has access changed: a collaborator, an organization or team membership. hangar's
cached answers about people's permissions on that account's repositories are dropped."""

import logging

from gidgethub import routing, sansio

from app.intake.payloads import AccessEvent, parts_as

router = routing.Router()
log = logging.getLogger(__name__)


@router.register("member")
@router.register("membership")
@router.register("organization")
@router.register("team")
@router.register("team_add")
async def access_changed(event: sansio.Event, *, engine, parts=None, **_) -> None:
    change = parts_as(AccessEvent, event.data, parts)
    dropped = engine.github.forget_permissions(change.owner)
    log.info("access changed (%s %s): %d cached permission(s) dropped", event.event,
             change.action, dropped, extra={"event": event.event, "owner": change.owner})
