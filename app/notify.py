"""Operator notifications: a signed webhook POST when something needs a person outside
GitHub (a PR waits for approval, a land hit a conflict or landed, a run was lost, a model
credential's usage is high, an environment build failed).

Each notifier is the operator's (settings `notifiers`, per installation or repository).
A notification is a row per notifier and dedupe key, so the same fact is sent once however
often it is seen; the row's step POSTs it, signed with `X-Hangar-Signature: sha256=<HMAC>`
over the body, and records every attempt; a failure is tried again with backoff at most
NOTIFY_RETRIES times. Each notifier is a channel with its own rate limit (settings
`notify_rate_limit` per `notify_rate_window_seconds`, or the notifier's `rate_limit`): a
delivery over it waits on its row's `next_at` for the window to free a place, and is never
dropped. Emitting only writes rows: a notifier that fails or hangs never holds
up a run, a land or a build. Messages are built from hangar's facts only (render.notify):
no agent text, no link the agent chose.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from typing import TYPE_CHECKING, Any, Protocol

import aiohttp
from pydantic import BaseModel, Field

from app import envbuilds, landing, reviewers
from app.models import Job, Run, RunState, now
from app.render import notify as words
from app.runs import credential_key
from app.settings import NotifierSettings, Settings

if TYPE_CHECKING:
    from app.engine import Registrations
    from app.github.reads import GitHubReads
    from app.store import Store

TABLE = "notification"
CHANNEL = "notify_channel"  # a row per notifier: when it last sent, for its rate limit
NOTIFY_RETRIES = 5  # after the first attempt
TIMEOUT_S = 10.0
BACKOFF_MAX_S = 3600.0
# How long a notification waits after an older one of its notifier that goes first.
BEHIND_S = 0.2


class Notification(BaseModel):
    """What happened, as facts (render.notify words them)."""

    kind: str
    dedupe_key: str
    repo: str | None = None
    installation_id: int | None = None
    facts: dict[str, Any] = {}
    created_at: float = Field(default_factory=now)


class NotificationDelivery(BaseModel):
    """One notification to one notifier, and every attempt to deliver it."""

    id: str
    notifier: str
    notification: Notification
    state: str = "pending"  # pending | delivered | failed
    attempts: list[dict[str, Any]] = []  # {at, status, error}
    next_at: float = 0.0


class NotifyChannel(BaseModel):
    """One notifier's recent sends: the times of those inside its rate window."""

    id: str
    sent: list[float] = []
    version: int = 0  # each send's update raises it: a late first write cannot erase one


class NotifyContext(Protocol):
    """What notifying uses of the engine, and nothing more (mypy checks `Engine` against
    it where `register` hooks it in): deliveries and channels in the store, the rows a
    notification is made from, the session it posts with (through `github`), and wake."""

    settings: Settings
    store: Store
    github: GitHubReads

    def wake(self, *row_ids: str) -> None: ...
    def get_job(self, job_id: str) -> Job | None: ...
    def get_run(self, run_id: str) -> Run | None: ...


def delivery_id(notifier: str, dedupe_key: str) -> str:
    digest = hashlib.sha256(f"{notifier}\0{dedupe_key}".encode()).hexdigest()[:24]
    return f"notify-{digest}"


def wants(notifier: NotifierSettings, note: Notification) -> bool:
    if note.kind not in notifier.events:
        return False
    if notifier.installations and note.installation_id not in notifier.installations:
        return False
    repos = [r.lower() for r in notifier.repositories]
    return not repos or (note.repo or "").lower() in repos


def emit(engine: NotifyContext, note: Notification) -> int:
    """A delivery row for each notifier that wants it, once per dedupe key; how many new."""
    made = 0
    for notifier in engine.settings.notifiers:
        if not wants(notifier, note):
            continue
        row_id = delivery_id(notifier.name, note.dedupe_key)
        if engine.store.get(TABLE, row_id, NotificationDelivery) is not None:
            continue  # sent, or being sent, already
        engine.store.put(TABLE, row_id, NotificationDelivery(
            id=row_id, notifier=notifier.name, notification=note), active=True)
        engine.wake(row_id)
        made += 1
    return made


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def retry_delay(base: float, failures: int) -> float:
    return min(BACKOFF_MAX_S, base * 2 ** (failures - 1))


