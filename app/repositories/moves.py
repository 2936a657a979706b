"""A repository renamed, transferred, or taken out of the installation: hangar's rows follow.

A renamed (or transferred) repository keeps its jobs and land requests under its new name;
GitHub redirects the old one, but hangar's own lookups go by name. A repository removed
from the installation is one hangar may no longer touch: its running turns stop, its land
requests end, and its jobs are cancelled.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from app import landing
from app.models import Job, JobState, changed

if TYPE_CHECKING:
    from app.intake.payloads import InstallationRepositoriesEvent, RepositoryEvent
    from app.repositories.context import RepositoriesContext

log = logging.getLogger(__name__)


def old_name(event: RepositoryEvent) -> str | None:
    """The repository's name before the event (renamed: the name; transferred: the owner)."""
    owner, _, name = event.repository.full_name.partition("/")
    changes = (event.changes or {})
    if event.action == "renamed":
        before = ((changes.get("repository") or {}).get("name") or {}).get("from")
        return f"{owner}/{before}" if before else None
    if event.action == "transferred":
        who = (((changes.get("owner") or {}).get("from") or {}).get("user")
               or ((changes.get("owner") or {}).get("from") or {}).get("organization") or {})
        return f"{who['login']}/{name}" if who.get("login") else None
    return None


def repository_moved(engine: RepositoriesContext, event: RepositoryEvent) -> None:
    old, new = old_name(event), event.repository.full_name
    if not old or old == new:
        return
    for job in engine.store.find("job", Job, thread__repo=old):
        engine.save_job(changed(job, thread=changed(job.thread, repo=new),
                                clone_url=event.repository.clone_url or job.clone_url))
    moved = landing.rename_requests(engine, old, new)
    log.info("repository %s is now %s", old, new, extra={"land_requests": moved})
    engine.wake()


def repositories_removed(engine: RepositoriesContext,
                         event: InstallationRepositoriesEvent) -> None:
    for repo in event.repositories_removed:
        stop_repository(engine, repo.full_name)
    engine.wake()


def stop_repository(engine: RepositoriesContext, repo: str) -> None:
    """hangar may no longer touch `repo`: its turns stop and its work ends."""
    for job in engine.store.find("job", Job, thread__repo=repo):
        if job.state != JobState.ACTIVE:
            continue
        for run in engine.runs_of(job.id):
            if not run.finished:
                engine.patch_run(run.id, cancel_requested=True, retry_at=0.0)
        engine.patch_job(job.id, state=JobState.CANCELLED)
        engine.note(job.id, f"{repo} was removed from hangar's installation: stopped")
    landing.end_requests(engine, repo)
