"""The repositories concern is written against `RepositoriesContext`, not the engine: a
repository taken out of the installation, or renamed, is followed here on a small object
of the test's own (rows in a store of its own, notes and wakes in lists), in
milliseconds."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from app import landing
from app.github.client import SUSPENDED, UNINSTALLED
from app.intake.payloads import (
    AccountRenamedEvent,
    InstallationEvent,
    InstallationRepositoriesEvent,
    RepositoryEvent,
)
from app.landing import LandRequest, LandState
from app.models import Intent, Job, JobState, Rename, Run, RunStage, RunState, Thread, changed
from app.repositories import (
    account_renamed,
    installation_ended,
    installation_usable,
    repositories_added,
    repositories_removed,
    repository_moved,
)
from app.store import Store

REPO, OTHER = "acme/widgets", "acme/gadgets"


@dataclass
class Installations:
    """What GitHub's client is told of installations that ended."""

    ended: dict[int, str] = field(default_factory=dict)

    def installation_ended(self, installation_id: int, why: str) -> None:
        self.ended[installation_id] = why

    def installation_usable(self, installation_id: int) -> None:
        self.ended.pop(installation_id, None)


@dataclass
class Repositories:
    """The parts of RepositoriesContext a move or a removal uses; nothing of an Engine."""

    store: Store
    github: Installations = field(default_factory=lambda: Installations())
    notes: list[tuple[str, str]] = field(default_factory=list)
    woken: list[tuple[str, ...]] = field(default_factory=list)
    renames: list[Rename] = field(default_factory=list)  # every concern's rows follow
    # (the engine's part: tests/app/test_rows_follow_renames.py)

    def rename_repositories(self, *renames: Rename) -> list[str]:
        self.renames += renames
        return []

    def wake(self, *row_ids: str) -> None:
        self.woken.append(row_ids)

    def note(self, row_id: str, what: str) -> None:
        self.notes.append((row_id, what))

    def get_job(self, job_id: str) -> Job | None:
        return self.store.get("job", job_id, Job)

    def runs_of(self, job_id: str) -> list[Run]:
        return self.store.find("run", Run, job_id=job_id)

    def save_job(self, job: Job) -> Job:
        self.store.put("job", job.id, job, active=job.state == JobState.ACTIVE)
        return job

    def save_run(self, run: Run) -> Run:
        self.store.put("run", run.id, run, active=not run.finished)
        return run

    def patch_job(self, job_id: str, **fields: Any) -> Job:
        return self.save_job(changed(self.store.get("job", job_id, Job), **fields))

    def patch_run(self, run_id: str, **fields: Any) -> Run:
        return self.save_run(changed(self.store.get("run", run_id, Run), **fields))


@pytest.fixture
def context(tmp_path) -> Repositories:
    return Repositories(store=Store(tmp_path / "rows.db"))


def a_job(context: Repositories, repo: str, *, state: JobState = JobState.ACTIVE,
          running: bool = True, pr_number: int = 7, installation: int = 1
          ) -> tuple[Job, Run]:
    """A job on `repo` with a turn on PR `pr_number` (running, or ended) and the PR's land
    request, queued."""
    job = context.save_job(Job(
        thread=Thread(repo=repo, number=1, installation_id=installation), requested_by="mona",
        prompt="fix it", clone_url=f"http://git/{repo}.git", base_branch="main", state=state))
    run = context.save_run(Run(
        job_id=job.id, branch="hangar/1-ab", base_branch="main", pr_number=pr_number,
        **({"state": RunState.RUNNING} if running
           else {"state": RunState.EXITED, "stage": RunStage.DONE,
                 "finished_at": time.time()})))
    request = LandRequest(id=landing.land_id(repo, pr_number), job_id=job.id, repo=repo,
                          installation_id=installation, pr_number=pr_number, base="main",
                          branch=run.branch, requested_by="mona")
    context.store.put("land", request.id, request, active=True)
    return job, run


def land_request(context: Repositories, repo: str, pr_number: int = 7) -> LandRequest | None:
    return context.store.get("land", landing.land_id(repo, pr_number), LandRequest)