async def advance_delivery(engine: NotifyContext, row_id: str) -> None:
    row = engine.store.get(TABLE, row_id, NotificationDelivery)
    if row is None or row.state != "pending":
        if row is not None:
            engine.store.put(TABLE, row_id, row, active=False)
        return
    if row.next_at > time.time():
        return
    notifier = next((n for n in engine.settings.notifiers if n.name == row.notifier), None)
    if notifier is None:  # the operator removed it
        engine.store.put(TABLE, row_id, row.model_copy(update={"state": "failed"}), active=False)
        return
    ahead = older_pending(engine, row)
    if ahead is not None:
        # A notifier hears its notifications in the order they were made: an older one
        # still to send (a retry waiting out its delay, or one the rate limit held) goes
        # first, and this one after it.
        engine.store.put(TABLE, row_id, row.model_copy(
            update={"next_at": max(ahead.next_at, time.time()) + BEHIND_S}), active=True)
        engine.wake(ahead.id)
        return
    wait = take_send_slot(engine, notifier)
    if wait > 0:  # over the channel's rate limit: it waits its turn, never dropped
        engine.store.put(TABLE, row_id, row.model_copy(update={"next_at": time.time() + wait}),
                         active=True)
        return
    body = words.body(notifier.format, row.id, row.notification)
    status, error = await post(engine, notifier, row, body)
    attempts = [*row.attempts, {"at": time.time(), "status": status, "error": error}]
    if status is not None and 200 <= status < 300:
        update: dict[str, Any] = {"state": "delivered"}
    elif len(attempts) > NOTIFY_RETRIES:
        update = {"state": "failed"}
    else:
        update = {"next_at": time.time() + retry_delay(engine.settings.notify_retry_seconds,
                                                        len(attempts))}
    fresh = row.model_copy(update={**update, "attempts": attempts})
    engine.store.put(TABLE, row_id, fresh, active=fresh.state == "pending")


def older_pending(engine: NotifyContext, row: NotificationDelivery
                  ) -> NotificationDelivery | None:
    """A notification to the same notifier, made before `row` and not yet sent, if any."""
    for other in engine.store.all(TABLE, NotificationDelivery, active=True):  # oldest first
        if other.id == row.id:
            return None
        if other.notifier == row.notifier and other.state == "pending":
            return other
    return None


def take_send_slot(engine: NotifyContext, notifier: NotifierSettings) -> float:
    """Take a place in the notifier's rate window and return 0, or return how many seconds
    until one frees (nothing taken). One transaction: replicas share the window."""
    limit = notifier.rate_limit or engine.settings.notify_rate_limit
    window = engine.settings.notify_rate_window_seconds
    if engine.store.get(CHANNEL, notifier.name, NotifyChannel) is None:
        engine.store.put_if_version(CHANNEL, notifier.name, NotifyChannel(id=notifier.name),
                                    active=False, expect=0)
    wait = 0.0

    def take(channel: NotifyChannel) -> NotifyChannel:
        nonlocal wait
        at = time.time()
        recent = sorted(t for t in channel.sent if t > at - window)
        if len(recent) >= limit:
            wait = max(recent[-limit] + window - at, 0.01)
            return channel.model_copy(update={"sent": recent})
        return channel.model_copy(update={"sent": [*recent, at], "version": channel.version + 1})

    engine.store.update(CHANNEL, notifier.name, NotifyChannel, take,
                        placed=lambda _: (False, None))
    return wait


async def post(engine: NotifyContext, notifier: NotifierSettings, row: NotificationDelivery,
               body: bytes) -> tuple[int | None, str | None]:
    """(HTTP status, None) or (None, what went wrong); never raises for the receiver."""
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "hangar-notifier",
        "X-Hangar-Event": row.notification.kind,
        "X-Hangar-Delivery": row.id,  # the same on every retry: a receiver dedupes on it
        "X-Hangar-Signature": signature(notifier.secret.get_secret_value(), body),
    }
    try:
        async with engine.github.session.post(
                notifier.url, data=body, headers=headers, allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=TIMEOUT_S)) as response:
            return response.status, None
    except (aiohttp.ClientError, TimeoutError) as exc:
        return None, type(exc).__name__


