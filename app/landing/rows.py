"""The land request: one durable row per PR, its states, the reviews it records, and how
it is read and written (a step holding a stale copy stops; every move is in its history)."""

from __future__ import annotations

import time
from collections.abc import Callable
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from pydantic import BaseModel, Field, field_validator

from app.creates import Mark, marks_of
from app.models import Job, Rename, Run, follows_repo, now
from app.render import landing as words
from app.render.reasons import Why

if TYPE_CHECKING:
    from app.store import Store

T = TypeVar("T")


class LandState(StrEnum):
    QUEUED = "queued"
    UPDATING = "updating"
    WAITING_CI = "waiting_ci"
    AWAITING_APPROVAL = "awaiting_approval"
    MERGING = "merging"
    LANDED = "landed"
    CONFLICT = "conflict"
    CI_FAILED = "ci_failed"
    REJECTED = "rejected"
    CANCELLED = "cancelled"
    FAILED = "failed"
    EXPIRED = "expired"  # approved, but not landed within land.approval_ttl_minutes


# The lane: one request per (repo, base) at a time brings its branch up to date, waits
# for its checks and merges. Waiting for a person's approval does not hold the lane.
IN_FLIGHT = (LandState.UPDATING, LandState.WAITING_CI, LandState.MERGING)
FINAL = (LandState.LANDED, LandState.CANCELLED)
# States in which what a request needs is a person's review: made when its PR opened and
# not asked for yet, or waiting for the approval of its head.
AWAITING_REVIEW = (LandState.QUEUED, LandState.AWAITING_APPROVAL)
# States a new approval, push or `/hangar land` may start again from.
RESTARTABLE = (LandState.CONFLICT, LandState.CI_FAILED, LandState.REJECTED, LandState.FAILED,
               LandState.EXPIRED)


class ReviewRecord(BaseModel):
    id: int
    user: str
    user_type: str = "User"
    state: str  # lowercase, as webhooks send it
    commit_id: str | None = None
    dismissed: bool = False  # dismissed on GitHub (by a person, or a push under dismiss-stale)
    before_base: str | None = None  # given while the PR went into this base, since changed
    at: float = Field(default_factory=now)


class LandRequest(BaseModel):
    id: str
    job_id: str
    repo: str
    installation_id: int
    pr_number: int
    base: str
    branch: str
    requested_by: str
    state: LandState = LandState.QUEUED
    reason: str | None = None  # worded by render from reason_code and its facts
    reason_code: str | None = None  # a LandReason (None on rows older than the codes)
    head_sha: str | None = None
    wished: bool = False  # someone commented `/hangar land`
    # A row landing keeps for a verified PR nobody has asked to land yet (auto-land looks
    # at it): said nowhere until auto-land applies or a person makes it a request.
    quiet: bool = False
    # The land policy in force when the request was made (`land:` of the base's
    # .github/hangar.yml then): later edits apply to new requests. None: not made yet.
    policy: dict[str, Any] | None = None
    ack_sensitive_sha: str | None = None
    ack_large_sha: str | None = None  # `/hangar land --ack-large` was given on this head
    # When the head's approvals first sufficed: the request expires approval_ttl_minutes on.
    approved_at: float | None = None
    expired_reviews: list[int] = []  # approvals given before the request expired
    # Auto-land's approval: the head it approved, and the rule it did so by (its text).
    auto_head: str | None = None
    auto_rule: str | None = None
    # Who approved the head that landed ("policy" for auto-land), and that head.
    approved_by: list[str] = []
    approved_head: str | None = None
    # Heads hangar made by a clean update of another head: new head → the head before.
    updated_heads: dict[str, str] = {}
    reviews: list[ReviewRecord] = []
    explained: list[int] = []  # reviews whose not counting was already said
    merge_sha: str | None = None
    conflicts: list[str] = []  # the files of the last conflict with the base, as git named
    ci_since: float | None = None
    updated_from: str | None = None  # the head hangar asked GitHub to update
    updated_at_ask: float = 0.0
    history: list[dict[str, Any]] = []
    due_at: float = 0.0  # the engine's next look; events set it to now
    # An event (a review, a push, a check, a command) asked for this look: a look the slow
    # poll made while the request waits for a person reads only the reviews (quiet_look).
    woken: bool = True
    looked_at: float = 0.0  # the last full look
    # The head GitHub refused to merge for a rule it named: not asked again for it until
    # an event (a review, a check, a push, a command) says something changed.
    refused: str | None = None
    enqueued: str | None = None  # the head hangar put in the base's merge queue
    dequeued: str | None = None  # why GitHub's merge queue removed it (its event's reason)
    problems: list[str] = []  # what is wrong in .github/hangar.yml (defaults apply)
    impostors: list[str] = []  # others' checks under hangar's names, set aside (said once)
    shown: str | None = None  # what check run `hangar / land` last said, to skip no-op edits
    check_ids: dict[str, int] = {}  # head sha → id of check run `hangar / land` on it
    # Heads whose land check run is being created (app.creates): it may exist already.
    check_posting: dict[str, Mark] = {}
    # Moved to a final state that check run `hangar / land` does not show yet: the row
    # stays active until a step has shown it (GitHub failed the step that moved it).
    end_unshown: bool = False
    version: int = 0  # bumped by every save; a step holding an older copy stops
    updated_at: float = Field(default_factory=now)

    _marks_stored_before = field_validator("check_posting", mode="before")(marks_of)

    @property
    def active(self) -> bool:
        return self.state not in FINAL or self.end_unshown