def test_a_repository_removed_stops_its_active_jobs_turns_and_land_requests_only(context):
    job, running = a_job(context, REPO)
    _, ended = a_job(context, REPO, running=False, pr_number=8)
    done, done_run = a_job(context, REPO, state=JobState.DONE, pr_number=9)
    other, other_run = a_job(context, OTHER)

    repositories_removed(context, InstallationRepositoriesEvent.model_validate({
        "action": "removed", "installation": {"id": 1},
        "repositories_removed": [{"full_name": REPO}]}))

    after = context.store.get("run", running.id, Run)
    assert (after.cancel_requested, after.retry_at) == (True, 0.0)
    assert not context.store.get("run", ended.id, Run).cancel_requested  # it had ended
    assert context.store.get("job", job.id, Job).state == JobState.CANCELLED
    assert context.store.get("job", ended.job_id, Job).state == JobState.CANCELLED
    # A job already done keeps its state and its turn; another repository is not touched.
    assert context.store.get("job", done.id, Job).state == JobState.DONE
    assert not context.store.get("run", done_run.id, Run).cancel_requested
    assert context.store.get("job", other.id, Job).state == JobState.ACTIVE
    assert not context.store.get("run", other_run.id, Run).cancel_requested

    assert [land_request(context, REPO, n).state for n in (7, 8, 9)] == [LandState.CANCELLED] * 3
    assert land_request(context, REPO).reason_code == "repo_removed"
    assert land_request(context, OTHER).state == LandState.QUEUED
    assert (job.id, f"{REPO} was removed from hangar's installation: stopped") in context.notes
    assert {row_id for row_id, _ in context.notes} <= {job.id, ended.job_id, done.id}
    assert context.woken == [()]  # one look at every row, after every write


@pytest.mark.parametrize(("action", "how", "why"), [
    ("suspend", "suspended", SUSPENDED), ("deleted", "uninstalled", UNINSTALLED)])
def test_an_installation_suspended_or_deleted_stops_all_its_work_and_no_other(
        context, action, how, why):
    job, running = a_job(context, REPO)
    gadgets, gadgets_run = a_job(context, OTHER, pr_number=8)
    done, done_run = a_job(context, REPO, state=JobState.DONE, pr_number=9)
    other, other_run = a_job(context, "globex/tools", installation=2)

    installation_ended(context, InstallationEvent.model_validate({
        "action": action, "installation": {"id": 1, "account": {"login": "acme"}}}))

    assert context.github.ended == {1: why}  # no token is asked for it from now on
    for stopped, run in ((job, running), (gadgets, gadgets_run)):
        assert context.store.get("job", stopped.id, Job).state == JobState.CANCELLED
        assert context.store.get("run", run.id, Run).cancel_requested
        assert (stopped.id, f"hangar's GitHub App was {how} on acme: stopped") in context.notes
    assert context.store.get("job", done.id, Job).state == JobState.DONE
    assert not context.store.get("run", done_run.id, Run).cancel_requested
    assert context.store.get("job", other.id, Job).state == JobState.ACTIVE
    assert not context.store.get("run", other_run.id, Run).cancel_requested
    assert [land_request(context, REPO, n).state for n in (7, 9)] == [LandState.CANCELLED] * 2
    assert land_request(context, OTHER, 8).reason_code == "installation_ended"
    assert land_request(context, "globex/tools").state == LandState.QUEUED
    assert {row_id for row_id, _ in context.notes} <= {job.id, gadgets.id, done.id}
    assert context.woken == [()]


def test_a_renamed_or_transferred_repository_moves_its_rows_under_the_new_name(context):
    repository_moved(context, RepositoryEvent.model_validate({
        "action": "renamed", "changes": {"repository": {"name": {"from": "widgets"}}},
        "repository": {"full_name": "acme/tools", "name": "tools", "owner": {"login": "acme"},
                       "clone_url": "http://git/acme/tools.git"}}))
    repository_moved(context, RepositoryEvent.model_validate({
        "action": "transferred",
        "changes": {"owner": {"from": {"organization": {"login": "globex"}}}},
        "repository": {"full_name": "acme/tools", "name": "tools", "owner": {"login": "acme"}}}))
    assert context.renames == [Rename(REPO, "acme/tools", "http://git/acme/tools.git"),
                               Rename("globex/tools", "acme/tools")]