# -- what is noticed: each concern's rows, after their steps ------------------------------


def after_review_ask(engine: NotifyContext, row_id: str) -> None:
    """A verified PR's reviewers were asked: it waits for an approval."""
    row = engine.store.get(reviewers.TABLE, row_id, reviewers.ReviewAsk)
    job = engine.get_job(row.job_id) if row else None
    if row is None or job is None or row.asked_head != row.head_sha or row.refused:
        return
    emit(engine, Notification(
        kind="approval.requested", repo=row.repo, installation_id=job.thread.installation_id,
        dedupe_key=f"approval.requested:{row.repo}#{row.pr_number}@{row.head_sha}",
        facts={"pr": row.pr_number, "head_sha": row.head_sha, "asker": job.requested_by,
               "reviewers": [*row.users, *row.teams]}))


def after_land(engine: NotifyContext, request_id: str) -> None:
    request = landing.get(engine, request_id)
    if request is None:
        return
    facts = {"pr": request.pr_number, "base": request.base, "head_sha": request.head_sha}
    if request.state == landing.LandState.CONFLICT:
        emit(engine, Notification(
            kind="land.conflict", repo=request.repo, installation_id=request.installation_id,
            dedupe_key=f"land.conflict:{request.id}@{request.head_sha}", facts=facts))
    elif request.state == landing.LandState.LANDED:
        emit(engine, Notification(
            kind="land.landed", repo=request.repo, installation_id=request.installation_id,
            dedupe_key=f"land.landed:{request.id}@{request.merge_sha}",
            facts={**facts, "merge_sha": request.merge_sha}))


def after_run(engine: NotifyContext, run_id: str) -> None:
    run = engine.get_run(run_id)
    job = engine.get_job(run.job_id) if run else None
    if run is None or job is None:
        return
    where = {"repo": job.thread.repo, "installation_id": job.thread.installation_id}
    if run.state == RunState.LOST:
        emit(engine, Notification(kind="run.lost", dedupe_key=f"run.lost:{run.id}", **where,
                                  facts={"run": run.id, "issue": job.thread.number,
                                         "pr": run.pr_number}))
    threshold = engine.settings.pause_at_pct
    for window in (run.agent or {}).get("usage_windows") or []:
        pct = (window.get("utilization") or 0) * 100
        if pct >= threshold:
            credential = credential_key(run)
            emit(engine, Notification(
                kind="usage.high", **where,
                dedupe_key=f"usage.high:{credential}:{window.get('window')}:"
                           f"{window.get('reset_at')}",
                facts={"credential": credential, "window": window.get("window"),
                       "pct": round(pct, 1), "reset_at": window.get("reset_at"),
                       "threshold_pct": threshold}))


def after_build(engine: NotifyContext, build_id: str) -> None:
    row = engine.store.get(envbuilds.BUILD, build_id, envbuilds.EnvBuildRow)
    if row is None or row.state != "failed":
        return
    emit(engine, Notification(
        kind="build.failed", repo=row.repo, installation_id=row.installation_id,
        dedupe_key=f"build.failed:{row.id}",
        facts={"build": row.id, "environment": row.environment, "provider": row.provider,
               "reason": row.reason}))


def register(engine: Registrations) -> None:
    """Operators' notifications as rows, and what is noticed after each concern's steps."""
    from app.engine import RowKind

    # A notification is due at its next attempt (backoff after a failure).
    engine.register(RowKind("notification", TABLE, NotificationDelivery, advance_delivery,
                            next_at=lambda row: row.next_at))
    engine.after_step("review_ask", after_review_ask)
    engine.after_step("land", after_land)
    engine.after_step("run", after_run)
    engine.after_step("envbuild", after_build)