def wake_request(request: LandRequest) -> None:
    """An event says something changed: look at the request now, a full look, and ask
    GitHub again even about a head it refused."""
    request.due_at = 0
    request.woken = True
    request.refused = None


def land_id(repo: str, pr_number: int) -> str:
    return f"land-{repo.replace('/', '-')}-{pr_number}"


def ensure_request(engine: RequestRows, job: Job, pr_number: int, *,
                   quiet: bool = False) -> LandRequest:
    """The PR's land request; made now if there is none (`quiet`: for auto-land's look
    at a verified PR nobody asked to land, said nowhere until it speaks)."""
    request_id = land_id(job.thread.repo, pr_number)
    existing = engine.store.get("land", request_id, LandRequest)
    if existing:
        return existing
    run = next(r for r in engine.runs_of(job.id) if r.pr_number == pr_number)
    request = LandRequest(
        id=request_id, job_id=job.id, repo=job.thread.repo,
        installation_id=job.thread.installation_id, pr_number=pr_number,
        base=run.base_branch, branch=run.branch, requested_by=job.requested_by, quiet=quiet,
    )
    save(engine, request)
    return request


def head_of(request: LandRequest) -> str:
    """The head the request is at: the step reads it from the PR before any stage that
    needs it, so one missing here is a fault."""
    if request.head_sha is None:
        raise LookupError(f"{request.id} has no head yet")
    return request.head_sha


class RowChanged(Exception):
    """The row changed under a step (a review, a push, `/hangar land cancel`): the step
    stops and the next one starts from the fresh row."""


def save(engine: HoldsRows, request: LandRequest) -> LandRequest:
    """Write the row, unless someone else wrote it since this copy was read.

    A step that awaited GitHub may hold a stale copy, and so may intake on one replica
    while another replica's step or intake writes: none may undo what arrived. The check
    and the write are one transaction in the store, across replicas."""
    expect = request.version
    request.version += 1
    request.updated_at = time.time()
    if not engine.store.put_if_version("land", request.id, request, active=request.active,
                                       expect=expect):
        request.version = expect
        raise RowChanged(request.id)
    return request


# How often an intake records an event again when another writer keeps coming first.
FRESH_TRIES = 5


def fresh(record: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """record(*args, **kwargs), done again from fresh reads while another replica's step
    or intake writes the row between this one's read and its write (the store refuses the
    stale write). Only for what reads and writes without awaiting: it is done whole again."""
    for attempt in range(FRESH_TRIES):
        try:
            return record(*args, **kwargs)
        except RowChanged:
            if attempt == FRESH_TRIES - 1:
                raise
    raise AssertionError("unreachable")


class HoldsRows(Protocol):
    store: Store


class RequestRows(HoldsRows, Protocol):
    """What making, moving and ending a land request uses of the engine (the repositories
    concern calls these with its own narrow context): the rows, the job's runs (the PR's
    branch and base), and the job's notes."""

    def runs_of(self, job_id: str) -> list[Run]: ...
    def note(self, row_id: str, what: str) -> None: ...


def get(engine: HoldsRows, request_id: str) -> LandRequest | None:
    return engine.store.get("land", request_id, LandRequest)


def move(engine: RequestRows, request: LandRequest, state: LandState, why: Why | None) -> None:
    reason = words.reason(why)
    if request.state == state and request.reason == reason:
        return
    request.history.append({"at": time.time(), "state": state.value, "reason": reason})
    request.state = state
    set_reason(request, why)
    request.end_unshown = state in FINAL and request.head_sha is not None
    if request.end_unshown:
        request.due_at = 0  # shown by this step, or by the next try once its hold ends
    save(engine, request)
    engine.note(request.job_id, f"land #{request.pr_number}: {state.value}"
                + (f" ({reason})" if reason else ""))


def set_reason(request: LandRequest, why: Why | None) -> None:
    """Why the request stands where it stands: its code, and render's words for it."""
    request.reason_code = None if why is None else str(why.code)
    request.reason = words.reason(why)


def follow_rename(request: LandRequest, rename: Rename) -> LandRequest | None:
    """The request under its repository's new name (and id), looked at again in full;
    None when it is another repository's."""
    moved = follows_repo(lambda row: land_id(row.repo, row.pr_number))(request, rename)
    if moved is not None:
        wake_request(moved)
    return moved


def end_requests(engine: RequestRows, repo: str | None = None, *,
                 installation_id: int | None = None) -> None:
    """hangar may no longer touch the repository, or any of the installation's: their
    land requests end."""
    for request in engine.store.all("land", LandRequest, active=True):
        if request.repo == repo:
            move(engine, request, LandState.CANCELLED, Why("repo_removed"))
        elif installation_id is not None and request.installation_id == installation_id:
            move(engine, request, LandState.CANCELLED, Why("installation_ended"))
