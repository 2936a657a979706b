"""Auto-fix's steps are written against `AutofixContext`, not the engine: its decisions
run here on a small object of the test's own (rows in a dict, runs in a list, GitHub a
recorder), in milliseconds."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from app.autofix import AutofixRow, row_id, steps
from app.models import Job, Run, RunKind, Thread, Verification

REPO = "acme/widgets"
HEAD = "a" * 40
PERSONS = "b" * 40
JOB = Job(id="job-1", thread=Thread(repo=REPO, number=1, installation_id=1),
          requested_by="mona", prompt="fix add()", clone_url="", base_branch="main")


def turn(**fields: Any) -> Run:
    return Run(**{"job_id": JOB.id, "branch": "hangar/1-ab", "base_branch": "main",
                  "pr_number": 7, "state": "exited", "stage": "done", "finished_at": time.time(),
                  **fields})


@dataclass
class Store:
    rows: dict[tuple[str, str], Any] = field(default_factory=dict)
    active: dict[tuple[str, str], bool] = field(default_factory=dict)

    def get(self, table: str, row_id: str, model: type) -> Any:
        return self.rows.get((table, row_id))

    def put(self, table: str, row_id: str, row: Any, *, active: bool) -> None:
        self.rows[(table, row_id)] = row
        self.active[(table, row_id)] = active


@dataclass
class Ops:
    pr: dict
    asked: list[int] = field(default_factory=list)

    async def get_pr(self, number: int) -> dict:
        self.asked.append(number)
        return self.pr


@dataclass
class Autofix:
    """The parts of AutofixContext these decisions use; nothing of an Engine."""

    runs: list[Run]
    store: Store = field(default_factory=Store)

    def runs_of(self, job_id: str) -> list[Run]:
        return [run for run in self.runs if run.job_id == job_id]


def row(**fields: Any) -> AutofixRow:
    return AutofixRow(**{"id": row_id(REPO, 7), "job_id": JOB.id, "repo": REPO,
                         "pr_number": 7, **fields})


@pytest.mark.parametrize(("why", "runs", "pushed", "known"), [
    ("hangar's turn pushed it", [turn(head_sha=HEAD)], [], True),
    ("GitHub said who pushed it", [], [HEAD], True),
    ("a verification found it on the branch: may be a person's",
     [turn(head_sha=HEAD, kind=RunKind.VERIFY,
           verification=Verification(command="pytest", head_sha=HEAD, passed=True))], [],
     False),
    ("hangar's turn pushed another head", [turn(head_sha=PERSONS)], [], False),
    ("a turn on another PR pushed it", [turn(head_sha=HEAD, pr_number=8)], [], False),
])
def test_a_head_is_known_only_when_hangar_made_it_or_github_said_who_pushed_it(
        why, runs, pushed, known):
    context = Autofix(runs=runs)
    kept = row(pushed_heads=pushed)
    context.store.put("autofix", kept.id, kept, active=True)
    assert steps.known_head(context, JOB, kept, HEAD) == known, why


async def test_a_running_turn_holds_the_fix_without_asking_github():
    context = Autofix(runs=[turn(head_sha=HEAD, finished_at=None, state="running",
                                   stage="pending")])
    ops = Ops(pr={"state": "open"})
    said = await steps.fix_now(context, ops, JOB, row(), requested=False)
    assert said == "a turn is running" and ops.asked == []


async def test_a_closed_pr_puts_its_row_to_rest():
    context = Autofix(runs=[turn(head_sha=HEAD)])
    ops = Ops(pr={"state": "closed", "head": {"sha": HEAD}})
    said = await steps.fix_now(context, ops, JOB, row(), requested=True)
    assert said == "PR not open" and ops.asked == [7]
    assert context.store.active == {("autofix", row_id(REPO, 7)): False}
