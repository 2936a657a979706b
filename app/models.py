"""The engine's rows: intents, jobs, runs and land requests.

Each is a pydantic model stored as JSON (app.store). A row's `state` says where it is;
the engine moves it one idempotent step at a time.
"""

from __future__ import annotations

import secrets
import time
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field


def new_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


def now() -> float:
    return time.time()


class Thread(BaseModel):
    """Where people talk to hangar: an issue or a pull request in one repository."""

    repo: str  # owner/name
    number: int
    installation_id: int
    is_pr: bool = False


class Intent(BaseModel):
    """A `/hangar` command as written, recorded before anything acts on it."""

    id: str  # comment-<comment id>-<index>: a redelivered comment is one intent
    thread: Thread
    comment_id: int
    author: str
    author_type: str = "User"
    command: str  # app.commands name, or "usage" for a malformed one
    args: dict[str, Any] = {}
    usage_message: str | None = None
    title: str = ""  # the or PR's title and body, for the prompt
    body: str = ""
    clone_url: str = ""
    default_branch: str = "main"
    state: str = "new"  # new → done
    outcome: str | None = None
    retry_at: float = 0.0  # a deferred intent (waiting for a running turn) is taken again then
    created_at: float = Field(default_factory=now)


class JobState(StrEnum):
    ACTIVE = "active"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


class Job(BaseModel):
    """The work asked for on one issue: one or more attempts, their PRs and turns."""

    id: str = Field(default_factory=lambda: new_id("job"))
    thread: Thread
    requested_by: str
    prompt: str
    title: str = ""
    body: str = ""
    clone_url: str
    base_branch: str
    attempts: int = 1
    state: JobState = JobState.ACTIVE
    # thread number → id of hangar's status comment there (the issue, then each PR)
    status_comments: dict[int, int] = {}
    # What each status comment last said: an unchanged body costs no API call.
    rendered: dict[int, str] = {}
    winner: int | None = None  # the attempt kept by `/hangar pick`
    ranking: list[dict[str, Any]] = []  # attempts best first, once all have finished
    created_at: float = Field(default_factory=now)


class RunState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    EXITED = "exited"
    LOST = "lost"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"


class RunStage(StrEnum):
    PENDING = "pending"
    PUBLISHING = "publishing"
    COLLECTING = "collecting"
    VERIFYING = "verifying"
    DONE = "done"
    ERROR = "error"


class Verification(BaseModel):
    command: str
    head_sha: str
    passed: bool | None  # None: could not run, see error
    exit_code: int | None = None
    duration_s: float = 0.0
    attempts: int = 0
    flaky: bool = False
    output_tail: str = ""
    error: str | None = None
    at: float = Field(default_factory=now)


class Run(BaseModel):
    """One agent turn in one sandbox, then publish → collect → verify."""

    id: str = Field(default_factory=lambda: new_id("run"))
    job_id: str
    attempt: int = 1
    turn: int = 1
    kind: str = "agent"  # agent | followup | autofix | verify
    prompt: str = ""
    branch: str
    base_branch: str
    base_sha: str | None = None
    state: RunState = RunState.QUEUED
    stage: RunStage = RunStage.PENDING
    env: dict[str, Any] = {}  # the effective environment spec, snapshot at start
    sandbox: dict[str, Any] | None = None
    process_id: str | None = None
    watch: dict[str, Any] = {}
    cancel_requested: bool = False
    exit_code: int | None = None
    queued_at: float = Field(default_factory=now)
    started_at: float | None = None
    finished_at: float | None = None
    agent: dict[str, Any] = {}  # AgentFacts: summary (a claim), turns, cost, usage
    head_sha: str | None = None
    dirty: bool = False
    compare: dict[str, Any] | None = None  # commits, files, additions, deletions from GitHub
    sensitive: list[str] = []
    pr_number: int | None = None
    verification: Verification | None = None
    label: str | None = None  # what started a later turn, for the status comment
    check_ids: dict[str, int] = {}  # "<check name>@<head sha>" → check run id on GitHub
    outcome: str | None = None  # pr | no_changes | failed | cancelled
    error: str | None = None
    warnings: list[str] = []
    stage_failures: int = 0
    retry_at: float = 0.0

    @property
    def finished(self) -> bool:
        return self.stage in (RunStage.DONE, RunStage.ERROR)