def test_a_renamed_account_moves_each_of_its_repositories_known_to_the_installation(context):
    """GitHub sends `installation_target` renamed, and no event per repository: every
    repository of the old login that the installation's jobs or commands name follows."""
    a_job(context, REPO)
    a_job(context, REPO, pr_number=8)
    a_job(context, "Acme/Gadgets")  # GitHub's names ignore case
    a_job(context, "acme/elsewhere", installation=2)  # another installation's: left
    a_job(context, "acmeish/widgets")
    context.store.put("intent", "comment-1-0", Intent(
        id="comment-1-0", thread=Thread(repo="acme/quiet", number=3, installation_id=1),
        comment_id=1, author="mona", command="usage"), active=True)

    account_renamed(context, AccountRenamedEvent.model_validate({
        "action": "renamed", "target_type": "Organization", "installation": {"id": 1},
        "account": {"id": 9, "login": "acme-corp", "node_id": "O_1", "avatar_url": "a",
                    "html_url": "h"},
        "changes": {"login": {"from": "acme"}}}))

    assert sorted(context.renames, key=lambda r: r.old) == [
        Rename("Acme/Gadgets", "acme-corp/Gadgets"), Rename("acme/quiet", "acme-corp/quiet"),
        Rename(REPO, "acme-corp/widgets")]


def test_an_account_rename_that_names_no_change_moves_nothing(context):
    a_job(context, REPO)
    for changes in ({}, {"login": {"from": "acme"}}):
        account_renamed(context, AccountRenamedEvent.model_validate({
            "action": "renamed", "target_type": "User", "installation": {"id": 1},
            "account": {"id": 9, "login": "acme", "node_id": "U_1", "avatar_url": "a",
                        "html_url": "h"}, "changes": changes}))
    assert context.renames == []


def test_work_done_is_left_as_it_is_and_shown_again_once_the_app_is_back(context):
    """A done job whose land request the removal ends is marked (its status comment is
    not edited while GitHub would refuse it), and unmarked when the installation is
    unsuspended or the repository given back; one long done, with nothing due, is not
    touched at all. What was stopped stays stopped."""
    waiting, _ = a_job(context, REPO, state=JobState.DONE, running=False)
    old, _ = a_job(context, REPO, state=JobState.DONE, running=False, pr_number=8)
    context.store.delete("land", landing.land_id(REPO, 8))  # nothing of it is due
    running, _ = a_job(context, OTHER, pr_number=9)

    installation_ended(context, InstallationEvent.model_validate({
        "action": "suspend", "installation": {"id": 1}}))
    suspended = "hangar's GitHub App was suspended on acme"
    assert context.store.get("job", waiting.id, Job).off_limits == suspended
    assert context.store.get("job", waiting.id, Job).state == JobState.DONE
    assert context.store.get("job", old.id, Job).off_limits == ""
    assert context.store.get("job", running.id, Job).state == JobState.CANCELLED

    installation_usable(context, InstallationEvent.model_validate({
        "action": "unsuspend", "installation": {"id": 1}}))
    assert context.github.ended == {}
    assert context.store.get("job", waiting.id, Job).off_limits == ""
    assert context.store.get("job", running.id, Job).off_limits == ""
    assert context.store.get("job", running.id, Job).state == JobState.CANCELLED

    again, _ = a_job(context, REPO, state=JobState.DONE, running=False, pr_number=10)
    repositories_removed(context, InstallationRepositoriesEvent.model_validate({
        "action": "removed", "installation": {"id": 1},
        "repositories_removed": [{"full_name": REPO}]}))
    assert context.store.get("job", again.id, Job).off_limits == (
        f"{REPO} was removed from hangar's installation")
    installation_usable(context, InstallationEvent.model_validate({
        "action": "unsuspend", "installation": {"id": 1}}))  # not what removed it
    assert context.store.get("job", again.id, Job).off_limits != ""
    repositories_added(context, InstallationRepositoriesEvent.model_validate({
        "action": "added", "installation": {"id": 1},
        "repositories_added": [{"full_name": REPO}]}))
    assert context.store.get("job", again.id, Job).off_limits == ""
