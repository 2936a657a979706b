"""Who has access changed: a collaborator, an organization or team membership. hangar's
cached answers about people's permissions on that account's repositories are dropped. A
person revoked their authorization of the App: their sessions on hangar's pages end."""

import logging

from gidgethub import routing, sansio

from app.intake.payloads import AccessEvent, AuthorizationRevokedEvent, parts_as
from app.sessions import end_sessions

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


@router.register("github_app_authorization", action="revoked")
async def authorization_revoked(event: sansio.Event, *, engine, parts=None, **_) -> None:
    revoked = parts_as(AuthorizationRevokedEvent, event.data, parts)
    end_sessions(engine.store, revoked.sender.login)
    log.info("%s revoked their authorization of hangar: their sessions ended",
             revoked.sender.login, extra={"login": revoked.sender.login})
