"""The collect and verify steps of a run against a recording GitHub: one table row per
case, milliseconds each.

collect reads what the agent's branch holds from GitHub, opens the PR once and reports
check run `hangar / agent`; the verification starts beside it, as the push landed, and
collect goes on to verify. verify runs the environment's verify command in a sandbox and
reports `hangar / verify`; here the sandbox is a recording provider that answers the
verify command as a row says (the real ones are tested in tests/sandbox and end to end).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml

from app import render, runs
from app.models import Job, Run, RunStage, RunState, Thread
from sandbox.provider import ExecResult, Sandbox
from tests.recording_github import HEAD, PR_NUMBER, REPO, RecordingGitHub

ISSUE = Thread(repo=REPO, number=1, installation_id=1)
BRANCH = "hangar/1-abc"
VERIFY = "python3 -m unittest -q"


def job_and_run(engine, **run_fields: Any) -> tuple[Job, Run]:
    job = engine.save_job(Job(thread=ISSUE, requested_by="mona", prompt="fix add()",
                              title="add() is wrong", clone_url="http://127.0.0.1:9/acme/widgets.git",
                              base_branch="main"))
    fields = {"state": RunState.EXITED, "stage": RunStage.COLLECTING, "exit_code": 0,
              **run_fields}
    run = engine.save_run(Run(job_id=job.id, branch=BRANCH, base_branch="main", **fields))
    return job, run


def checks_named(gh: RecordingGitHub, name: str) -> list[dict]:
    return [c for c in gh.own_checks.values() if c["name"] == name]


# -- collect -------------------------------------------------------------------------


@dataclass
class Collect:
    name: str
    run: dict[str, Any] = field(default_factory=dict)
    pr_open: bool = False  # whether the PR is on GitHub before the step
    github: dict[str, Any] = field(default_factory=dict)
    # what the step does
    stage: RunStage = RunStage.DONE  # verified too, in the same step
    opens_pr: bool = True
    agent_check: str | None = "success"  # its conclusion; None: no agent check
    sensitive: list[str] = field(default_factory=list)
    asks: int | None = None  # POSTs of a PR, when the row says


COLLECT = [
    Collect("the first turn made commits: the PR is opened once, the agent check says so"),
    Collect("the PR is there already (a crash after opening it left the mark): found, "
            "not opened again", run={"posting": ["pr"]}, pr_open=True, opens_pr=False,
            asks=0),
    Collect("the first turn made no commits: done, no PR and no check",
            github={"ahead_by": 0}, stage=RunStage.DONE, opens_pr=False, agent_check=None),
    Collect("a follow-up turn with no new commits still reports on the PR: neutral, it "
            "made no commits", run={"kind": "followup", "turn": 2, "pr_number": PR_NUMBER},
            pr_open=True, github={"ahead_by": 0}, opens_pr=False, agent_check="neutral"),
    Collect("the agent exited non-zero: neutral, a fact and no gate",
            run={"exit_code": 3}, agent_check="neutral"),
    Collect("the agent's session failed: failure", run={"agent": {"failure": "refused"}},
            agent_check="failure"),
    Collect("the agent ran out of time", run={"state": RunState.TIMED_OUT},
            agent_check="timed_out"),
    Collect("`/hangar verify` reports a verification, not an agent's turn (it verifies "
            "the branch's head in its next step)",
            run={"kind": "verify", "pr_number": PR_NUMBER}, pr_open=True, opens_pr=False,
            agent_check=None, stage=RunStage.VERIFYING),
    Collect("a changed workflow is sensitive",
            github={"files": [{"filename": ".github/workflows/ci.yml"},
                              {"filename": "calc.py"}]},
            sensitive=[".github/workflows/ci.yml"]),
]


def verifying_engine(step_engine, tmp_path, gh, **settings):
    """An engine whose sandboxes answer every command with success at once."""
    return step_engine(gh, provider=RecordingProvider({}), envs_dir=environments(
        tmp_path, {"verify": {"command": VERIFY}}), **settings)


@pytest.mark.parametrize("case", COLLECT, ids=[c.name for c in COLLECT])
async def test_collect(step_engine, tmp_path, case: Collect):
    gh = RecordingGitHub(pr_open=case.pr_open, **case.github)
    engine = verifying_engine(step_engine, tmp_path, gh)
    _, run = job_and_run(engine, **case.run)
    await runs.collect(engine, run)
    after = engine.get_run(run.id)
    assert after.stage == case.stage
    assert after.head_sha == HEAD
    assert gh.opened == (1 if case.opens_pr else 0)
    if case.asks is not None:  # the mark says an open may have gone: look, do not ask
        assert len([c for c in gh.writes("POST") if c.path.endswith("/pulls")]) == case.asks
    if case.opens_pr:
        opened = [c for c in gh.writes("POST") if c.path.endswith("/pulls")]
        assert {k: opened[0].body[k] for k in ("head", "base")} == {"head": BRANCH,
                                                                   "base": "main"}
    if case.stage != RunStage.DONE or case.opens_pr:
        assert after.pr_number == PR_NUMBER
    agent = checks_named(gh, "hangar / agent")
    if case.agent_check is None:
        assert agent == []
    else:
        assert [(c["head_sha"], c["status"], c["conclusion"]) for c in agent] == [
            (HEAD, "completed", case.agent_check)]
    assert after.sensitive == case.sensitive


async def test_collect_finds_a_pr_someone_opened_from_hangars_branch(step_engine, tmp_path):
    """No mark, so hangar opens the PR at once; GitHub answers 422 (one exists for the
    branch) and hangar takes that one."""
    gh = RecordingGitHub(pr_open=True)
    engine = verifying_engine(step_engine, tmp_path, gh)
    _, run = job_and_run(engine)
    await runs.collect(engine, run)
    after = engine.get_run(run.id)
    assert after.pr_number == PR_NUMBER and after.posting == {}
    assert after.stage == RunStage.DONE


async def test_collect_twice_opens_one_pr_and_one_agent_check(step_engine, tmp_path):
    """A crash after collect's writes repeats the stage: nothing is made twice."""
    gh = RecordingGitHub(pr_open=False)
    engine = verifying_engine(step_engine, tmp_path, gh)
    _, run = job_and_run(engine)
    await runs.collect(engine, run)
    engine.patch_run(run.id, stage=RunStage.COLLECTING)
    await runs.collect(engine, engine.get_run(run.id))
    assert gh.opened == 1
    assert len(checks_named(gh, "hangar / agent")) == 1
    assert len(checks_named(gh, "hangar / verify")) == 1


    assert len(checks_named(gh, "hangar / verify")) == 1


