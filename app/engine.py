"""The engine: durable rows advanced one idempotent step at a time.

Handlers record intents and wake the engine. The reconcile loop looks at every active
row when something may have changed a due time (a row written, a step ended, a wake),
runs each due row's step, at most one per row at a time, and sleeps until the next due
time; a step reads the row fresh, acts, and writes back only the fields it changed. A
restart resumes every unfinished row, and a slow poll catches what a missed webhook
would have said.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Generic, Protocol, TypeVar

from pydantic import BaseModel

from app.creates import CreateInFlight, Creating, Plan
from app.datadir import REBUILD_FLAG, rebuild_pending
from app.github.client import AppAuth, InstallationUnavailable, limited_until
from app.github.ops import RepoOps
from app.github.reads import GitHubReads
from app.metrics import Metrics
from app.models import Deferred, Intent, Job, Rename, Run
from app.pauses import stop_with
from app.rows import JobRows, RowT
from app.settings import Settings
from app.store import Store
from proxy import TokenRegistry
from proxy.egress import EgressLedger
from proxy.gateway import ModelLedger
from sandbox.envspec import EnvSpec
from sandbox.fleet import Fleet, Providers
from sandbox.provider import Provider

log = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)
R = TypeVar("R", bound=BaseModel)  # a kind's row model
T = TypeVar("T")

NEVER = math.inf  # a row due only when a wake names it (and once at the engine's start)
MAX_STEP_FAILURES = 5  # a row whose step raised this many times in a row ends with the error
BACKOFF_MAX_S = 300.0
REBUILD_RETRY_S = 5.0


# What a task cancelled at the end of a stop is given to take its cancel.
CANCEL_MOMENT_S = 0.1
# A rename waiting for another replica's lease looks again this long after it ends.
LEASE_END_MARGIN_S = 0.5


def backoff_delay(failures: int, base: float = 2.0) -> float:
    """Seconds a row waits after its n-th failure in a row: 2, 4, 8, … (from the base
    `step_backoff_seconds`) up to 5 minutes."""
    return min(BACKOFF_MAX_S, base * 2 ** (failures - 1))


def waits_until(exc: BaseException) -> float | None:
    """When a step that raised `exc` may be tried again without counting a failure:
    GitHub's rate limit, or another replica's create that may still be on its way."""
    if isinstance(exc, CreateInFlight):
        return exc.until
    return limited_until(exc)


class StepContext(Protocol):
    """What a step may use: its rows (the store and the row helpers), what it reads of
    GitHub (github: repo_ops, with cached permissions and repository config),
    sandboxes (providers), the sandbox gate's tokens and ledgers, settings, notes for the
    status comment, a lock for work several rows share, and wake. `Engine` is one; a
    test may pass its own."""

    settings: Settings
    store: Store
    # repo_ops, and permissions, config and protection, kept; the App's clients and tokens
    github: GitHubReads
    metrics: Metrics
    tokens: TokenRegistry
    models: ModelLedger | None
    egress: EgressLedger | None
    envs: dict[str, EnvSpec]
    fleet: Fleet  # every sandbox this hangar holds, against HANGAR_MAX_SANDBOXES
    providers: Providers  # sandbox providers by name, counted in the fleet
    instance_id: str
    rebuilding: bool
    command_actions: dict[str, CommandAction]  # each `/hangar` command's action

    def wake(self, *row_ids: str) -> None: ...
    def note(self, row_id: str, what: str) -> None: ...
    def lock(self, key: str) -> AbstractAsyncContextManager[Any]: ...
    def get_job(self, job_id: str) -> Job | None: ...
    def get_run(self, run_id: str) -> Run | None: ...
    def existing_job(self, job_id: str) -> Job: ...
    def creating(self, job_id: str) -> Creating: ...
    def existing_run(self, run_id: str) -> Run: ...
    def save_job(self, job: Job) -> Job: ...
    def save_run(self, run: Run) -> Run: ...
    def save_intent(self, intent: Intent) -> Intent: ...
    def patch_run(self, run_id: str, **fields: Any) -> Run: ...
    def patch_job(self, job_id: str, **fields: Any) -> Job: ...
    def claim_create(self, row: RowT, field: str, key: Any) -> tuple[RowT, Plan]: ...
    def runs_of(self, job_id: str) -> list[Run]: ...
    def active_runs(self) -> list[Run]: ...
    def pr_status(self, repo: str, pr_numbers: list[int]) -> PrStatus: ...
    async def runs_ended(self, job: Job) -> None: ...
    def rename_repositories(self, *renames: Rename) -> list[str]: ...


@dataclass(frozen=True)
class PrNotes:
    """What one concern has to say about one PR in a job's status comment."""

    notes: tuple[str, ...] = ()
    landed: bool = False


