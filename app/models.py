"""The engine's rows: intents, jobs, runs and land requests.

Each is a pydantic model stored as JSON (app.store). A row's `state` says where it is;
the engine moves it one idempotent step at a time.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.creates import Mark, marks_of

M = TypeVar("M", bound=BaseModel)


def changed(row: M, **fields: Any) -> M:
    """`row` with `fields` changed, validated as a whole: a misspelt field or a value of
    the wrong type raises here, instead of being dropped or stored as it came."""
    unknown = sorted(set(fields) - set(type(row).model_fields))
    if unknown:
        raise TypeError(f"{type(row).__name__} has no field {', '.join(unknown)}")
    return type(row).model_validate({**dict(row), **fields})


def new_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


def now() -> float:
    return time.time()

# Who asked through the API with a token that acts for no GitHub login: `token:NAME`
# (no login holds a colon, so it is never a mention nor a person to the approval rules).
API_ASKER = "token:"


class Thread(BaseModel):
    """Where people talk to hangar: an issue or a pull request in one repository."""

    repo: str  # owner/name
    number: int
    installation_id: int
    is_pr: bool = False


@dataclass(frozen=True)
class Rename:
    """A repository's new name: it was renamed or transferred, or its account renamed.
    GitHub redirects the old name, but hangar's rows are found by name, so they follow."""

    old: str  # owner/name before
    new: str  # owner/name now
    clone_url: str | None = None  # the new clone URL, when the event says it

    def of(self, repo: str) -> bool:
        """`repo` is the old name (GitHub's names ignore case)."""
        return repo.lower() == self.old.lower()

    def url(self, url: str) -> str:
        """A clone URL of the old name, made the new name's."""
        if self.clone_url:
            return self.clone_url
        for suffix in (".git", ""):
            if url.lower().endswith(f"/{self.old.lower()}{suffix}"):
                return url[:len(url) - len(self.old) - len(suffix)] + self.new + suffix
        return url


def follows_repo(id_of: Callable[[Any], str] | None = None) -> Callable[[Any, Rename], Any]:
    """How a row with a `repo` field follows its repository's new name: the row under the
    new name (its clone URL too, if it keeps one, and its id made again by `id_of` when the
    id holds the name), or None when it is another repository's (a kind's
    `follows_rename`, app/engine.py)."""
    def follow(row: Any, rename: Rename) -> Any:
        if not rename.of(row.repo):
            return None
        moved = changed(row, repo=rename.new, **_clone_url(row, rename))
        return changed(moved, id=id_of(moved)) if id_of else moved
    return follow


def follows_thread(row: Any, rename: Rename) -> Any:
    """A job's or intent's thread under its repository's new name (a job's clone URL too),
    or None when it is another repository's."""
    if not rename.of(row.thread.repo):
        return None
    return changed(row, thread=changed(row.thread, repo=rename.new), **_clone_url(row, rename))


def _clone_url(row: Any, rename: Rename) -> dict[str, str]:
    return {"clone_url": rename.url(row.clone_url)} if "clone_url" in type(row).model_fields \
        else {}


class IntentState(StrEnum):
    NEW = "new"
    DONE = "done"  # acted on, refused or given up: `outcome` says which


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
    title: str = ""  # the issue's or PR's title and body, for the prompt
    body: str = ""
    issue_author: str = ""  # who wrote the body (the webhook says; "" when not known)
    # The thread's comments, when the webhook proved the command's the first of them:
    # [{login, type, body}]; None: read them from GitHub.
    comments_known: list[dict[str, str]] | None = None
    clone_url: str = ""
    default_branch: str = "main"
    state: IntentState = IntentState.NEW
    outcome: str | None = None
    retry_at: float = 0.0  # a deferred intent (waiting for a running turn) is taken again then
    waiting: bool = False  # deferred: reacted to and answered once; woken when the turn ends
    created_at: float = Field(default_factory=now)


class Deferred:
    """What a command's action returns when it waits for the running turn on its PR: the
    intent stays open (reacted to and answered once) and is taken again when the turn
    ends. The one instance is `DEFERRED`; any other outcome is a line for `outcome`."""

    def __repr__(self) -> str:
        return "DEFERRED"