async def test_a_restored_backup_that_forgot_the_check_runs_makes_no_second(step_engine,
                                                                           tmp_path):
    """The copy was taken before collect's writes: its run knows no check run and holds no
    mark. The job is older than the hangar that starts from the copy, so each check run
    is looked for before it is created, and the ones made after the copy are found."""
    gh = RecordingGitHub(pr_open=False)
    engine = verifying_engine(step_engine, tmp_path, gh)
    _, run = job_and_run(engine)
    await runs.collect(engine, run)
    engine.patch_run(run.id, stage=RunStage.COLLECTING, check_ids={}, posting={})
    engine.started_at = time.time() + 1  # the restored hangar started after the job
    await runs.collect(engine, engine.get_run(run.id))
    assert len(checks_named(gh, "hangar / agent")) == 1
    assert len(checks_named(gh, "hangar / verify")) == 1


def pr_and_check_writes(gh: RecordingGitHub) -> list[tuple[str, str]]:
    """The writes of the PR and of the check runs, in order: (method, what)."""
    found = []
    for call in gh.writes():
        if call.path.endswith("/pulls") or call.path.endswith(f"/pulls/{PR_NUMBER}"):
            found.append((call.method, "pr"))
        elif "/check-runs" in call.path:
            name = call.body.get("name") or next(
                c["name"] for c in gh.own_checks.values() if call.path.endswith(f"/{c['id']}"))
            found.append((call.method, f"{name}: {call.body.get('status')}"))
    return found