@dataclass(frozen=True)
class PrStatus:
    """What every concern has to say about a job's PRs: notes, PR by PR, and the PRs
    that have landed."""

    notes: list[str]
    landed: list[int]


# What a concern says about a PR: (engine, repository, PR number) -> its notes.
StatusNotes = Callable[["Engine", str, int], PrNotes]
# What a concern does once every run of a job has finished, before the job ends.
RunsEnded = Callable[["Engine", Job], Awaitable[None]]


Step = Callable[["Engine", str], Awaitable[None]]
# What a `/hangar` command does: (engine, the repository's operations, the intent) -> its
# outcome (a line kept on the intent), or DEFERRED: the intent waits for the running turn.
CommandAction = Callable[["StepContext", RepoOps, Intent], Awaitable[str | Deferred]]


# Past this many rows written or woken since the last look, one look reads all rows.
MANY_ROWS = 200


def only_when_woken(_row: Any) -> float:
    return NEVER


def _shared_start(texts: list[str]) -> str:
    """The longest start every text shares (of old names as the JSON strings a row keeps
    them in: what a row of any of those repositories holds)."""
    first, last = min(texts), max(texts)
    length = next((n for n, (a, b) in enumerate(zip(first, last, strict=False)) if a != b),
                  min(len(first), len(last)))
    return first[:length]


@dataclass(frozen=True)
class RowKind(Generic[R]):
    """One kind of row the engine advances, as its concern declares it: the table, the
    row model, when a row is next due, the step that advances it, and what ends a row
    whose step failed too often. The engine knows concerns only through these."""

    kind: str  # the metrics label and the log field
    table: str
    model: type[R]
    step: Step
    # When the row is next due, read from the row: a time, 0 for now, or NEVER for only
    # when a wake names it (`engine.wake(row_id)`).
    next_at: Callable[[R], float] = only_when_woken
    give_up: Callable[[Engine, str, str], None] | None = None
    # A run counts its failures in its own row instead of the engine's backoff.
    counts_failures: Callable[[Engine, str, Exception], None] | None = None
    # Commands wait for a rebuild: "not opened by hangar" must not answer its own PR.
    waits_for_rebuild: bool = False
    # How a row follows its repository's new name: the row under it, or None when the row
    # is another repository's (app.models.follows_repo, follows_thread). None: no name kept.
    # It is asked only about rows whose JSON holds the old name as a string, in any case.
    follows_rename: Callable[[R, Rename], R | None] | None = None


@dataclass(frozen=True)
class Chore:
    """Work of the whole engine, not of one row, done at most every `every` seconds while
    `wanted` says so (a rebuild from GitHub, catching up on missed webhooks)."""

    kind: str
    run: Callable[[Engine], Awaitable[object]]  # what it returns is only logged, if at all
    every: Callable[[Engine], float]
    wanted: Callable[[Engine], bool] = lambda _engine: True