DEFERRED = Deferred()


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
    issue_author: str = ""  # who wrote the body ("" when not known: read from GitHub)
    # The issue's comments as its command's webhook proved them whole (None: not proved)
    comments_known: list[dict[str, str]] | None = None
    clone_url: str
    base_branch: str
    attempts: int = 1
    # The repository's trigger label that started the job: removed once its PR is open.
    trigger_label: str | None = None
    state: JobState = JobState.ACTIVE
    # thread number → id of hangar's status comment there (the issue, then each PR)
    status_comments: dict[int, int] = {}
    # What each status comment last said: an unchanged body costs no API call.
    rendered: dict[int, str] = {}
    # When each status comment was last written, and when the next folded edit is due
    # (0: none waits). A job keeps its row active until that edit is made.
    edited_at: dict[int, float] = {}
    # Threads whose status comment is being posted (app.creates): it may exist already.
    status_posting: dict[int, Mark] = {}
    status_due_at: float = 0.0
    # Another concern changed what the status comment says (a land request moved, a review
    # was asked): it counts an ask here and wakes the job, whose step edits the comment
    # and records the asks it saw. More asked than seen: the job is due.
    status_asks: int = 0
    status_asks_seen: int = 0
    # PRs hangar opened as drafts (land.draft_pr) and has not yet marked ready for review
    drafts: list[int] = []
    # Why hangar may no longer touch the job's repository on GitHub (the App uninstalled or
    # suspended there, the repository taken out of the installation): its turns end without
    # a word to GitHub, and its status comment stays as it was. "" while it may.
    off_limits: str = ""
    winner: int | None = None  # the attempt kept by `/hangar pick`
    ranking: list[dict[str, Any]] = []  # attempts best first, once all have finished
    # While the ranking waits for the repository's CI (fan-out's grading): `until` (epoch
    # seconds) and `waiting` (attempt -> head sha whose CI had not finished); once ranked,
    # `unfinished` names the heads whose CI had still not finished after `waited` seconds.
    grading: dict[str, Any] = {}
    created_at: float = Field(default_factory=now)

    _marks_stored_before = field_validator("status_posting", mode="before")(marks_of)

    @property
    def status_asked(self) -> bool:
        """Another concern asked for a status edit the job's step has not made yet."""
        return self.status_asks > self.status_asks_seen


class RunKind(StrEnum):
    """What a run is: a job's first turn, a follow-up turn asked on its PR, an auto-fix
    turn, or only a verification of the PR's head (no agent)."""

    AGENT = "agent"
    FOLLOWUP = "followup"
    AUTOFIX = "autofix"
    VERIFY = "verify"


class RunOutcome(StrEnum):
    """How a finished run ended (a run that failed says so in its stage, ERROR)."""

    PR = "pr"  # its work is on a pull request
    NO_CHANGES = "no_changes"
    CANCELLED = "cancelled"


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
    HELD = "held"  # GitHub did not take the push; the commits wait in a bundle for a retry
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
    fix: str | None = None  # when it could not run: what a person does about it
    egress_blocked: list[dict] = Field(default_factory=list)  # refused during install/verify
    # verify.restore_paths, put back as the base has them before the command ran
    restored: list[str] = []
    restored_from: str | None = None  # the base's commit they came from
    # Each step it took, in order, timed: {"code": app.runs.VerifyStep, "seconds": s,
    # "exit_code": n or None, "skipped": bool}.
    steps: list[dict] = Field(default_factory=list)
    at: float = Field(default_factory=now)


class HeldWork(BaseModel):
    """Commits GitHub did not take, kept outside the sandbox until a push succeeds."""

    head_sha: str
    bundle: str | None = None  # file name under <data dir>/bundles; None: the sandbox is kept
    size: int = 0
    refused: bool = False  # GitHub said no (a rule, a secret, a large file), not "try later"
    # hangar's own sandbox gate said no (a limit or a rule of its own), not GitHub
    by_hangar: bool = False
    # git would not push: the branch on GitHub has commits the agent's work lacks
    diverged: bool = False
    github_says: str = ""  # GitHub's own words (or git's, when GitHub was not reached)
    attempts: int = 0  # pushes tried so far, over every retry
    at: float = Field(default_factory=now)


class RunWarning(StrEnum):
    """A run's warnings, shown in its status (worded by render: the run keeps the words)."""

    RETRYING = "retrying"
    SESSION_NOT_SAVED = "session_not_saved"
    STOP_FAILED = "stop_failed"
    PUBLISH_FAILED = "publish_failed"


