"""The publish step when hangar cannot read the agent's commits in its sandbox: never
"the agent made no commits". A sandbox still there is kept and the step tried again (it
ends as hangar's failure if it keeps failing, and the reaper publishes what the sandbox
holds); a sandbox gone makes the turn lost, which collect starts again once."""

from __future__ import annotations

import asyncio

import pytest

from app.models import Job, Run, RunStage, RunState, Thread
from app.runs import ending, steps
from app.runs.publishing import publish
from sandbox.provider import ExecResult, Sandbox, SandboxError
from tests.recording_github import REPO, RecordingGitHub

SB = Sandbox(id="sb-1", provider="local", labels={"hangar.run": "run-1"})


class Unreadable:
    """A provider whose sandbox answers no command (a docker exec refused, the host's
    disk full), and which lists the sandbox while it still exists."""

    name = "local"

    def __init__(self, state: str):
        self.state = state
        self.destroyed: list[str] = []

    async def run(self, sb, argv, **kw) -> ExecResult:
        raise SandboxError("exec failed: /var/lib/hangar/sandboxes/sb-1 is gone")

    async def list(self, labels) -> list[Sandbox]:
        return [] if self.state == "gone" else [SB]

    async def destroy(self, sb) -> None:
        self.destroyed.append(sb.id)


def exited_run(engine) -> Run:
    job = engine.save_job(Job(thread=Thread(repo=REPO, number=1, installation_id=1),
                              requested_by="mona", prompt="fix add()", clone_url="x",
                              base_branch="main"))
    return engine.save_run(Run(job_id=job.id, branch="hangar/1-abc", base_branch="main",
                               state=RunState.EXITED, stage=RunStage.PUBLISHING, exit_code=0,
                               sandbox=SB.model_dump(), process_id="p-1", base_sha="b" * 40))


def test_a_sandbox_still_there_is_kept_and_the_step_fails_as_hangars(step_engine):
    provider = Unreadable("exited")
    engine = step_engine(RecordingGitHub(), provider=provider)
    run = exited_run(engine)
    with pytest.raises(SandboxError):
        asyncio.run(publish(engine, run))
    assert provider.destroyed == []  # its commits may be in it
    assert engine.get_run(run.id).stage == RunStage.PUBLISHING
    # Failing again and again, the turn ends as hangar's failure, not as "no commits".
    for _ in range(steps.MAX_STEP_FAILURES):
        steps.note_failure(engine, run.id, SandboxError("exec failed"))
    ended = engine.get_run(run.id)
    assert ended.ending["code"] == ending.Ending.HANGAR_FAILED
    assert ended.ending["stage"] == "publishing"


def test_a_sandbox_gone_makes_the_turn_lost_not_empty(step_engine):
    provider = Unreadable("gone")
    engine = step_engine(RecordingGitHub(), provider=provider)
    run = exited_run(engine)
    asyncio.run(publish(engine, run))
    lost = engine.get_run(run.id)
    assert (lost.state, lost.stage) == (RunState.LOST, RunStage.COLLECTING)
    assert lost.warnings and "could not publish" in lost.warnings[-1]
    # Nothing reached GitHub: collect starts it again (once), and its ending, should it be
    # lost again, is the sandbox's loss, not the request's.
    assert ending.restart_after_loss(lost, changed=False)
    assert ending.account(lost, changed=False).code == ending.Ending.LOST_BEFORE_PUSH
    assert ending.account(lost, changed=True).code == ending.Ending.LOST_AFTER_PUSH


def test_a_sandbox_the_agents_watch_found_gone_is_gone(step_engine):
    """After a restore from a backup, say: the watch found the sandbox gone (the run is
    lost), and the provider cannot even list it."""
    class Unlistable(Unreadable):
        async def list(self, labels):
            raise SandboxError("no such sandbox root")

    engine = step_engine(RecordingGitHub(), provider=Unlistable("exited"))
    run = engine.patch_run(exited_run(engine).id, state=RunState.LOST)
    asyncio.run(publish(engine, run))
    assert engine.get_run(run.id).stage == RunStage.COLLECTING


def test_a_turn_that_could_not_read_github_before_its_sandbox_says_so(step_engine):
    """No agent ran because GitHub's answers failed (the repository's config, the thread),
    not because a sandbox could not be made: the ending says which."""
    from http import HTTPStatus

    from gidgethub import GitHubBroken

    from app import render

    engine = step_engine(RecordingGitHub())
    for error, says in ((GitHubBroken(HTTPStatus.BAD_GATEWAY), "could not read from GitHub"),
                        (SandboxError("no such image"), "could not prepare a sandbox")):
        run = engine.patch_run(exited_run(engine).id, state=RunState.QUEUED,
                               stage=RunStage.PENDING, sandbox=None, process_id=None)
        for _ in range(steps.MAX_STEP_FAILURES):
            steps.note_failure(engine, run.id, error)
        ended = engine.get_run(run.id)
        assert ended.ending["code"] == ending.Ending.SANDBOX_NOT_PREPARED
        assert says in render.endings.ending_cause(render.endings.as_why(ended.ending))