class Registrations:
    """What the concerns tell the engine, each in its own `register(engine)` (app/wiring.py
    calls them in turn): row kinds, commands, chores, start-up work, after-step hooks,
    status notes, and what happens when a job's runs end. The engine knows concerns only
    through these."""

    def __init__(self) -> None:
        # Kinds of many row models: each kind's next_at reads its own model's rows.
        self.kinds: dict[str, RowKind[Any]] = {}
        self._kinds_by_table: dict[str, RowKind[Any]] = {}
        self.command_actions: dict[str, CommandAction] = {}
        self.chores: list[Chore] = []
        self._at_start: list[tuple[str, Callable[[Engine], Awaitable[object]]]] = []
        self._after_step: dict[str, list[Callable[[Engine, str], None]]] = {}
        self._status_notes: list[StatusNotes] = []
        self._runs_ended: list[RunsEnded] = []
        self._installation_ended: list[Callable[[Engine, int, str], None]] = []

    def register(self, *kinds: RowKind[Any]) -> None:
        for kind in kinds:
            if kind.kind in self.kinds:
                raise ValueError(f"row kind {kind.kind!r} is registered twice")
            self.kinds[kind.kind] = kind
            self._kinds_by_table[kind.table] = kind

    def on_command(self, actions: Mapping[str, CommandAction]) -> None:
        for name, action in actions.items():
            if name in self.command_actions:
                raise ValueError(f"command {name!r} has two actions")
            self.command_actions[name] = action

    def add_chore(self, chore: Chore) -> None:
        self.chores.append(chore)

    def at_start(self, what: str, run: Callable[[Engine], Awaitable[object]]) -> None:
        """Work before the first tick (reaping orphans); a failure is logged, not fatal."""
        self._at_start.append((what, run))

    def after_step(self, kind: str, hook: Callable[[Engine, str], None]) -> None:
        """Call hook(engine, row_id) after each step of that kind that did not raise."""
        self._after_step.setdefault(kind, []).append(hook)

    def status_notes(self, provider: StatusNotes) -> None:
        """Ask provider(engine, repo, pr_number) what to say about a PR in a job's status
        comment; notes come PR by PR, each PR's in the order the providers were given."""
        self._status_notes.append(provider)

    def order_after_step(self, kind: str, concerns: Sequence[ModuleType]) -> None:
        """Put the after-step hooks of a kind in the order of the concerns (packages or
        modules) they come from; one concern's hooks keep the order it gave them. A hook
        of a concern not named is refused: its place must be said."""
        def place(hook: Callable[[Engine, str], None]) -> int:
            module = hook.__module__
            for at, concern in enumerate(concerns):
                if module == concern.__name__ or module.startswith(concern.__name__ + "."):
                    return at
            raise ValueError(f"an after-step hook of {kind!r} from {module} has no place "
                             "in the order")

        self._after_step[kind] = sorted(self._after_step.get(kind, []), key=place)

    def when_installation_ends(self, hook: Callable[[Engine, int, str], None]) -> None:
        """Call hook(engine, installation_id, how) when a step finds that GitHub mints no
        token for an installation ("suspended", "uninstalled"): its webhook was missed, and
        its work must stop rather than fail step by step."""
        self._installation_ended.append(hook)

    def when_runs_end(self, hook: RunsEnded) -> None:
        """Await hook(engine, job) when every run of an active job has finished, before
        the job ends (fan-out ranks the attempts of `/hangar try N` there)."""
        self._runs_ended.append(hook)


