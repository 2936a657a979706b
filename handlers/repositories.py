"""The App installed, suspended, uninstalled, or given other repositories; a repository
renamed or transferred, or its account renamed: hangar's rows follow the repository, and
tokens follow the permissions."""

import logging

from gidgethub import routing, sansio

from app import repositories
from app.intake.payloads import (
    AccountRenamedEvent,
    InstallationEvent,
    InstallationRepositoriesEvent,
    RepositoryEvent,
    parts_as,
)

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
    repositories.repositories_removed(
        engine, parts_as(InstallationRepositoriesEvent, event.data, parts))
    engine.wake()


@router.register("installation", action="new_permissions_accepted")
async def permissions_accepted(event: sansio.Event, *, engine, parts=None, **_) -> None:
    # Tokens minted before carry the old permissions: the next one carries the new.
    accepted = parts_as(InstallationEvent, event.data, parts)
    engine.github.forget_installation(accepted.installation.id)
    engine.wake()


@router.register("installation", action="suspend")
@router.register("installation", action="deleted")
async def installation_ended(event: sansio.Event, *, engine, parts=None, **_) -> None:
    # hangar may touch none of its repositories: their jobs stop.
    repositories.installation_ended(engine, parts_as(InstallationEvent, event.data, parts))


@router.register("installation", action="unsuspend")
async def installation_unsuspended(event: sansio.Event, *, engine, parts=None, **_) -> None:
    # Its jobs stayed stopped; a new command starts one, with a new token.
    repositories.installation_usable(engine, parts_as(InstallationEvent, event.data, parts))


@router.register("installation_repositories", action="added")
async def repositories_added(event: sansio.Event, *, engine, parts=None, **_) -> None:
    repositories.repositories_added(
        engine, parts_as(InstallationRepositoriesEvent, event.data, parts))


@router.register("installation_target", action="renamed")
async def account_renamed(event: sansio.Event, *, engine, parts=None, **_) -> None:
    # Each of the account's repositories has a new name: their rows follow.
    repositories.account_renamed(engine, parts_as(AccountRenamedEvent, event.data, parts))


@router.register("repository", action="renamed")
@router.register("repository", action="transferred")
async def repository_moved(event: sansio.Event, *, engine, parts=None, **_) -> None:
    repositories.repository_moved(engine, parts_as(RepositoryEvent, event.data, parts))
    engine.wake()