async def test_a_verification_that_ends_within_the_fold_is_said_once(step_engine, tmp_path):
    """The verification starts as the push lands, beside the agent's check run; ended
    within the fold, its check run is made completed and the PR opens with its result:
    three writes, not the five of saying it in progress first. The check run comes first:
    the PR opens with everything said."""
    gh = RecordingGitHub(pr_open=False)
    engine = verifying_engine(step_engine, tmp_path, gh)
    _, run = job_and_run(engine)
    await runs.collect(engine, run)
    assert pr_and_check_writes(gh) == [("POST", "hangar / agent: completed"),
                                       ("POST", "hangar / verify: completed"), ("POST", "pr")]
    opened = next(c for c in gh.writes("POST") if c.path.endswith("/pulls"))
    assert "passed" in opened.body["body"]
    assert engine.get_run(run.id).pr_seen is not None  # auto-fix starts from the PR as opened


async def test_an_open_prs_body_says_the_verification_before_its_check_run(step_engine,
                                                                          tmp_path):
    """A later turn's PR is open: once `hangar / verify` says completed, the body says the
    same already."""
    gh = RecordingGitHub(pr_open=True)
    engine = verifying_engine(step_engine, tmp_path, gh)
    _, run = job_and_run(engine, pr_number=PR_NUMBER)
    await runs.collect(engine, run)
    assert pr_and_check_writes(gh) == [("POST", "hangar / agent: completed"), ("PATCH", "pr"),
                                       ("POST", "hangar / verify: completed")]


@pytest.mark.parametrize("exit_code,draft", [(0, False), (1, True)], ids=["passed", "failed"])
async def test_a_pr_whose_verification_is_known_opens_ready_only_when_it_passed(
        step_engine, tmp_path, exit_code, draft):
    """land.draft_pr (the default): a PR opens as a draft to be marked ready once verified;
    verified already when it opens, a pass opens it ready (no second write to mark it), a
    failure opens it a draft."""
    gh = RecordingGitHub(pr_open=False)
    engine = step_engine(gh, provider=RecordingProvider({VERIFY: [exit_code]}),
                         envs_dir=environments(tmp_path, {"verify": {"command": VERIFY}}))
    job, run = job_and_run(engine)
    await runs.collect(engine, run)
    opened = next(c for c in gh.writes("POST") if c.path.endswith("/pulls"))
    assert opened.body.get("draft", False) is draft
    assert [c for c in gh.writes("POST") if c.path == "/graphql"] == []
    assert engine.get_job(job.id).drafts == ([PR_NUMBER] if draft else [])


async def test_a_longer_verification_is_shown_in_progress_meanwhile(step_engine, tmp_path):
    """One still running past the fold (here: until its check run says it runs) is shown
    in progress; the PR's body and the check run say its result when it ends."""
    shown = asyncio.Event()

    class Watching(RecordingGitHub):
        async def _request(self, method, url, headers, body=b""):
            answer = await super()._request(method, url, headers, body)
            if method == "POST" and url.endswith("/check-runs") and b"in_progress" in body:
                shown.set()
            return answer

    class Slow(RecordingProvider):
        async def run(self, sb, argv, **kw):
            if argv[-1] == VERIFY:
                await shown.wait()
            return await super().run(sb, argv, **kw)

    gh = Watching(pr_open=False)
    engine = step_engine(gh, provider=Slow({}), status_edit_interval_seconds=0.05,
                         envs_dir=environments(tmp_path, {"verify": {"command": VERIFY}}))
    _, run = job_and_run(engine)
    await asyncio.wait_for(runs.collect(engine, run), 60)
    assert pr_and_check_writes(gh) == [
        ("POST", "hangar / agent: completed"), ("POST", "pr"),
        ("POST", "hangar / verify: in_progress"), ("PATCH", "pr"),
        ("PATCH", "hangar / verify: completed")]
    assert engine.get_run(run.id).verification.passed is True