class Run(BaseModel):
    """One agent turn in one sandbox, then publish → collect → verify."""

    id: str = Field(default_factory=lambda: new_id("run"))
    job_id: str
    attempt: int = 1
    turn: int = 1
    kind: RunKind = RunKind.AGENT
    prompt: str = ""
    branch: str
    base_branch: str
    base_sha: str | None = None
    state: RunState = RunState.QUEUED
    stage: RunStage = RunStage.PENDING
    env: dict[str, Any] = {}  # the effective environment spec, snapshot at start
    env_build: dict[str, Any] = {}  # the environment build it started from, or why none
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
    held: HeldWork | None = None
    label: str | None = None  # what started a later turn, for the status comment
    # The review threads (each by its first comment's id) this turn reads and answers in.
    review_threads: list[int] = []
    requested_by: str | None = None  # who asked for this turn ("hangar": auto-fix itself)
    check_ids: dict[str, int] = {}  # "<check name>@<head sha>" → check run id on GitHub
    # The head GitHub said the branch took when hangar pushed it (collect starts there).
    published_head: str | None = None
    # The PR as GitHub answered hangar's last edit of it in this run (ghops.pr_facts).
    pr_seen: dict[str, Any] | None = None
    # What this run is creating on GitHub ("pr", a check's "<name>@<head sha>"): after a
    # crash, a lost answer or with another replica it may exist (app.creates).
    posting: dict[str, Mark] = {}
    outcome: str | None = None  # a RunOutcome, or older rows' words
    # How the turn ended, once it has: {"code": an app.runs.ending.Ending, **its facts}.
    ending: dict[str, Any] | None = None
    # The commit the agent started from (the base, or the PR's head for a later turn):
    # its `hangar / agent` check run is there from the start.
    start_sha: str | None = None
    # Times the turn was started again in a new sandbox, and the endings that made it so.
    restarts: int = 0
    restarted_after: list[str] = []
    # What a queued run (or its verification) waits for: {"code": "slot" | "sandbox" |
    # "model_usage", **its facts}.
    waiting: dict[str, Any] | None = None
    failed_stage: str | None = None  # the stage whose step failed until hangar gave up
    # The ending `hangar / agent` on start_sha last completed with (None: not yet).
    agent_check_shown: str | None = None
    error: str | None = None  # for operators (the API, the job's timeline): never shown
    warnings: list[str] = []
    # What the prompt carried besides the request, by whose: "environment" (the operator's),
    # "repository" (.github/hangar.yml): shown with the run, never hidden.
    instructions: dict[str, str] = {}
    stage_failures: int = 0
    retry_at: float = 0.0

    _marks_stored_before = field_validator("posting", mode="before")(marks_of)

    @property
    def finished(self) -> bool:
        return self.stage in (RunStage.DONE, RunStage.ERROR)


# -- auto-fix: a PR hangar keeps green; landing reads who pushed to it ------------------


class Reason(BaseModel):
    """A decision as a row keeps it: a reason code and the facts its sentence names.
    render words it when it is shown (render.reasons), so a row never holds a sentence."""

    model_config = ConfigDict(frozen=True)

    code: str
    facts: dict[str, Any] = {}


# The code of a reason stored as a sentence, before rows kept codes: shown as it was.
SAID_BEFORE = "said_before"


class AutofixRow(BaseModel):
    id: str
    job_id: str
    repo: str
    pr_number: int
    enabled: bool = True
    turns: int = 0
    last_signature: str | None = None
    # "<head>:<signature>" pairs already decided against: said once, not again
    seen_heads: list[str] = []
    seen_reviews: list[int] = []
    # a change request that came while a turn ran: {review_id, author, body}, started next
    pending_review: dict[str, Any] | None = None
    pushed_heads: list[str] = []  # heads GitHub said were pushed (synchronize), by anyone
    unknown_heads: dict[str, float] = {}  # heads seen before word of their push: since when
    last_human_push_at: float | None = None
    pushers: list[str] = []  # people who pushed to the branch: they may not approve it
    stopped: Reason | None = None  # why hangar stopped trying (a `Stop` code), shown in
    # the status comment
    # A turn whose answer from GitHub (Run.pr_seen) a push made stale: looks read the PR.
    turn_seen: str | None = None
    due_at: float = 0.0
    created_at: float = Field(default_factory=now)

    @field_validator("stopped", mode="before")
    @classmethod
    def _sentence_stored_before(cls, value: Any) -> Any:
        return Reason(code=SAID_BEFORE, facts={"text": value}) if isinstance(value, str) \
            else value


def autofix_row_id(repo: str, pr_number: int) -> str:
    return f"autofix-{repo.replace('/', '-')}-{pr_number}"
