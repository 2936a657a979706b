"""The events the gate and its rows follow, each through the listener wiring registers: a
reopened pull request, "Re-run" on `hangar / land`, "Re-run all checks", a resolved
conversation, a changed ruleset, and a repository removed from the installation (a
renamed one: tests/app/test_rows_follow_renames.py)."""

from __future__ import annotations

import pytest

from app import landing
from app.commands import intents
from app.intake.payloads import (
    CheckRunEvent,
    CheckSuiteEvent,
    InstallationRepositoriesEvent,
    PullRequestEvent,
    ReviewThreadEvent,
    RulesChangedEvent,
)
from app.landing import LandRequest, LandState
from app.models import Intent, Job, JobState, Run, RunStage, RunState, Thread
from app.render.reasons import Why
from app.repositories import moves as repositories
from tests.recording_github import HEAD, PR_NUMBER, REPO, RecordingGitHub

USER = {"login": "rita", "id": 5, "type": "User"}
REPOSITORY = {"full_name": REPO, "name": "widgets", "owner": {"login": "acme", "id": 1,
                                                              "type": "Organization"}}


@pytest.fixture
def engine(step_engine):
    engine = step_engine(RecordingGitHub())
    job = engine.save_job(Job(thread=Thread(repo=REPO, number=1, installation_id=1),
                              requested_by="mona", prompt="fix", clone_url="x",
                              base_branch="main"))
    engine.save_run(Run(job_id=job.id, branch="hangar/1-abc", base_branch="main",
                        state=RunState.RUNNING, stage=RunStage.PENDING, pr_number=PR_NUMBER,
                        head_sha=HEAD))
    landing.save(engine, LandRequest(
        id=landing.land_id(REPO, PR_NUMBER), job_id=job.id, repo=REPO, installation_id=1,
        pr_number=PR_NUMBER, base="main", branch="hangar/1-abc", requested_by="mona",
        head_sha=HEAD, woken=False, refused=HEAD))
    return engine


def request(engine) -> LandRequest:
    return landing.get(engine, landing.land_id(REPO, PR_NUMBER))


def stop(engine, state: LandState, code: str, **facts) -> None:
    landing.move(engine, request(engine), state, Why(code, **facts))


def test_a_pr_reopened_after_a_close_comes_back(engine):
    stop(engine, LandState.CANCELLED, landing.LandReason.PR_CLOSED)
    landing.record_pull_request(engine, PullRequestEvent.model_validate({
        "action": "reopened", "number": PR_NUMBER, "repository": REPOSITORY, "sender": USER,
        "pull_request": {"number": PR_NUMBER, "head": {"sha": HEAD, "ref": "hangar/1-abc"},
                         "base": {"ref": "main", "sha": HEAD}, "user": USER}}))
    assert request(engine).state == LandState.QUEUED
    assert request(engine).reason == "the pull request was reopened"


def test_a_pr_withdrawn_by_land_cancel_stays_cancelled_when_reopened(engine):
    stop(engine, LandState.CANCELLED, landing.LandReason.WITHDRAWN, login="mona")
    landing.record_pull_request(engine, PullRequestEvent.model_validate({
        "action": "reopened", "number": PR_NUMBER, "repository": REPOSITORY, "sender": USER,
        "pull_request": {"number": PR_NUMBER, "head": {"sha": HEAD, "ref": "hangar/1-abc"},
                         "base": {"ref": "main", "sha": HEAD}, "user": USER}}))
    assert request(engine).state == LandState.CANCELLED


def test_rerunning_hangar_land_looks_again_from_the_start(engine):
    stop(engine, LandState.REJECTED, landing.LandReason.MERGE_REFUSED, said="no")
    landing.record_land_rerun(engine, CheckRunEvent.model_validate({
        "action": "rerequested", "repository": REPOSITORY, "sender": USER,
        "check_run": {"id": 9, "name": "hangar / land", "head_sha": HEAD,
                      "external_id": landing.land_id(REPO, PR_NUMBER), "status": "completed",
                      "app": {"id": 1}}}))
    after = request(engine)
    assert after.state == LandState.QUEUED and after.woken and after.refused is None


def test_rerunning_all_checks_verifies_the_head_again_and_wakes_landing(engine):
    event = CheckSuiteEvent.model_validate({
        "action": "rerequested", "repository": REPOSITORY, "sender": USER,
        "installation": {"id": 1},
        "check_suite": {"id": 77, "head_sha": HEAD, "updated_at": "2026-12-01T10:00:00Z",
                        "pull_requests": [{"number": PR_NUMBER}], "app": {"id": 1}}})
    intents.record_suite_rerun(engine, event)
    landing.record_suite_rerun(engine, event)
    verifies = [i for i in engine.store.all("intent", Intent, active=True)
                if i.command == "verify"]
    assert [(i.thread.number, i.author) for i in verifies] == [(PR_NUMBER, "rita")]
    intents.record_suite_rerun(engine, event)  # the same delivery again: nothing more
    assert len([i for i in engine.store.all("intent", Intent, active=True)]) == 1
    assert request(engine).woken and request(engine).refused is None


def test_a_resolved_conversation_wakes_the_request(engine):
    landing.record_thread(engine, ReviewThreadEvent.model_validate({
        "action": "resolved", "repository": REPOSITORY,
        "pull_request": {"number": PR_NUMBER}}))
    assert request(engine).woken and request(engine).due_at == 0


def test_a_changed_ruleset_forgets_the_kept_protection_and_looks_again(engine):
    engine.github._protections[(REPO, "main")] = None  # absence kept
    stop(engine, LandState.REJECTED, landing.LandReason.GATE_CANNOT, cannot=[])
    landing.record_gate_changed(engine, RulesChangedEvent.model_validate({
        "action": "edited", "repository": {"full_name": REPO}}))
    assert (REPO, "main") not in engine.github._protections
    assert request(engine).state == LandState.QUEUED


def test_a_repository_removed_from_the_installation_stops_its_work(engine):
    repositories.repositories_removed(engine, InstallationRepositoriesEvent.model_validate({
        "action": "removed", "installation": {"id": 1},
        "repositories_removed": [{"full_name": REPO}]}))
    job = engine.store.find("job", Job, thread__repo=REPO)[0]
    assert job.state == JobState.CANCELLED
    assert all(r.cancel_requested for r in engine.runs_of(job.id))
    assert request(engine).state == LandState.CANCELLED
    assert "removed from hangar's installation" in request(engine).reason


def test_a_request_that_gave_up_says_so_in_hangars_words_and_notes_the_error(engine):
    """The error's own words name hangar's parts (a docker path, an address): they go to
    the job's timeline and hangar's log, and the status says what happened."""
    from app.landing.steps import give_up

    error = "SandboxError: /var/lib/docker/overlay2/ab12/merged: no such file or directory"
    give_up(engine, request(engine).id, error)
    stopped = request(engine)
    assert stopped.state == LandState.FAILED
    assert "stopped trying after repeated errors" in stopped.reason
    assert "/var/lib/docker" not in stopped.reason
    job = engine.store.find("job", Job, thread__repo=REPO)[0]
    assert any(error in what for _, what in engine.store.notes(job.id))