class Engine(Registrations, JobRows):
    def __init__(
        self,
        *,
        settings: Settings,
        store: Store,
        auth: AppAuth,
        metrics: Metrics,
        tokens: TokenRegistry,
        providers: Callable[[str], Provider] | None = None,
        models: ModelLedger | None = None,
        egress: EgressLedger | None = None,
    ):
        from sandbox.envspec import default_envs_dir, load_envs
        from sandbox.providers import configured_provider

        super().__init__()
        self.settings = settings
        self.store = store
        # What steps read of GitHub, with the permissions, config and protection kept.
        self.github = GitHubReads(auth, settings)
        self.metrics = metrics
        self.tokens = tokens
        # The model gateway's ledger: model tokens, usage and rate limits.
        self.models = models
        # The egress proxy's ledger: per-sandbox credentials and refused connections.
        self.egress = egress
        self.envs = load_envs(settings.envs_dir or default_envs_dir())
        # Labels every sandbox this hangar makes, so its reaper never touches another's. With
        # replicas on one database, the replica's name: a run whose sandbox lives on this
        # host (local, docker) is tied to it (`host_of`).
        self.instance_id = hashlib.sha256(
            (settings.replica_name if store.shared else str(Path(settings.data_dir).resolve())
             ).encode()).hexdigest()[:12]
        # A place coming free wakes the rows that waited for one.
        self.fleet = Fleet(settings.max_sandboxes, freed=lambda rows: self.wake(*rows))
        # Each made once, from the settings unless a test gives its own, and counted.
        self.providers = Providers(
            providers or (lambda name: configured_provider(name, settings, self.instance_id)),
            self.fleet)
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._woken: set[str] = set()  # rows a wake named: due at once, once
        # Rows written or stepped since the last look, by id -> table: a look after such
        # a wake reads only these. Anything else (a wake naming no row, the timer, the
        # safety poll) reads every active row.
        self._noted: dict[str, str] = {}
        self._look_all = True
        self._rows_soonest = 0.0  # the soonest row due time the last full look saw
        self._look_at = 0.0  # when the loop looks next, unless woken before
        self._looked = False  # the first look also takes the rows due only when woken
        self._unlooked: set[str] | None = None  # kinds that had no first look yet
        self._tasks: dict[str, asyncio.Task] = {}  # the steps running, by row or chore
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}  # key -> (lock, its users)
        # A row whose step raised is held back: (failures in a row, not before).
        self._failures: dict[str, tuple[int, float]] = {}
        self._chores_due: dict[str, float] = {}
        # Rows whose repository was renamed while their step ran: moved as it ends.
        self._renamed_mid_step: dict[str, tuple[str, list[Rename]]] = {}  # id -> kind, renames
        # A new database waits for what GitHub remembers before it acts on commands.
        self.rebuilding = rebuild_pending(settings.data_dir) or store.has_flag(REBUILD_FLAG)
        self._stopping = False
        # Set as the stop begins: a step pausing before it asks GitHub again ends then.
        self._stopped = asyncio.Event()
        self.started_at = time.time()  # see `creating`
        self._loop_task: asyncio.Task | None = None
        # Replicas on one database (PostgreSQL): a row is stepped by the replica holding
        # its lease; chores by the one holding the leader lock; wake-ups cross by NOTIFY.
        # With SQLite's one process, every lease is this process's and it leads.
        self.leading = not store.shared
        self._leased: dict[str, str] = {}  # row id -> its table, leased by this replica
        self._lease_thread: ThreadPoolExecutor | None = None
        self._leased_now: list[str] = []  # of the last look's due rows, those taken
        self._named_locks: set[str] = set()  # named locks this replica holds (lock())
        self._replica_tasks: list[asyncio.Task] = []
        store.listeners.append(self._row_written)

    def pr_status(self, repo: str, pr_numbers: list[int]) -> PrStatus:
        notes: list[str] = []
        landed: list[int] = []
        for number in pr_numbers:
            said = [provider(self, repo, number) for provider in self._status_notes]
            notes += [note for one in said for note in one.notes]
            if any(one.landed for one in said):
                landed.append(number)
        return PrStatus(notes, landed)

    def rename_repository(self, rename: Rename) -> list[str]:
        """One repository's new name (`rename_repositories`)."""
        return self.rename_repositories(rename)

    def rename_repositories(self, *renames: Rename) -> list[str]:
        """Every row of these repositories', of every kind that keeps their names, under
        the new names (the ids made from a name too); each moved row steps once. The ids
        moved.

        A kind's rows are read once for all the renames (an account's repositories move
        together), and only those whose JSON holds an old name's start are parsed: the
        history of other repositories is never read into models.

        A row whose step is running would be written back under its old id when the step
        ends, beside the moved one: it moves once its step has ended, here as the step
        ends, and on another replica's lease at the lease's end."""
        if not renames:
            return []
        start = _shared_start(['"' + rename.old.lower() + '"' for rename in renames])
        moved = []
        lease_ends: list[float] = []
        waiting: list[Rename] = []
        for kind in self.kinds.values():
            if kind.follows_rename is None:
                continue
            for row in self.store.mentioning(kind.table, kind.model, start):
                for rename in renames:
                    new = kind.follows_rename(row, rename)
                    if new is not None:
                        break
                else:
                    continue
                if self._running(row.id):
                    self._renamed_mid_step.setdefault(row.id, (kind.kind, []))[1].append(
                        rename)
                    continue
                held_until = self._held_elsewhere(kind, row.id)
                if held_until is not None:
                    lease_ends.append(held_until)
                    waiting.append(rename)
                    continue
                if self.store.move(kind.table, row.id, new):
                    moved.append(new.id)
        if lease_ends and self._loop is not None:
            self._loop.call_later(max(lease_ends) - time.time() + LEASE_END_MARGIN_S,
                                  self.rename_repositories, *dict.fromkeys(waiting))
        if moved:
            self.wake(*moved)
        return moved

    def _held_elsewhere(self, kind: RowKind, row_id: str) -> float | None:
        """When another replica's lease on the row ends, while it holds one (its step may
        be running there); None when no other replica holds it."""
        if not self.store.shared:
            return None
        owner, until = self.store.lease_of(kind.table, row_id)
        if owner is None or owner == self.store.owner or until is None or until <= time.time():
            return None
        return until

    def _renames_after_steps(self, *row_ids: str) -> None:
        for row_id in row_ids:
            try:
                self._rename_after_step(row_id)
            except Exception:  # it keeps its old name, which GitHub redirects
                log.exception("moving a row renamed during its step failed",
                              extra={"row": row_id})

    def _rename_after_step(self, row_id: str) -> None:
        """The renames heard while the row's step ran, now that it has ended."""
        kind, renames = self._renamed_mid_step.pop(row_id, ("", []))
        registered = self.kinds.get(kind)
        if not renames or registered is None or registered.follows_rename is None:
            return
        for rename in renames:
            row = self.store.get(registered.table, row_id, registered.model)
            new = registered.follows_rename(row, rename) if row is not None else None
            if new is not None and self.store.move(registered.table, row_id, new):
                self.wake(new.id)
                row_id = new.id

    async def runs_ended(self, job: Job) -> None:
        for hook in self._runs_ended:
            await hook(self, job)

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> asyncio.Task:
        self._loop = asyncio.get_running_loop()
        self._loop_task = self._loop.create_task(self._loop_forever(), name="engine")
        if self.store.shared:
            self._replica_tasks = [
                self._loop.create_task(self.store.listen(self._heard), name="listen"),
                self._loop.create_task(self.store.lead(self._lead_changed), name="lead"),
                self._loop.create_task(self._renew_leases(), name="leases"),
            ]
        return self._loop_task

    async def stop(self) -> None:
        """Stop scheduling; let in-flight steps finish (they are idempotent if cut), all
        within one shutdown grace: what runs hangar (Kubernetes: 30 s by default) kills
        it when a stop takes longer."""
        self._stopping = True
        self._stopped.set()
        self._wake.set()
        deadline = time.monotonic() + self.settings.shutdown_grace_seconds
        pending = [t for t in self._tasks.values() if not t.done()]
        if pending:
            _, still = await asyncio.wait(pending, timeout=self.settings.shutdown_grace_seconds)
            for task in still:
                task.cancel()
        # The replica's tasks hold the leases of the steps above until they end.
        for task in self._replica_tasks:
            task.cancel()
        if self._replica_tasks:
            # A task blocked in the database's driver may not see its cancel at once: it
            # has what is left of the grace, and a moment to take its cancel.
            left = max(deadline - time.monotonic(), CANCEL_MOMENT_S)
            await asyncio.wait(self._replica_tasks, timeout=left)
        if self._lease_thread is not None:
            self._lease_thread.shutdown(wait=False)
            self._lease_thread = None
        # The steps a stop cut (cancelled at the grace's end, or in a pause) never got to
        # move their rows after a rename: the rows move now, before the restart.
        self._renames_after_steps(*self._renamed_mid_step)
        await self.providers.close()  # the waits for agents' ends (sandbox.exits)

    def wake(self, *row_ids: str) -> None:
        """Look at the due times again now; the rows named are due at once (once), on
        whichever replica leases them first."""
        self._woken.update(row_ids)
        if not row_ids:
            self._look_all = True
        if row_ids and self.store.shared:
            self._tell_replicas("wake", *row_ids)
        self._look_soon()

    def quiet(self, for_seconds: float) -> bool:
        """No step runs, no write or wake waits for a look, and the next look is at least
        `for_seconds` away: what this engine does next waits for a time or an event. Asked
        on the engine's loop (between two looks); the end-to-end tests wait on it."""
        return (not self._wake.is_set() and not self._noted and not self._woken
                and all(task.done() for task in self._tasks.values())
                and self._look_at >= time.time() + for_seconds)

    def _note(self, table: str, row_id: str) -> None:
        """Look at this row again now, and only at the rows noted or woken since."""
        loop = self._loop
        if loop is not None and _running_loop() is not loop:  # a write from another thread
            if not loop.is_closed():  # a closed loop's engine has stopped: nothing to look
                loop.call_soon_threadsafe(self._note, table, row_id)
            return
        self._noted[row_id] = table
        self._look_soon()

    def _look_soon(self) -> None:
        loop = self._loop
        if loop is None or _running_loop() is loop:
            self._wake.set()
        elif not loop.is_closed():  # a write from another thread
            loop.call_soon_threadsafe(self._wake.set)

    def _row_written(self, table: str, row_id: str, model: BaseModel | None) -> None:
        """A row was written: if it is now due before the loop's next look, look now. A
        row whose step is running is looked at when the step ends."""
        kind = self._kinds_by_table.get(table)
        if kind is None or model is None or self._running(row_id):
            return
        at = max(kind.next_at(model), self.held_until(row_id))
        if at < self._look_at:
            self._note(table, row_id)
        if self.store.shared and at < time.time() + self.settings.engine_safety_poll_seconds:
            self._tell_replicas("due", f"{row_id}@{at}")  # sooner than their safety poll

    # -- replicas: wake-ups, leadership and leases across processes ------------------

    def _tell_replicas(self, what: str, *words: str) -> None:
        try:
            self.store.notify(" ".join((what, self.store.owner, *words)))
        except Exception:  # the safety poll sees it instead
            log.warning("could not tell the other replicas of a wake-up", exc_info=True)

    def _heard(self, message: str) -> None:
        """Another replica's wake-up (NOTIFY): rows due at once, or due sooner."""
        what, sender, *words = message.split(" ")
        if sender == self.store.owner:
            return
        if what == "wake":
            self._woken.update(words)
            self._wake.set()
        elif what == "due":
            for word in words:
                _, _, at = word.rpartition("@")
                if float(at) < self._look_at:
                    self._look_all = True
                    self._wake.set()

    def _lead_changed(self, leading: bool) -> None:
        log.info("this replica %s the chores", "does" if leading else "no longer does",
                 extra={"replica": self.store.owner})
        self.leading = leading
        self._look_all = True
        self._wake.set()

    async def _renew_leases(self) -> None:
        """Every third of a lease: the rows whose steps run here, and the named locks held
        here, stay this replica's. One found lost (this replica stalled past its lease) is
        said: another replica may be stepping it too."""
        every = self.settings.lease_seconds / 3
        while True:
            await asyncio.sleep(every)
            until = time.time() + self.settings.lease_seconds
            held = {(table, row_id) for row_id, table in list(self._leased.items())
                    if self._running(row_id)}
            try:
                kept = await self._on_lease_thread(self.store.renew, held, until)
                for name in list(self._named_locks):
                    await self._on_lease_thread(self.store.take_lock, name, until)
            except Exception:
                log.warning("could not renew this replica's leases", exc_info=True)
                continue
            for table, row_id in held - kept:
                log.error("lost the lease of a row whose step still runs here",
                          extra={"row": row_id, "table": table})

    async def _on_lease_thread(self, call: Callable[..., T], *args: Any) -> T:
        """On a thread of the leases' own: a renewal never queues behind the steps' work
        in the loop's shared threads (git, sandboxes), and a busy replica keeps its rows."""
        if self._lease_thread is None:
            self._lease_thread = ThreadPoolExecutor(1, thread_name_prefix="hangar-leases")
        return await asyncio.get_running_loop().run_in_executor(
            self._lease_thread, functools.partial(call, *args))

    async def _loop_forever(self) -> None:
        for what, run in self._at_start:
            try:
                await run(self)
            except Exception:
                log.exception("%s failed", what)
        while not self._stopping:
            self._wake.clear()
            try:
                look_at = self._schedule_due()
            except Exception:
                log.exception("engine scheduling failed")
                look_at = time.time() + self.settings.step_backoff_seconds
            self._look_at = look_at
            try:
                # asyncio.timeout, not wait_for: Python 3.11's wait_for drops a cancel that
                # comes as the wake does, and this loop would then run on for ever.
                async with asyncio.timeout(max(0.0, look_at - time.time())):
                    await self._wake.wait()
            except TimeoutError:
                self._look_all = True  # a row's due time or the safety poll

    def _schedule_due(self) -> float:
        """Start the step of every due row and chore; when the next one is due (at the
        latest after the safety poll, which sees writes no wake told of).

        A look after a row was written, stepped or named reads only those rows: the others
        are as the last full look saw them, and it keeps their soonest due time."""
        self.metrics.engine_looks.inc()
        now = time.time()
        look_all, self._look_all = self._look_all, False
        noted, self._noted = self._noted, {}
        look_all = look_all or len(noted) + len(self._woken) > MANY_ROWS
        soonest = now + self.settings.engine_safety_poll_seconds
        for chore in self.chores:
            if not self.leading or not chore.wanted(self):
                continue  # chores are the leader's
            if now >= self._chores_due.get(chore.kind, 0.0):
                self._chores_due[chore.kind] = now + chore.every(self)
                self._schedule(chore.kind, chore.kind, _chore_step(chore), "app")
            soonest = min(soonest, self._chores_due[chore.kind])
        # Wakes are kept in memory: at the start, the rows only a wake makes due are due.
        whole, self._looked = not self._looked, True
        if self._unlooked is None:
            self._unlooked = set(self.kinds)
        woken, self._woken = self._woken, set()
        if self.rebuilding and self.store.shared:  # the leader's rebuild ends it for all
            self.rebuilding = self.store.has_flag(REBUILD_FLAG)
        rows_soonest = soonest
        for kind in self.kinds.values():
            if kind.waits_for_rebuild and self.rebuilding:
                # The end of the rebuild wakes the engine. What only this look would make
                # due stays due for that one: its first look, and a wake naming its row.
                if woken:
                    self._woken.update(row.id for row in self.store.active_among(
                        kind.table, kind.model, list(woken)))
                continue
            first = kind.kind in self._unlooked
            self._unlooked.discard(kind.kind)
            due: list[str] = []
            if look_all or first:
                rows = self.store.all(kind.table, kind.model, active=True)
            else:
                # A woken id names no table: it is looked for in each.
                ids = [row_id for row_id, table in noted.items() if table == kind.table]
                ids += [row_id for row_id in woken if row_id not in noted]
                rows = self.store.active_among(kind.table, kind.model, ids) if ids else []
            for row in rows:
                at = kind.next_at(row)
                # A row due only when woken is due at the first look, and again once the
                # hold after a failed step ends: nothing else would ever try it again.
                if row.id in woken or (at == NEVER and (first or row.id in self._failures)):
                    at = 0.0
                if self._running(row.id):
                    if row.id in woken:
                        self._woken.add(row.id)  # woken while its step ran: due after it
                    continue
                at = max(at, self.held_until(row.id))
                if at <= now:
                    due.append(row.id)
                    continue
                if row.id in woken:
                    self._woken.add(row.id)  # held back after a failure: due when it ends
                rows_soonest = min(rows_soonest, at)
            for row_id in self._lease(kind, due, woken):
                self._schedule(row_id, kind.kind, kind.step, row_id)
            if len(due) > len(self._leased_now):
                # Another replica steps the rest (or its host's replica must): look again
                # once a lease of a replica that died would have run out.
                rows_soonest = min(rows_soonest, now + self.settings.lease_seconds)
        if look_all or whole:
            self._rows_soonest = rows_soonest
        else:
            self._rows_soonest = rows_soonest = min(rows_soonest, self._rows_soonest)
        return min(soonest, rows_soonest)

    def _lease(self, kind: RowKind, due: list[str], woken: set[str]) -> list[str]:
        """The due rows this replica may step now: all of them with SQLite's one process;
        with replicas, those whose lease it took. A woken row another replica holds stays
        woken here, in case that replica died before it could step it."""
        if not self.store.shared or not due:
            self._leased_now = due
            return due
        try:
            taken = self.store.claim(kind.table, due, time.time() + self.settings.lease_seconds,
                                     host=self.instance_id)
        except Exception:
            log.exception("could not lease due rows", extra={"table": kind.table})
            taken = set()
        self._leased_now = [row_id for row_id in due if row_id in taken]
        for row_id in due:
            if row_id in taken:
                self._leased[row_id] = kind.table
            elif row_id in woken:
                self._woken.add(row_id)
        return self._leased_now

    def _running(self, key: str) -> bool:
        task = self._tasks.get(key)
        return task is not None and not task.done()

    def _schedule(
        self, key: str, kind: str, step: Callable[[Engine, str], Awaitable[None]], row_id: str
    ) -> None:
        if self._running(key):
            return
        if self.held_until(key) > time.time():
            return  # backing off after a failure
        task = asyncio.get_running_loop().create_task(
            self._guarded(kind, step, row_id, key), name=f"{kind}:{row_id}")
        self._tasks[key] = task
        task.add_done_callback(functools.partial(self._forget_task, key))

    def _forget_task(self, key: str, task: asyncio.Task) -> None:
        # Only running steps are kept: one per row ever stepped would be kept otherwise.
        # The row's next step may already have taken the key.
        if self._tasks.get(key) is task:
            del self._tasks[key]

    def held_until(self, key: str) -> float:
        return self._failures.get(key, (0, 0.0))[1]

    async def _guarded(
        self, kind: str, step: Callable[[Engine, str], Awaitable[None]], row_id: str,
        key: str | None = None,
    ) -> None:
        key = key or row_id
        self.metrics.engine_steps.inc(kind=kind)
        stop_with(self._stopped)
        try:
            await step(self, row_id)
        except Exception as exc:
            if waits_until(exc) is not None:  # GitHub, or a create, asked it to wait
                log.info("%s step waits: %s", kind, exc, extra={kind: row_id})
            elif isinstance(exc, InstallationUnavailable):
                log.info("%s step stopped: %s", kind, exc, extra={kind: row_id})
                self._end_installation(exc)
            else:
                self.metrics.engine_step_errors.inc(kind=kind)
                log.exception("%s step failed", kind, extra={kind: row_id, "error": repr(exc)})
            self._back_off(kind, row_id, key, exc)
        else:
            self._failures.pop(key, None)
            self._release(key)
        if key == row_id and row_id in self._renamed_mid_step:
            self._renames_after_steps(row_id)
        try:
            self._after(kind, row_id)
        finally:
            # The row's next due time (the next stage, a wait, a backoff) is seen at once.
            registered = self.kinds.get(kind)
            if registered is not None and key == row_id:
                self._note(registered.table, row_id)
            else:
                self._look_soon()  # a chore: its next time is the engine's own

    def _end_installation(self, exc: InstallationUnavailable) -> None:
        """The installation's work stops (again: the hooks find stopped work stopped)."""
        for hook in self._installation_ended:
            try:
                hook(self, exc.installation_id, exc.how)
            except Exception:
                log.exception("stopping the work of an installation GitHub refused failed",
                              extra={"installation_id": exc.installation_id})

    def _after(self, kind: str, row_id: str) -> None:
        """What waits on a row of `kind` hears that its step ended, whether or not it
        raised: a step may move its row and fail after (a run marked done, then a full disk
        refusing its status edit), and its job, its review replies and landing must still
        look. Each hook reads the row as it is now, so one that finds nothing new does
        nothing."""
        for hook in self._after_step.get(kind, ()):
            try:
                hook(self, row_id)
            except Exception:  # one hook's failure (a full disk) never ends the task's
                self.metrics.engine_step_errors.inc(kind=f"after:{kind}")
                log.exception("an after-step hook of %s failed", kind, extra={kind: row_id})

    def _back_off(self, kind: str, row_id: str, key: str, exc: Exception) -> None:
        """Hold the row back, twice as long after each failure in a row (a rate limit:
        until its reset, without counting); after MAX_STEP_FAILURES the row ends with
        the error, in a state that says what happened.

        The hold is kept in memory whatever the store says: a row whose failure cannot be
        recorded (a full disk) waits as long as one whose failure was, and never spins."""
        failures, _ = self._failures.get(key, (0, 0.0))
        reset = waits_until(exc)
        if reset is not None:
            self._failures[key] = (failures, reset)
            self._release(key, hold_until=reset)
            return
        failures += 1
        self._failures[key] = (failures, time.time() + backoff_delay(
            failures, self.settings.step_backoff_seconds))
        self._release(key, hold_until=self._failures[key][1])
        registered = self.kinds.get(kind)
        try:
            if registered is not None and registered.counts_failures is not None:
                # The row counts and holds itself; the memory's hold stands in when the
                # row cannot be written, and is dropped once it could.
                registered.counts_failures(self, row_id, exc)
                self._failures.pop(key, None)
            elif failures >= MAX_STEP_FAILURES:
                self._give_up(kind, row_id, exc)
                self._failures.pop(key, None)
        except Exception:
            self.metrics.engine_step_errors.inc(kind=f"backoff:{kind}")
            log.exception("could not record the failure of a %s step; holding it back in "
                          "memory", kind, extra={kind: row_id, "failures": failures})

    def _release(self, key: str, *, hold_until: float | None = None) -> None:
        """The step is over: its row's lease ends, or, for a row backing off after a
        failure, lasts until the hold ends (no other replica tries it sooner)."""
        table = self._leased.pop(key, None)
        if table is None:
            return
        try:
            if hold_until is None:
                self.store.release(table, key)
            else:
                self.store.renew([(table, key)], hold_until)
        except Exception:  # the lease runs out on its own
            log.warning("could not end a row's lease", extra={"row": key}, exc_info=True)

    def _give_up(self, kind: str, row_id: str, exc: Exception) -> None:
        reason = f"{type(exc).__name__}: {exc}"[:500]
        log.error("%s step failed %d times in a row; giving up", kind, MAX_STEP_FAILURES,
                  extra={kind: row_id, "error": reason})
        registered = self.kinds.get(kind)
        if registered is not None and registered.give_up is not None:
            registered.give_up(self, row_id, reason)

    def note(self, row_id: str, what: str) -> None:
        self.store.note(row_id, what)
        log.info(what, extra={"job" if row_id.startswith("job") else "run": row_id})

    @asynccontextmanager
    async def lock(self, key: str) -> AsyncIterator[None]:
        """A lock for work that several rows' steps may do at once (e.g. one comment); with
        replicas, held in the store too, so that one replica at a time does it. It lives
        while someone holds or waits for it: a key per job would otherwise keep one for
        every job this hangar ever had."""
        local, users = self._locks.get(key) or (asyncio.Lock(), 0)
        self._locks[key] = (local, users + 1)
        try:
            async with _SharedLock(self, key, local) if self.store.shared else local:
                yield
        finally:
            local, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (local, users - 1)


class _SharedLock:
    """This process's lock, then the store's named lock of the same name: one replica at a
    time. A holder that dies frees it when its lease runs out."""

    TRY_EVERY_S = 0.1

    def __init__(self, engine: Engine, name: str, local: asyncio.Lock):
        self.engine, self.name, self.local = engine, name, local

    async def __aenter__(self) -> None:
        await self.local.acquire()
        try:
            lease = self.engine.settings.lease_seconds
            # Another replica's release reaches no event here: ask again shortly.
            while not self.engine.store.take_lock(self.name, time.time() + lease):  # noqa: ASYNC110
                await asyncio.sleep(self.TRY_EVERY_S)
            self.engine._named_locks.add(self.name)
        except BaseException:
            self.local.release()
            raise

    async def __aexit__(self, *_exc: Any) -> None:
        self.engine._named_locks.discard(self.name)
        try:
            self.engine.store.drop_lock(self.name)
        finally:
            self.local.release()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _chore_step(chore: Chore) -> Step:
    async def step(engine: Engine, _row: str) -> None:
        await chore.run(engine)

    return step