# -- verify --------------------------------------------------------------------------


class RecordingProvider:
    """A sandbox provider that records what it is asked and answers the verify command
    (and install) with the exit codes a row gives, in order; everything else succeeds."""

    name = "local"

    def __init__(self, answers: dict[str, list[int]], *, broken: bool = False):
        self.answers = {k: list(v) for k, v in answers.items()}
        self.broken = broken
        self.commands: list[str] = []
        self.created: list[str] = []
        self.destroyed: list[str] = []

    async def list(self, labels):
        return []

    async def create(self, spec, labels):
        if self.broken:
            raise RuntimeError("no such image: hangar-base:9")
        sb = Sandbox(id=f"sb-{len(self.created) + 1}", provider="local", labels=dict(labels))
        self.created.append(sb.id)
        return sb

    async def copy_in(self, sb, files, mode=0o644):
        return None

    async def run(self, sb, argv, *, cwd=None, env=None, timeout=None, on_output=None,
                  offline=False):
        command = argv[-1] if argv[:2] == ["sh", "-c"] else " ".join(argv)
        self.commands.append(command)
        codes = self.answers.get(command)
        code = (codes.pop(0) if len(codes) > 1 else codes[0]) if codes else 0
        return ExecResult(exit_code=code, output=f"{command}: exit {code}")

    async def destroy(self, sb):
        self.destroyed.append(sb.id)


@dataclass
class Verify:
    name: str
    spec: dict[str, Any] = field(default_factory=lambda: {
        "verify": {"command": VERIFY, "retries": 1}})
    answers: dict[str, list[int]] = field(default_factory=dict)
    broken: bool = False
    # what the step does
    conclusion: str = "success"
    passed: bool | None = True
    flaky: bool = False
    says: str = ""  # a fragment of the verification's error
    runs_verify: int = 1  # times the verify command ran
    # the timed steps it says it took, (code, exit code), in order
    steps: list[tuple[str, int | None]] = field(default_factory=lambda: [
        ("sandbox", None), ("command", 0)])


VERIFY_CASES = [
    Verify("the verify command passes: success"),
    Verify("it fails twice (one retry): failure", answers={VERIFY: [1]}, conclusion="failure",
           passed=False, runs_verify=2,
           steps=[("sandbox", None), ("command", 1), ("command", 1)]),
    Verify("it fails, then passes on the retry: success, and flaky",
           answers={VERIFY: [1, 0]}, flaky=True, runs_verify=2,
           steps=[("sandbox", None), ("command", 1), ("command", 0)]),
    Verify("no verify command: no pass, a person must act", spec={},
           conclusion="action_required", passed=None, says="has no verify command",
           runs_verify=0, steps=[]),
    Verify("the install step fails: no pass", answers={"make deps": [2]},
           spec={"install": "make deps", "verify": {"command": VERIFY}},
           conclusion="action_required", passed=None, says="the install step failed",
           runs_verify=0, steps=[("sandbox", None), ("install", 2)]),
    Verify("the sandbox cannot be made: no pass", broken=True,
           conclusion="action_required", passed=None, says="could not prepare the sandbox",
           runs_verify=0, steps=[("sandbox", None)]),
]


def environments(tmp_path, spec: dict[str, Any]):
    envs = tmp_path / "envs"
    envs.mkdir(exist_ok=True)
    (envs / "default.yaml").write_text(yaml.safe_dump({
        "name": "default", "provider": "local", "harness": "script",
        "agent_script": "true", **spec}))
    return envs


