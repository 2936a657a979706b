"""The auto-fix step against a recording GitHub: one table row per case, milliseconds each.

Each row sets the PR's checks, the auto-fix row and what else is going on (a running turn,
a merge, a person's push), runs one step, and names whether a turn started (a new run,
its label and what its prompt carries) or why not. The end-to-end tests walk the main
paths through fakehub and a real CI; here every reason is one row.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from app import autofix
from app.autofix import AutofixRow
from app.github.ops import RepoOps
from app.landing import LandRequest, LandState, land_id
from app.models import Job, Reason, Run, RunStage, RunState, Thread
from app.render import autofix as words
from tests.recording_github import HEAD, OWN_APP, PR_NUMBER, REPO, RecordingGitHub, check

ISSUE = Thread(repo=REPO, number=1, installation_id=1)
LOG = "FAIL: test_negative (ci_test.NegativeTest)\nAssertionError: 5 != -5"
FAILED = [check("ci / test", "failure", text=LOG),
          check("hangar / verify", "success", app_id=OWN_APP, run_id=501)]
OFF = "autofix:\n  enabled: false\n"
FIRST = {"place": 1, "attempt": 1, "pr": PR_NUMBER, "why": "verified", "eligible": True}
SAME = "the signature of the failure on HEAD"


@dataclass(frozen=True)
class Ago:
    """A time this long before the case runs (not before the module was collected: a
    worker may run a case minutes later, past a rule's window)."""

    seconds: float


@dataclass
class Case:
    name: str
    checks: list[dict] = field(default_factory=lambda: list(FAILED))
    row: dict[str, Any] = field(default_factory=dict)  # AutofixRow fields
    github: dict[str, Any] = field(default_factory=dict)  # RecordingGitHub fields
    head_by_hangar: bool = True  # the head is one hangar's turn made
    verified_head: bool = False  # a `/hangar verify` ran on the head (and recorded it)
    turn_running: bool = False
    merging: bool = False
    job: dict[str, Any] = field(default_factory=dict)  # Job fields (a `/hangar try N`)
    # what the step does: the label of the turn it starts, or a fragment of why not
    starts: str | None = None
    stopped: str | None = None


CASES = [
    Case("CI failed on hangar's head: a turn with the failure in its prompt",
         starts="auto-fix turn 1 of 2: ci / test failed"),
    Case("a second failure, another than the first turn's: the second turn",
         row={"turns": 1, "last_signature": "another"},
         starts="auto-fix turn 2 of 2: ci / test failed"),
    Case("CI still running: no turn yet", checks=[check("ci / test", None)]),
    Case("one check failed while another still runs: no turn until all have finished",
         checks=[*FAILED, check("ci / lint", None, run_id=502)]),
    Case("CI green: no turn", checks=[check("ci / test", "success")]),
    Case("hangar's own verify failing is evidence",
         checks=[check("hangar / verify", "failure", app_id=OWN_APP, text=LOG)],
         starts="auto-fix turn 1 of 2: hangar / verify failed"),
    Case("another App's check named `hangar / verify` is none",
         checks=[check("hangar / verify", "failure", text=LOG)]),
    Case("cancelled is for a person, not a turn", checks=[check("ci / test", "cancelled")]),
    Case("both turns used: no third, and it says so", row={"turns": 2},
         stopped="used its 2 turn(s)"),
    Case("the same failure as the last turn's: stop, and say so",
         row={"turns": 1, "last_signature": SAME}, stopped="failed the same way"),
    Case("a turn is running: none besides it", turn_running=True),
    Case("the PR is being merged: no turn", merging=True, stopped="being merged"),
    Case("off for the PR", row={"enabled": False}, stopped="`/hangar autofix on`"),
    Case("off for the repository", github={"contents": {".github/hangar.yml": OFF}},
         stopped="off for this repository"),
    Case("a person pushed the head a minute ago: left to them",
         row={"last_human_push_at": Ago(60), "pushed_heads": [HEAD]},
         head_by_hangar=False, stopped="someone pushed"),
    Case("a head nobody said was pushed: wait for GitHub's word first", head_by_hangar=False),
    Case("a head hangar only verified, before GitHub's word of its push: wait for it",
         head_by_hangar=False, verified_head=True),
    Case("a head hangar only verified, its push event never came: a person's push",
         row={"unknown_heads": {HEAD: Ago(autofix.PUSH_WORD_GRACE_S + 1)}},
         head_by_hangar=False, verified_head=True, stopped="someone pushed"),
    Case("the PR was closed: the row ends", github={"state": "closed"}),
    Case("an attempt of `try 3` nobody picked: no turn, and it says so",
         job={"attempts": 3}, stopped="attempt 1 of a `/hangar try` is not picked"),
    Case("an attempt ranked first, not picked: no turn by default",
         job={"attempts": 3, "ranking": [FIRST]},
         stopped="is not picked"),
    Case("another attempt picked: no turn", job={"attempts": 3, "winner": 2},
         stopped="is not picked"),
    Case("the picked attempt: its turn", job={"attempts": 3, "winner": 1},
         starts="auto-fix turn 1 of 2: ci / test failed"),
    Case("ranked first when the repository asks so: its turn",
         job={"attempts": 3, "ranking": [FIRST]},
         github={"contents": {".github/hangar.yml": "fanout: {autofix: ranked_first}\n"}},
         starts="auto-fix turn 1 of 2: ci / test failed"),
    Case("ranked first but not eligible: no turn even so",
         job={"attempts": 3, "ranking": [{**FIRST, "eligible": False}]},
         github={"contents": {".github/hangar.yml": "fanout: {autofix: ranked_first}\n"}},
         stopped="`fanout: {autofix: ranked_first}`"),
]


async def rows(engine, gh: RecordingGitHub, case: Case) -> AutofixRow:
    """A job whose first turn opened PR #7 (head HEAD, or an older one), its auto-fix row."""
    job = engine.save_job(Job(thread=ISSUE, requested_by="mona", prompt="fix add()",
                              clone_url="x", base_branch="main", **case.job))
    engine.save_run(Run(
        job_id=job.id, branch="hangar/1-abc", base_branch="main", pr_number=PR_NUMBER,
        state=RunState.RUNNING if case.turn_running else RunState.EXITED,
        stage=RunStage.PENDING if case.turn_running else RunStage.DONE, outcome="pr",
        head_sha=HEAD if case.head_by_hangar else "e" * 40))
    if case.verified_head:  # a verification records the head it found, whoever pushed it
        engine.save_run(Run(
            job_id=job.id, kind="verify", branch="hangar/1-abc", base_branch="main",
            pr_number=PR_NUMBER, state=RunState.EXITED, stage=RunStage.DONE, outcome="pr",
            head_sha=HEAD))
    if case.merging:
        engine.store.put("land", land_id(REPO, PR_NUMBER), LandRequest(
            id=land_id(REPO, PR_NUMBER), job_id=job.id, repo=REPO, installation_id=1,
            pr_number=PR_NUMBER, base="main", branch="hangar/1-abc", requested_by="mona",
            state=LandState.MERGING, head_sha=HEAD), active=True)
    def when(value: Any) -> Any:
        if isinstance(value, Ago):
            return time.time() - value.seconds
        return {k: when(v) for k, v in value.items()} if isinstance(value, dict) else value

    fields = when(dict(case.row))
    if fields.get("last_signature") == SAME:  # what this head's failure signs as
        failures, _ = await autofix.collect_failures(RepoOps(gh, REPO), HEAD,
                                                     own_app_id=OWN_APP)
        fields["last_signature"] = autofix.failure_signature(failures)
    row = AutofixRow(id=autofix.row_id(REPO, PR_NUMBER), job_id=job.id, repo=REPO,
                     pr_number=PR_NUMBER, **fields)
    return autofix.save(engine, row)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_autofix_step(step_engine, case: Case):
    gh = RecordingGitHub(check_runs=case.checks, **case.github)
    engine = step_engine(gh)
    row = await rows(engine, gh, case)
    await autofix.advance_autofix(engine, row.id)
    after = autofix.get_row(engine, row.id)
    turns = [r for r in engine.runs_of(row.job_id) if r.kind == "autofix"]
    if case.starts:
        assert [r.label for r in turns] == [case.starts], after.stopped
        assert turns[0].turn == 2 and turns[0].requested_by == "hangar"
        assert "AssertionError: 5 != -5" in turns[0].prompt
        assert after.turns == row.turns + 1
    else:
        assert turns == [], [r.label for r in turns]
        assert after.turns == row.turns
    if case.stopped:
        assert after.stopped is not None and after.stopped.code in set(autofix.Stop)
        assert case.stopped in words.stopped(after.stopped), after.stopped
    elif not case.starts:
        assert after.stopped is None, after.stopped
    assert not gh.writes("PUT")  # auto-fix never merges or updates a branch


async def test_one_failure_is_judged_once(step_engine):
    """A redelivered CI event makes the row due again: the same head and failure start
    no second turn, and a stop is said once."""
    gh = RecordingGitHub(check_runs=list(FAILED))
    engine = step_engine(gh)
    row = await rows(engine, gh, Case("past the bound", row={"turns": 2}))
    await autofix.advance_autofix(engine, row.id)
    said = autofix.get_row(engine, row.id)
    assert said.stopped == Reason(code=autofix.Stop.TURNS_USED, facts={"max_turns": 2})
    assert "used its 2 turn(s)" in words.stopped(said.stopped) and said.seen_heads
    notes = len(engine.store.notes(row.job_id))
    autofix.patch(engine, row.id, due_at=0)
    await autofix.advance_autofix(engine, row.id)
    assert autofix.get_row(engine, row.id).seen_heads == said.seen_heads
    assert len(engine.store.notes(row.job_id)) == notes
    assert [r for r in engine.runs_of(row.job_id) if r.kind == "autofix"] == []
