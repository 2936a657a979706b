"""A repository renamed, transferred, or taken out of the installation: hangar's rows follow.

A renamed (or transferred) repository keeps its rows under its new name, every concern's
(a kind's `follows_rename` says how), and so do all of an account's repositories when the
account is renamed; GitHub redirects the old names, but hangar's own lookups go by name
(a command on the PR, CI's events for an auto-fix, a land request). A repository removed
from the installation is one hangar may no longer touch: its running turns stop, its land
requests end, and its jobs are cancelled. So are all of an installation's when the App is
suspended or uninstalled there.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from app import landing
from app.github.client import SUSPENDED, UNINSTALLED
from app.models import Intent, Job, JobState, Rename

if TYPE_CHECKING:
    from app.intake.payloads import (
        AccountRenamedEvent,
        InstallationEvent,
        InstallationRepositoriesEvent,
        RepositoryEvent,
    )
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
    moved = engine.rename_repositories(Rename(old, new, event.repository.clone_url))
    log.info("repository %s is now %s", old, new, extra={"rows": len(moved)})


def account_renamed(engine: RepositoriesContext, event: AccountRenamedEvent) -> None:
    """installation_target renamed: the account's login changed, and so did the name of
    each of its repositories (GitHub sends no `repository` event for them)."""
    old, new = event.old_login, event.new_login
    if not old or not new or old.lower() == new.lower():
        return
    installation = event.installation.id
    start = f'"{old}/'  # how a row's JSON holds a name of the account's
    threads = [*(job.thread for job in engine.store.mentioning("job", Job, start)),
               *(intent.thread for intent in engine.store.mentioning("intent", Intent, start))]
    repos = {t.repo for t in threads if t.installation_id == installation
             and t.repo.split("/")[0].lower() == old.lower()}
    # All at once: each kind's rows are read once, not once a repository.
    moved = engine.rename_repositories(
        *(Rename(repo, f"{new}/{repo.split('/', 1)[1]}") for repo in sorted(repos)))
    log.info("account %s is now %s", old, new,
             extra={"installation_id": installation, "repositories": len(repos),
                    "rows": len(moved)})


def repositories_removed(engine: RepositoriesContext,
                         event: InstallationRepositoriesEvent) -> None:
    for repo in event.repositories_removed:
        stop_repository(engine, repo.full_name)
    engine.wake()


def repositories_added(engine: RepositoriesContext,
                       event: InstallationRepositoriesEvent) -> None:
    """Repositories given (back) to the installation: jobs that their removal left as they
    were may be shown again (what was stopped stays stopped)."""
    for repo in event.repositories_added:
        for job in engine.store.find("job", Job, thread__repo=repo.full_name):
            if job.off_limits == removed(repo.full_name):
                engine.patch_job(job.id, off_limits="")


def stop_repository(engine: RepositoriesContext, repo: str) -> None:
    """hangar may no longer touch `repo`: its turns stop and its work ends."""
    for job in _still_acting(engine, lambda job: job.thread.repo == repo):
        _off_limits(engine, job, removed(repo))
    landing.end_requests(engine, repo)


def installation_ended(engine: RepositoriesContext, event: InstallationEvent) -> None:
    """The webhook: the App's installation on an account was suspended or deleted."""
    stop_installation(engine, event.installation.id,
                      SUSPENDED if event.action == "suspend" else UNINSTALLED)


def installation_usable(engine: RepositoriesContext, event: InstallationEvent) -> None:
    """The webhook: the installation was unsuspended. GitHub mints its tokens again, and
    jobs the suspension left as they were may be shown again (what was stopped stays
    stopped; a new command starts new work)."""
    installation = event.installation.id
    engine.github.installation_usable(installation)
    for job in engine.store.all("job", Job):
        if job.thread.installation_id == installation \
                and job.off_limits == taken_away(SUSPENDED, job.thread.repo):
            engine.patch_job(job.id, off_limits="")


def stop_installation(engine: RepositoriesContext, installation_id: int, how: str) -> None:
    """The App's installation was suspended or uninstalled (its webhook said so, or GitHub
    refused it a token): hangar may touch none of its repositories, and GitHub mints it no
    token. Their turns stop, their work ends, and nothing more is asked of GitHub for it;
    the jobs' notes say why (the status comment cannot: GitHub would refuse the edit)."""
    engine.github.installation_ended(installation_id, how)
    for job in _still_acting(engine, lambda job: job.thread.installation_id == installation_id):
        _off_limits(engine, job, taken_away(how, job.thread.repo))
    landing.end_requests(engine, installation_id=installation_id)
    log.info("installation %s was %s: its work stopped", installation_id, how,
             extra={"installation_id": installation_id})
    engine.wake()


def _still_acting(engine: RepositoriesContext, of: Callable[[Job], bool]) -> list[Job]:
    """The jobs that may still act on GitHub: those running, those with a status edit
    due, and those whose land request is about to end (its end is shown). A job long done
    asks nothing of GitHub until a webhook wakes it, and none comes meanwhile."""
    jobs = {job.id: job for job in engine.store.all("job", Job, active=True) if of(job)}
    for request in engine.store.all("land", landing.LandRequest, active=True):
        if request.job_id not in jobs:
            job = engine.get_job(request.job_id)
            if job is not None and of(job):
                jobs[job.id] = job
    return list(jobs.values())


def removed(repo: str) -> str:
    return f"{repo} was removed from hangar's installation"


def taken_away(how: str, repo: str) -> str:
    return f"hangar's GitHub App was {how} on {repo.partition('/')[0]}"


def _off_limits(engine: RepositoriesContext, job: Job, why: str) -> None:
    """hangar may no longer act on the job's repository: an active job stops; one done is
    left as it is on GitHub (its status comment is no longer edited)."""
    if job.off_limits == why:
        return
    if job.state != JobState.ACTIVE:
        engine.patch_job(job.id, off_limits=why)
        engine.note(job.id, f"{why}: its status comment is left as it is")
        return
    for run in engine.runs_of(job.id):
        if not run.finished:
            engine.patch_run(run.id, cancel_requested=True, retry_at=0.0)
    engine.patch_job(job.id, state=JobState.CANCELLED, off_limits=why)
    engine.note(job.id, f"{why}: stopped")