@pytest.mark.parametrize("case", VERIFY_CASES, ids=[c.name for c in VERIFY_CASES])
async def test_verify(step_engine, tmp_path, case: Verify):
    gh = RecordingGitHub()
    provider = RecordingProvider(case.answers, broken=case.broken)
    engine = step_engine(gh, provider=provider, envs_dir=environments(tmp_path, case.spec))
    _, run = job_and_run(engine, stage=RunStage.VERIFYING, head_sha=HEAD,
                         pr_number=PR_NUMBER)
    await runs.verify(engine, run)
    after = engine.get_run(run.id)
    assert (after.stage, after.outcome) == (RunStage.DONE, "pr")
    v = after.verification
    assert (v.passed, v.flaky, v.head_sha) == (case.passed, case.flaky, HEAD)
    assert case.says in (v.error or ""), v.error
    assert provider.commands.count(VERIFY) == case.runs_verify
    assert [(step["code"], step["exit_code"]) for step in v.steps] == case.steps
    assert all(step["seconds"] >= 0 for step in v.steps)
    assert sorted(provider.destroyed) == sorted(provider.created)  # nothing left behind
    check = checks_named(gh, "hangar / verify")
    assert [(c["head_sha"], c["status"], c.get("conclusion")) for c in check] == [
        (HEAD, "completed", case.conclusion)]
    buttons = [a["identifier"] for a in check[0]["actions"]]
    assert buttons == (["verify", "autofix"] if case.passed is False else ["verify"])
    # the PR's body says it first: once the check says completed, everything says the same
    writes = [(c.method, c.path.rsplit("/", 1)[-1]) for c in gh.writes()]
    assert writes.index(("PATCH", str(PR_NUMBER))) < len(writes) - 1


async def test_restore_paths_are_put_back_from_the_base_before_the_command(step_engine,
                                                                          tmp_path):
    """verify.restore_paths: a change to a test's fixture cannot make verification pass;
    the files are the base's when the command runs, and `hangar / verify` says so."""
    gh = RecordingGitHub()
    provider = RecordingProvider({})
    spec = {"verify": {"command": VERIFY, "restore_paths": ["tests/conftest.py", "data"]}}
    engine = step_engine(gh, provider=provider, envs_dir=environments(tmp_path, spec))
    base = "b" * 40
    _, run = job_and_run(engine, stage=RunStage.VERIFYING, head_sha=HEAD, pr_number=PR_NUMBER,
                         compare={"base_sha": base, "files": []})
    await runs.verify(engine, run)
    restore = [c for c in provider.commands if "checkout" in c and base in c]
    assert restore and provider.commands.index(restore[0]) < provider.commands.index(VERIFY)
    assert f"checkout -q {base} -- tests/conftest.py" in restore[0]
    assert "rm -rf -- data" in restore[0]  # what the change added under it goes too
    v = engine.get_run(run.id).verification
    assert (v.restored, v.restored_from) == (["tests/conftest.py", "data"], base)
    [check] = checks_named(gh, "hangar / verify")
    assert ("restored from the base (`bbbbbbb`) before the command ran: "
            "`tests/conftest.py`, `data`") in check["output"]["summary"]


async def test_a_restore_that_fails_is_no_pass(step_engine, tmp_path):
    gh = RecordingGitHub()
    spec = {"verify": {"command": VERIFY, "restore_paths": ["tests"]}}
    engine = step_engine(gh, provider=RecordingProvider({}), envs_dir=environments(tmp_path,
                                                                                   spec))
    provider = engine.providers["local"]
    _, run = job_and_run(engine, stage=RunStage.VERIFYING, head_sha=HEAD, pr_number=PR_NUMBER,
                         compare={"base_sha": "b" * 40, "files": []})
    answer = provider.run

    async def refuse_restore(sb, argv, **kw):
        if "cat-file" in argv[-1]:
            return ExecResult(exit_code=128, output="fatal: bad object")
        return await answer(sb, argv, **kw)

    provider.run = refuse_restore
    await runs.verify(engine, run)
    v = engine.get_run(run.id).verification
    assert v.passed is None and "could not restore verify.restore_paths" in v.error
    assert VERIFY not in provider.commands
    [check] = checks_named(gh, "hangar / verify")
    assert check["conclusion"] == "action_required"


