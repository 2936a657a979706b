"""The engine: durable rows advanced one idempotent step at a time.

Handlers record intents and wake the engine. The reconcile loop looks at every active
row and runs at most one step per row at a time; a step reads the row fresh, acts, and
writes back only the fields it changed. A restart resumes every unfinished row, and a
slow poll catches what a missed webhook would have said.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from cachetools import TTLCache
from pydantic import BaseModel

from app import commands
from app.ghops import RepoOps
from app.github import AppAuth
from app.metrics import Metrics
from app.models import Intent, Job, JobState, Run, Thread
from app.payloads import (
    CheckRunEvent,
    IssueCommentEvent,
    PullRequestEvent,
    PullRequestReviewEvent,
)
from app.settings import Settings
from app.store import Store

log = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)

TICK_S = 1.0
MAX_STEP_FAILURES = 5
PERMISSION_TTL_S = 300
CONFIG_TTL_S = 30
WRITE_PERMISSIONS = ("admin", "maintain", "write")


async def _catch_up(engine: Engine, _row: str) -> None:
    from app.redelivery import catch_up

    await catch_up(engine)


class Engine:
    def __init__(
        self,
        *,
        settings: Settings,
        store: Store,
        auth: AppAuth,
        metrics: Metrics,
        tokens: Any,
        providers: Callable[[str], Any] | None = None,
    ):
        from sandbox.envspec import default_envs_dir, load_envs

        self.settings = settings
        self.store = store
        self.auth = auth
        self.metrics = metrics
        self.tokens = tokens
        self.envs = load_envs(settings.envs_dir or default_envs_dir())
        # Labels every sandbox this hangar makes, so its reaper never touches another's.
        self.instance_id = hashlib.sha256(
            str(Path(settings.data_dir).resolve()).encode()).hexdigest()[:12]
        self._providers: dict[str, Any] = {}
        self._provider_factory = providers or self._make_provider
        self._permissions: TTLCache[tuple[str, str], str] = TTLCache(4096, PERMISSION_TTL_S)
        self._configs: TTLCache[tuple[str, str], str | None] = TTLCache(1024, CONFIG_TTL_S)
        self._wake = asyncio.Event()
        self._tasks: dict[str, asyncio.Task] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._next_catch_up = 0.0
        self._stopping = False
        self._loop_task: asyncio.Task | None = None

    @classmethod
    def from_app(cls, app: Any) -> Engine:
        from app.upstream import TOKENS
        from app.web import AUTH, METRICS, SETTINGS, STORE

        return cls(
            settings=app[SETTINGS], store=app[STORE], auth=app[AUTH], metrics=app[METRICS],
            tokens=app[TOKENS],
        )

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> asyncio.Task:
        self._loop_task = asyncio.get_running_loop().create_task(self._loop(), name="engine")
        return self._loop_task

    async def stop(self) -> None:
        """Stop scheduling; let in-flight steps finish (they are idempotent if cut)."""
        self._stopping = True
        self._wake.set()
        pending = [t for t in self._tasks.values() if not t.done()]
        if pending:
            _, still = await asyncio.wait(
                pending, timeout=self.settings.shutdown_grace_seconds
            )
            for task in still:
                task.cancel()

    def wake(self) -> None:
        self._wake.set()

    async def _loop(self) -> None:
        await self._reap_orphans()
        while not self._stopping:
            self._wake.clear()
            try:
                self._schedule_due()
            except Exception:
                log.exception("engine scheduling failed")
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=TICK_S)
            except TimeoutError:
                pass

    def _schedule_due(self) -> None:
        from app import autofix, intents, landing, runs

        now = time.time()
        for intent in self.store.all("intent", Intent, active=True):
            if intent.retry_at <= now:
                self._schedule(intent.id, "intent", intents.process_intent, intent.id)
        for run in self.store.all("run", Run, active=True):
            if run.retry_at <= now:
                self._schedule(run.id, "run", runs.advance_run, run.id)
        for job in self.store.all("job", Job, active=True):
            self._schedule(job.id, "job", runs.advance_job, job.id)
        for request in self.store.all("land", landing.LandRequest, active=True):
            if request.due_at <= now:
                self._schedule(request.id, "land", landing.advance_land, request.id)
        for row in self.store.all("autofix", autofix.AutofixRow, active=True):
            if row.due_at <= now:
                self._schedule(row.id, "autofix", autofix.advance_autofix, row.id)
        if now >= self._next_catch_up:
            self._next_catch_up = now + self.settings.redelivery_interval_seconds
            self._schedule("redelivery", "redelivery", _catch_up, "app")

    def _schedule(
        self, key: str, kind: str, step: Callable[[Engine, str], Awaitable[None]], row_id: str
    ) -> None:
        task = self._tasks.get(key)
        if task is not None and not task.done():
            return
        self._tasks[key] = asyncio.get_running_loop().create_task(
            self._guarded(kind, step, row_id), name=f"{kind}:{row_id}"
        )

    async def _guarded(
        self, kind: str, step: Callable[[Engine, str], Awaitable[None]], row_id: str
    ) -> None:
        self.metrics.engine_steps.inc(kind=kind)
        try:
            await step(self, row_id)
        except Exception as exc:
            self.metrics.engine_step_errors.inc(kind=kind)
            log.exception("%s step failed", kind, extra={kind: row_id, "error": repr(exc)})
            self._step_failed(kind, row_id, exc)
        if kind in ("intent", "run"):
            # The next step may be due at once (a new run, the next stage): look now.
            # Run steps that must wait (the watch interval, a backoff) set retry_at.
            self.wake()

    def _step_failed(self, kind: str, row_id: str, exc: Exception) -> None:
        """Back off and retry; after MAX_STEP_FAILURES the row ends with the error."""
        if kind == "run":
            from app import runs

            runs.note_failure(self, row_id, exc)
        elif kind == "intent":
            intent = self.store.get("intent", row_id, Intent)
            if intent and time.time() - intent.created_at > 300:
                self.save_intent(intent.model_copy(update={"state": "done",
                                                            "outcome": f"failed: {exc!r}"}))

    async def _reap_orphans(self) -> None:
        """Destroy sandboxes of runs that no longer need one (a crash can leave them)."""
        from app import runs

        try:
            await runs.reap_orphans(self)
        except Exception:
            log.exception("reaping orphan sandboxes failed")

    # -- rows -----------------------------------------------------------------------

    def get_job(self, job_id: str) -> Job | None:
        return self.store.get("job", job_id, Job)

    def get_run(self, run_id: str) -> Run | None:
        return self.store.get("run", run_id, Run)

    def save_job(self, job: Job) -> Job:
        self.store.put("job", job.id, job, active=job.state == JobState.ACTIVE)
        return job

    def save_run(self, run: Run) -> Run:
        self.store.put("run", run.id, run, active=not run.finished)
        return run

    def save_intent(self, intent: Intent) -> Intent:
        self.store.put("intent", intent.id, intent, active=intent.state != "done")
        return intent

    def patch_run(self, run_id: str, **fields: Any) -> Run:
        """Read the run fresh, change only these fields, write it back (no await between)."""
        run = self.get_run(run_id)
        assert run is not None, run_id
        updated = run.model_copy(update=fields)
        return self.save_run(Run.model_validate(updated.model_dump()))

    def patch_job(self, job_id: str, **fields: Any) -> Job:
        job = self.get_job(job_id)
        assert job is not None, job_id
        return self.save_job(Job.model_validate(job.model_copy(update=fields).model_dump()))

    def runs_of(self, job_id: str) -> list[Run]:
        return [r for r in self.store.all("run", Run) if r.job_id == job_id]

    def active_runs(self) -> list[Run]:
        return self.store.all("run", Run, active=True)

    def jobs_on(self, repo: str) -> list[Job]:
        return [j for j in self.store.all("job", Job) if j.thread.repo == repo]

    def note(self, row_id: str, what: str) -> None:
        self.store.note(row_id, what)
        log.info(what, extra={"job" if row_id.startswith("job") else "run": row_id})

    # -- GitHub -----------------------------------------------------------------------

    async def repo_ops(self, thread: Thread) -> RepoOps:
        return RepoOps(await self.auth.client(thread.installation_id), thread.repo)

    async def permission(self, ops: RepoOps, login: str) -> str:
        key = (ops.full_name, login)
        cached = self._permissions.get(key)
        if cached is None:
            cached = await ops.permission(login)
            self._permissions[key] = cached
        return cached

    def lock(self, key: str) -> asyncio.Lock:
        """A lock for work that several rows' steps may do at once (e.g. one comment)."""
        return self._locks.setdefault(key, asyncio.Lock())

    async def config_text(self, ops: RepoOps, ref: str) -> str | None:
        """`.github/hangar.yml` at ref, read at most every CONFIG_TTL_S per repo and ref."""
        from app.repoconfig import CONFIG_PATH

        key = (ops.full_name, ref)
        if key not in self._configs:
            self._configs[key] = await ops.get_text(CONFIG_PATH, ref=ref)
        return self._configs[key]

    async def may_write(self, ops: RepoOps, login: str) -> bool:
        return await self.permission(ops, login) in WRITE_PERMISSIONS

    # -- sandboxes ------------------------------------------------------------------

    def provider(self, name: str) -> Any:
        if name not in self._providers:
            self._providers[name] = self._provider_factory(name)
        return self._providers[name]

    def _make_provider(self, name: str) -> Any:
        from sandbox.providers import get_provider

        if name == "local":
            root = Path(self.settings.data_dir).resolve() / "sandboxes"
            return get_provider(
                "local", root=root, proxy_port=self.settings.port,
                hidden_paths=[Path(self.settings.data_dir).resolve()],
            )
        if name == "docker":
            return get_provider("docker", instance=self.instance_id)
        return get_provider(name)

    # -- intake: handlers call these; they record and wake, nothing slow -----------

    async def record_comment(self, event: IssueCommentEvent) -> None:
        if event.comment.user.is_bot or event.comment.user.login in self.settings.ignored_logins:
            return  # bots, hangar included, never trigger
        if event.installation is None:
            return
        parsed = commands.parse(event.comment.body or "")
        thread = Thread(
            repo=event.repository.full_name,
            number=event.issue.number,
            installation_id=event.installation.id,
            is_pr=event.issue.pull_request is not None,
        )
        for index, item in enumerate(parsed):
            intent_id = f"comment-{event.comment.id}-{index}"
            if self.store.get("intent", intent_id, Intent):
                continue
            is_usage = isinstance(item, commands.UsageError)
            self.save_intent(
                Intent(
                    id=intent_id,
                    thread=thread,
                    comment_id=event.comment.id,
                    author=event.comment.user.login,
                    author_type=event.comment.user.type,
                    command="usage" if is_usage else item.name,
                    args={} if is_usage else dict(item.args),
                    usage_message=item.message if is_usage else None,
                    title=event.issue.title,
                    body=event.issue.body or "",
                    clone_url=event.repository.clone_url or "",
                    default_branch=event.repository.default_branch,
                )
            )
        if parsed:
            self.wake()

    async def record_review(self, event: PullRequestReviewEvent) -> None:
        from app import landing

        landing.record_review(self, event)
        self.wake()

    async def record_pull_request(self, event: PullRequestEvent) -> None:
        from app import landing

        landing.record_pull_request(self, event)
        self.wake()

    async def record_ci(self, repo: str, head_sha: str) -> None:
        from app import landing

        landing.record_ci(self, repo, head_sha)
        self.wake()

    async def record_check_action(self, event: CheckRunEvent) -> None:
        from app import intents

        intents.record_check_action(self, event)
        self.wake()