async def test_verify_runs_without_a_git_credential(step_engine, tmp_path):
    """The verify command runs the agent's code: the sandbox's push token is revoked and
    its credentials removed before it runs."""
    gh = RecordingGitHub()
    provider = RecordingProvider({})
    engine = step_engine(gh, provider=provider,
                         envs_dir=environments(tmp_path, {"verify": {"command": VERIFY}}))
    _, run = job_and_run(engine, stage=RunStage.VERIFYING, head_sha=HEAD,
                         pr_number=PR_NUMBER)
    granted: list[bool] = []
    answer = provider.run

    async def run_and_look(sb, argv, **kw):
        if argv[-1] == VERIFY:
            granted.append(any(engine.tokens.check(sb.id, t) for t in tokens))
        return await answer(sb, argv, **kw)

    tokens: list[str] = []
    issue = engine.tokens.issue

    def issue_and_keep(*args, **kw):
        tokens.append(issue(*args, **kw))
        return tokens[-1]

    engine.tokens.issue = issue_and_keep
    provider.run = run_and_look
    await runs.verify(engine, run)
    assert tokens and granted == [False]
    removed = [c for c in provider.commands if ".git-credentials" in c]
    assert removed and provider.commands.index(removed[0]) < provider.commands.index(VERIFY)


async def test_a_verification_that_finds_the_fleet_full_waits_and_says_so(step_engine,
                                                                         tmp_path):
    """Every sandbox hangar may hold is in use: the verification waits in its stage, the
    check run and the status line say why, and it runs when a sandbox ends; it never
    fails for it."""
    gh = RecordingGitHub()
    provider = RecordingProvider({})
    engine = step_engine(gh, provider=provider, max_sandboxes=1,
                         envs_dir=environments(tmp_path, {"verify": {"command": VERIFY}}))
    _, run = job_and_run(engine, stage=RunStage.VERIFYING, head_sha=HEAD,
                         pr_number=PR_NUMBER)
    other = await engine.providers["local"].create(None, {"hangar.run": "run-x",
                                                         "hangar.role": "agent"})
    for _ in range(2):  # asked again while still full: one check-run write, not two
        await runs.verify(engine, run)
        run = engine.get_run(run.id)
    assert (run.stage, run.verification, run.waiting) == (
        RunStage.VERIFYING, None, {"code": "sandbox"})
    assert provider.created == ["sb-1"]  # only the other sandbox
    assert "verification is waiting for a free sandbox" in render.run_line(run)
    check = checks_named(gh, "hangar / verify")
    assert [(c["status"], c["output"]["title"]) for c in check] == [
        ("queued", "Waiting for a sandbox")]
    woken: list[str] = []
    engine.wake = lambda *rows: woken.extend(rows)
    await engine.providers["local"].destroy(other)
    assert woken == [run.id]
    await runs.verify(engine, run)
    after = engine.get_run(run.id)
    assert (after.stage, after.verification.passed, after.waiting) == (
        RunStage.DONE, True, None)


async def test_an_agent_that_finds_the_fleet_full_stays_queued(step_engine, tmp_path):
    gh = RecordingGitHub()
    provider = RecordingProvider({})
    engine = step_engine(gh, provider=provider, max_sandboxes=1,
                         envs_dir=environments(tmp_path, {}))
    _, run = job_and_run(engine, state=RunState.QUEUED, stage=RunStage.PENDING,
                         exit_code=None,
                         env={"name": "default", "provider": "local", "harness": "script",
                              "agent_script": "true"})
    assert engine.fleet.reserve("bld-1:build", waiter="bld-1")  # a build holds the place
    await runs.start_agent(engine, run)
    after = engine.get_run(run.id)
    assert after.state == RunState.QUEUED and after.retry_at > 0
    assert provider.created == [] and after.waiting == {"code": "sandbox"}
    assert render.run_line(after).startswith("⏳ waiting for a free sandbox: every sandbox")
