"""hangar's durable state: one SQLite file in WAL mode, or a PostgreSQL database shared
by several replicas (app/database.py; the schema and its versions: app/migrations.py).

Deliveries are stored before the webhook is answered. Jobs, runs and land requests are
pydantic models kept as JSON next to the few columns the engine queries by. With several
replicas, a row is stepped by the one replica that holds its lease, a delivery is handed
to the handlers by the replica that received it (or, once its lease is over, any), named
locks keep work several replicas may do at once to one of them, and the installation's
GitHub budget is kept here for all of them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from app.database import (
    CHANNEL,
    POSTGRESQL,
    Database,
    SqliteDatabase,
    is_postgresql,
    open_database,
)
from app.datadir import REBUILD_FLAG, SERVED_FLAG, private_database
from app.migrations import migrate

M = TypeVar("M", bound=BaseModel)
log = logging.getLogger(__name__)

# How long a delivery stays with the replica that received it before another may take it.
DELIVERY_LEASE_S = 30.0
# A WAL longer than this (pages) is restarted at the next checkpoint: SQLite's own
# automatic checkpoint's bound, about 4 MB.
RESTART_PAST_FRAMES = 1000
# How long a restarting checkpoint waits for readers of the old WAL, writers held back.
RESTART_WAIT_S = 0.2
# The key of the PostgreSQL advisory lock whose holder does the chores.
LEADER_LOCK = 0x68616E68  # "hanh"

# (kind, JSON paths) that an index of the schema serves; Store.find refuses the others.
_INDEXED = {
    ("run", ("$.job_id",)), ("run", ("$.pr_number",)), ("run", ("$.head_sha",)),
    ("job", ("$.thread.repo",)), ("job", ("$.thread.repo", "$.thread.number")),
}


@dataclass(frozen=True)
class Delivery:
    id: str
    event: str
    action: str | None
    repo: str | None
    installation_id: int | None
    received_at: float
    payload: Mapping[str, Any]  # app/intake/payloads.Payload when intake made it
    state: str
    error: str | None
    # What intake validated of the payload (app/intake/payloads.py), kept in memory for the
    # handlers; never stored, so None for a delivery read back from the database.
    parts: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class GitHubSlot:
    """What the shared budget says of one content-creating call: send it after `wait`
    seconds, or not before `limited_until` (then `why` says which limit)."""

    wait: float = 0.0
    limited_until: float = 0.0
    why: str = ""


# See Store.write_deliveries: half a 4 KB page of ASCII, so such a row seldom overflows it.
INLINE_PAYLOAD_CHARS = 2048


class Store:
    """A thin, synchronous store; every call is one short transaction."""

    def __init__(self, target: Path | str | Database, *, checkpoint_every: float | None = None,
                 owner: str = "hangar"):
        """`target`: a SQLite file's path, a `postgresql://` URL, or an open database.

        `checkpoint_every` (seconds, SQLite): copy the WAL back into the database on a
        thread of its own that often, instead of in whichever commit fills the WAL
        (SQLite's way, the default): a commit then never waits for that copy and its two
        fsyncs. `owner`: whose leases this store takes (the replica's name)."""
        self._owns = not isinstance(target, Database)
        if not isinstance(target, Database) and not is_postgresql(target):
            private_database(Path(target))  # 0600, in a 0700 directory
        self.db = open_database(target)
        self.dialect = self.db.dialect
        # Other processes (replicas) write this database at the same time.
        self.shared = self.db.shared
        self.path = Path(target) if self.dialect != POSTGRESQL and not isinstance(
            target, Database) else getattr(self.db, "path", None)
        self.owner = owner
        try:
            migrate(self.db)
        except BaseException:
            if self._owns:
                self.db.close()
            raise
        # The order rows were first written in.
        self._first_written = "seq" if self.dialect == POSTGRESQL else "rowid"
        self._checkpointer: threading.Thread | None = None
        self._stop_checkpoints = threading.Event()
        if checkpoint_every is not None and isinstance(self.db, SqliteDatabase):
            with self.db.connect() as db:
                db.execute("PRAGMA wal_autocheckpoint=0")
            self._checkpointer = threading.Thread(
                target=self._checkpoints, args=(self.db, checkpoint_every),
                name="hangar-checkpoint", daemon=True)
            self._checkpointer.start()
        # Called after a row is written or noted, with (kind, id, model or None); the API's
        # event stream listens here. A listener must be quick and must not raise.
        self.listeners: list[Callable[[str, str, BaseModel | None], None]] = []

    def _changed(self, kind: str, row_id: str, model: BaseModel | None) -> None:
        for listener in self.listeners:
            listener(kind, row_id, model)

    def close(self) -> None:
        if self._checkpointer is not None:
            self._stop_checkpoints.set()
            self._checkpointer.join(timeout=30)
        if self._owns:
            self.db.close()

    def _checkpoints(self, database: SqliteDatabase, every: float) -> None:
        # Its own connection: a PASSIVE checkpoint waits for no reader or writer, and the
        # page copying and fsyncs run without the GIL, beside the event loop. Its busy
        # handler bounds how long a RESTART may hold writers back waiting for readers.
        db = sqlite3.connect(database.path, isolation_level=None, timeout=RESTART_WAIT_S)
        try:
            while not self._stop_checkpoints.wait(every):
                try:
                    _busy, frames, _copied = db.execute(
                        "PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                    if frames > RESTART_PAST_FRAMES:
                        # Under a steady stream of commits a passive checkpoint never
                        # copies the last frame before the next commit, so the WAL never
                        # starts over: it grew by every delivery's payload (700 MB after
                        # 30,000) and each write got slower. A restart copies the few
                        # frames left and makes the next commit write the WAL from its
                        # start. This process's calls wait meanwhile (its commits would
                        # take the lock back again and again); if another's readers keep
                        # the WAL past RESTART_WAIT_S, the next tick tries again.
                        with database.held():
                            db.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
                except sqlite3.Error:
                    log.exception("a WAL checkpoint failed; the next one tries again")
        finally:
            db.close()

    def _tx(self):
        return self.db.transaction()

    def _read(self):
        return self.db.connect()

    # -- deliveries -------------------------------------------------------------------

    def add_delivery(
        self,
        delivery_id: str,
        event: str,
        payload: dict[str, Any],
        *,
        raw: str | None = None,
        received_at: float | None = None,
        state: str = "stored",
    ) -> bool:
        """Store a delivery once; False when this delivery id was stored before.

        `raw` is the payload's JSON as received, stored as is to save encoding it again.
        """
        delivery = Delivery(
            id=delivery_id, event=event, action=payload.get("action"),
            repo=(payload.get("repository") or {}).get("full_name"),
            installation_id=(payload.get("installation") or {}).get("id"),
            received_at=received_at or time.time(), payload=payload, state=state, error=None,
        )
        return self.add_deliveries([(delivery, raw)])[0]

    def add_deliveries(self, items: list[tuple[Delivery, str | None]]) -> list[bool]:
        """Store many deliveries in one transaction; for each, whether it was new."""
        return self.write_deliveries(items, [])

    def write_deliveries(
        self, items: list[tuple[Delivery, str | None]], outcomes: list[tuple[str, str, str | None]]
    ) -> list[bool]:
        """One transaction: store new deliveries, record (id, state, error) outcomes.

        Returns, for each item, whether it was new: the delivery id is the table's key, so
        a redelivery (it keeps its id) sent to any replica is stored once. A new delivery
        is this store's owner's to dispatch for DELIVERY_LEASE_S; then anyone's.

        A payload of up to INLINE_PAYLOAD_CHARS (what intake keeps of a comment is under
        one) goes in the delivery's row: the outcome's update rewrites it within its page,
        and no second table's key, random as delivery ids are, costs a page of the commit
        per delivery. A longer one goes beside the row, where that update leaves it alone.
        """
        fresh = []
        lease_until = time.time() + DELIVERY_LEASE_S
        with self._tx() as db:
            for d, raw in items:
                text = raw if raw is not None else json.dumps(d.payload)
                inline = len(text) <= INLINE_PAYLOAD_CHARS
                new = db.execute(
                    "INSERT INTO deliveries (id, event, action, repo, installation_id,"
                    " received_at, payload, state, error, lease_owner, lease_until)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
                    (d.id, d.event, d.action, d.repo, d.installation_id, d.received_at,
                     text if inline else "", d.state, d.error, self.owner,
                     lease_until)).rowcount == 1
                fresh.append(new)
                if new and not inline:
                    db.execute("INSERT INTO delivery_payloads (id, payload) VALUES (?, ?)",
                               (d.id, text))
            if outcomes:
                at = time.time()
                db.executemany(
                    "UPDATE deliveries SET state = ?, error = ?, dispatched_at = ?,"
                    " lease_until = NULL WHERE id = ?",
                    [(state, error, at, delivery_id) for delivery_id, state, error in outcomes])
        return fresh

    def pending_deliveries(self, limit: int = 100) -> list[Delivery]:
        """Deliveries stored and not yet dispatched, oldest first, that no other replica
        holds: each is this store's owner's for DELIVERY_LEASE_S."""
        now = time.time()
        skip_locked = " FOR UPDATE SKIP LOCKED" if self.dialect == POSTGRESQL else ""
        with self._tx() as db:
            claimed = db.execute(
                "UPDATE deliveries SET lease_owner = ?, lease_until = ? WHERE id IN ("
                " SELECT id FROM deliveries WHERE state = 'stored' AND (lease_owner IS NULL"
                " OR lease_owner = ? OR lease_until IS NULL OR lease_until < ?)"
                f" ORDER BY received_at LIMIT ?{skip_locked}) RETURNING id",
                (self.owner, now + DELIVERY_LEASE_S, self.owner, now, limit)).fetchall()
            if not claimed:
                return []
            ids = [row[0] for row in claimed]
            rows = db.execute(
                _DELIVERY_ROWS + f" WHERE d.id IN ({','.join('?' * len(ids))})"
                " ORDER BY d.received_at", ids).fetchall()
        return [_delivery(r) for r in rows]

    def forget_deliveries(self, received_before: float, limit: int) -> int:
        """Delete up to `limit` handled deliveries received before that time, payloads
        included; how many. One not yet dispatched ('stored') is kept whatever its age."""
        chosen = ("SELECT id FROM deliveries WHERE received_at < ? AND state != 'stored'"
                  " ORDER BY received_at LIMIT ?")
        with self._tx() as db:
            db.execute(f"DELETE FROM delivery_payloads WHERE id IN ({chosen})",
                       (received_before, limit))
            return db.execute(f"DELETE FROM deliveries WHERE id IN ({chosen})",
                              (received_before, limit)).rowcount

    def delivery(self, delivery_id: str) -> Delivery | None:
        with self._read() as db:
            row = db.execute(_DELIVERY_ROWS + " WHERE d.id = ?", (delivery_id,)).fetchone()
        return _delivery(row) if row else None

    def count_deliveries(self, state: str | None = None) -> int:
        query = "SELECT COUNT(*) FROM deliveries"
        args: tuple[str, ...] = ()
        if state:
            query, args = query + " WHERE state = ?", (state,)
        with self._read() as db:
            return db.execute(query, args).fetchone()[0]

    # -- engine rows --------------------------------------------------------------------

    def put(self, kind: str, row_id: str, model: BaseModel, *, active: bool,
            host: str | None = None) -> None:
        """Write a row. `host`: the only host whose replica may step it (its sandbox lives
        there), or None for any."""
        with self._tx() as db:
            self._upsert(db, kind, row_id, model, active, host)
        self._changed(kind, row_id, model)

    def put_if_version(self, kind: str, row_id: str, model: BaseModel, *, active: bool,
                       expect: int) -> bool:
        """Write a row only while the stored one is still at version `expect` (its JSON's
        `version`), or there is none; False, and nothing written, when another writer came
        first. The check and the write are one transaction: a step on one replica cannot
        undo what another replica's intake wrote while it awaited GitHub."""
        lock = " FOR UPDATE" if self.dialect == POSTGRESQL else ""  # SQLite's BEGIN locks
        with self._tx() as db:
            row = db.execute(f"SELECT data FROM rows WHERE kind = ? AND id = ?{lock}",
                             (kind, row_id)).fetchone()
            if row is not None and json.loads(row[0]).get("version", 0) != expect:
                return False
            self._upsert(db, kind, row_id, model, active, None)
        self._changed(kind, row_id, model)
        return True

    def update(self, kind: str, row_id: str, model: type[M], change: Callable[[M], M], *,
               placed: Callable[[M], tuple[bool, str | None]]) -> M:
        """Read the row, change it, write it back, in one transaction: what another
        replica writes meanwhile waits for it and is then changed in turn, never lost.
        `placed`: the changed row's (active, host). Raises KeyError when there is none."""
        lock = " FOR UPDATE" if self.dialect == POSTGRESQL else ""  # SQLite's BEGIN locks
        with self._tx() as db:
            row = db.execute(f"SELECT data FROM rows WHERE kind = ? AND id = ?{lock}",
                             (kind, row_id)).fetchone()
            if row is None:
                raise KeyError(f"no {kind} row {row_id}")
            new = change(model.model_validate_json(row[0]))
            active, host = placed(new)
            self._upsert(db, kind, row_id, new, active, host)
        self._changed(kind, row_id, new)
        return new

    @staticmethod
    def _upsert(db: Any, kind: str, row_id: str, model: BaseModel, active: bool,
                host: str | None) -> None:
        db.execute(
            "INSERT INTO rows (kind, id, active, updated_at, data, host)"
            " VALUES (?, ?, ?, ?, ?, ?)"
            " ON CONFLICT(kind, id) DO UPDATE SET active = excluded.active,"
            " updated_at = excluded.updated_at, data = excluded.data, host = excluded.host",
            (kind, row_id, int(active), time.time(), model.model_dump_json(), host),
        )

    def move(self, kind: str, row_id: str, model: BaseModel) -> bool:
        """Write the row `row_id` as `model`, under the model's id (its repository renamed),
        keeping whether it is active, its host, its lease, its place in the order written
        and its notes. False, and nothing written, when the row is gone or another row
        already has the new id (written under the new name before the rename was heard)."""
        new_id = model.id  # type: ignore[attr-defined]
        with self._tx() as db:
            if new_id != row_id and db.execute(
                    "SELECT 1 FROM rows WHERE kind = ? AND id = ?", (kind, new_id)).fetchone():
                return False
            if not db.execute("UPDATE rows SET id = ?, data = ?, updated_at = ?"
                              " WHERE kind = ? AND id = ?",
                              (new_id, model.model_dump_json(), time.time(), kind,
                               row_id)).rowcount:
                return False
            if new_id != row_id:
                db.execute("UPDATE events SET row_id = ? WHERE row_id = ?", (new_id, row_id))
        self._changed(kind, new_id, model)
        return True

    def get(self, kind: str, row_id: str, model: type[M]) -> M | None:
        with self._read() as db:
            row = db.execute(
                "SELECT data FROM rows WHERE kind = ? AND id = ?", (kind, row_id)
            ).fetchone()
        return model.model_validate_json(row[0]) if row else None

    def delete(self, kind: str, row_id: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM rows WHERE kind = ? AND id = ?", (kind, row_id))

    def all(self, kind: str, model: type[M], *, active: bool | None = None) -> list[M]:
        if active is not None:
            query, args = self.active_query(), [kind, int(active)]
        else:
            query = f"SELECT data FROM rows WHERE kind = ? ORDER BY {self._first_written}"
            args = [kind]
        with self._read() as db:
            rows = db.execute(query, args).fetchall()
        return [model.model_validate_json(r[0]) for r in rows]

    def mentioning(self, kind: str, model: type[M], text: str) -> list[M]:
        """The rows of a kind whose JSON holds `text`, ignoring ASCII case, oldest first.

        For a lookup no index serves, such as a repository's name in whatever field a
        kind keeps it: the database reads every row's text (a tenth of what parsing
        every row costs), only the rows that hold it are parsed into models, and the
        caller decides on those."""
        position = "strpos" if self.dialect == POSTGRESQL else "instr"
        query = (f"SELECT data FROM rows WHERE kind = ? AND {position}(lower(data), ?) > 0"
                 f" ORDER BY {self._first_written}")
        with self._read() as db:
            rows = db.execute(query, (kind, text.lower())).fetchall()
        return [model.model_validate_json(r[0]) for r in rows]

    def active_among(self, kind: str, model: type[M], row_ids: list[str]) -> list[M]:
        """The active rows of a kind among these ids, oldest first (the scheduler's look at
        the rows written or woken since its last look)."""
        with self._read() as db:
            rows = db.execute(
                f"SELECT data FROM rows WHERE kind = ? AND active = 1 AND id IN"
                f" ({','.join('?' * len(row_ids))}) ORDER BY {self._first_written}",
                (kind, *row_ids)).fetchall()
        return [model.model_validate_json(r[0]) for r in rows]

    def find(self, kind: str, model: type[M], **where: Any) -> list[M]:
        """The rows of a kind whose fields equal these, oldest first, through an index.

        Field paths use `__` for a dot (`thread__repo`); only indexed ones are allowed, so
        that no lookup for one event reads the whole history.
        """
        paths = tuple("$." + name.replace("__", ".") for name in where)
        if (kind, paths) not in _INDEXED:
            raise ValueError(f"{kind} rows are not indexed by {', '.join(paths) or 'nothing'}")
        args = list(where.values())
        if self.dialect == POSTGRESQL:
            # The JSON's text, as the index keeps it; None matches nothing, as in SQLite.
            args = [_json_text(value) for value in args]
        with self._read() as db:
            rows = db.execute(self.find_query(kind, paths), args).fetchall()
        return [model.model_validate_json(r[0]) for r in rows]

    def find_query(self, kind: str, paths: tuple[str, ...]) -> str:
        """The statement `find` runs for these JSON paths (`$.thread.repo`)."""
        if self.dialect == POSTGRESQL:
            terms = [f"((data::jsonb) #>> '{{{p[2:].replace('.', ',')}}}') = ?" for p in paths]
        else:
            terms = [f"json_extract(data, '{p}') = ?" for p in paths]
        # The kind is spelled out, not bound: a partial index is used only when it matches.
        return (f"SELECT data FROM rows WHERE kind = '{kind}' AND {' AND '.join(terms)}"
                f" ORDER BY {self._first_written}")

    def active_query(self) -> str:
        """The statement the scheduler's `all(kind, active=True)` runs."""
        return f"SELECT data FROM rows WHERE kind = ? AND active = ? ORDER BY {self._first_written}"

    # -- leases: one replica steps a row at a time -----------------------------------

    def claim(self, kind: str, row_ids: Iterable[str], until: float, *,
              host: str | None = None) -> set[str]:
        """Lease these rows to this store's owner until then: those no other replica holds
        (or whose lease is over), and that need no other host than `host`. The ones taken."""
        row_ids = list(row_ids)
        if not row_ids:
            return set()
        now = time.time()
        skip_locked = " FOR UPDATE SKIP LOCKED" if self.dialect == POSTGRESQL else ""
        with self._tx() as db:
            taken = db.execute(
                "UPDATE rows SET lease_owner = ?, lease_until = ? WHERE kind = ? AND id IN ("
                f" SELECT id FROM rows WHERE kind = ? AND id IN ({','.join('?' * len(row_ids))})"
                " AND (lease_owner IS NULL OR lease_owner = ? OR lease_until IS NULL"
                " OR lease_until < ?) AND (host IS NULL OR host = ?)"
                f"{skip_locked}) RETURNING id",
                (self.owner, until, kind, kind, *row_ids, self.owner, now, host)).fetchall()
        return {row[0] for row in taken}

    def renew(self, keys: Iterable[tuple[str, str]], until: float) -> set[tuple[str, str]]:
        """Extend this owner's leases on these (kind, id) rows; the ones it still held."""
        kept = set()
        with self._tx() as db:
            for kind, row_id in keys:
                if db.execute("UPDATE rows SET lease_until = ? WHERE kind = ? AND id = ?"
                              " AND lease_owner = ?",
                              (until, kind, row_id, self.owner)).rowcount:
                    kept.add((kind, row_id))
        return kept

    def release(self, kind: str, row_id: str) -> None:
        """The step is over: the row is anyone's again."""
        with self._tx() as db:
            db.execute("UPDATE rows SET lease_owner = NULL, lease_until = NULL"
                       " WHERE kind = ? AND id = ? AND lease_owner = ?",
                       (kind, row_id, self.owner))

    def lease_of(self, kind: str, row_id: str) -> tuple[str | None, float | None]:
        with self._read() as db:
            row = db.execute("SELECT lease_owner, lease_until FROM rows WHERE kind = ?"
                             " AND id = ?", (kind, row_id)).fetchone()
        return (row[0], row[1]) if row else (None, None)

    # -- named locks: work that several replicas' steps may do at once ----------------

    def take_lock(self, name: str, until: float) -> bool:
        """Hold the lock `name` until then, if no other owner holds it now."""
        now = time.time()
        with self._tx() as db:
            return db.execute(
                "INSERT INTO locks (name, owner, until) VALUES (?, ?, ?) ON CONFLICT (name)"
                " DO UPDATE SET owner = excluded.owner, until = excluded.until"
                " WHERE locks.owner = excluded.owner OR locks.until < ?",
                (name, self.owner, until, now)).rowcount == 1

    def drop_lock(self, name: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM locks WHERE name = ? AND owner = ?", (name, self.owner))

    # -- flags: what the database says to every replica ---------------------------------

    def has_flag(self, name: str) -> bool:
        with self._read() as db:
            return db.execute("SELECT 1 FROM flags WHERE name = ?", (name,)).fetchone() is not None

    def check_shared_history(self, *, rebuild: bool = False) -> str:
        """How hangar starts on a shared database: "existing" (served from before), "fresh"
        (never served: a rebuild from GitHub is owed, as for a new file) or "rebuild"
        (asked). The flags live in the database, so every replica reads the same answer."""
        fresh = self.set_flag(SERVED_FLAG)
        if fresh or rebuild:
            self.set_flag(REBUILD_FLAG)
        return "rebuild" if rebuild else "fresh" if fresh else "existing"

    def set_flag(self, name: str) -> bool:
        """Raise the flag; whether it was down."""
        with self._tx() as db:
            return db.execute("INSERT INTO flags (name, at) VALUES (?, ?) ON CONFLICT (name)"
                              " DO NOTHING", (name, time.time())).rowcount == 1

    def clear_flag(self, name: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM flags WHERE name = ?", (name,))

    # -- wake-ups across replicas (PostgreSQL's LISTEN/NOTIFY) ------------------------

    def notify(self, message: str) -> None:
        """Tell every replica listening (this one too); nothing with SQLite's one process."""
        if self.dialect != POSTGRESQL:
            return
        with self._read() as db:
            db.execute("SELECT pg_notify(?, ?)", (CHANNEL, message))

    async def listen(self, on_message: Callable[[str], None],
                     ready: asyncio.Event | None = None) -> None:
        """Call on_message with every notification until cancelled, connecting again when
        the connection drops (a wake-up missed meanwhile is caught by the safety poll)."""
        if self.dialect != POSTGRESQL:
            if ready is not None:
                ready.set()
            await asyncio.Event().wait()
            return
        while True:
            try:
                conn = await self.db.session()  # type: ignore[attr-defined]
                try:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    if ready is not None:
                        ready.set()
                    async for message in conn.notifies():
                        on_message(message.payload)
                finally:
                    await conn.close()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("listening for other replicas' wake-ups failed; again in 1 s",
                            extra={"error": repr(exc)})
                await asyncio.sleep(1.0)

    async def lead(self, on_change: Callable[[bool], None], *, every: float = 2.0,
                   stop: Callable[[], Awaitable[None]] | None = None) -> None:
        """Hold the leader lock (an advisory lock, held as long as its connection lives:
        a leader that dies frees it at once) or try for it every `every` seconds; tell
        on_change when this replica becomes the leader or stops being it. With SQLite's
        one process, this process leads."""
        if self.dialect != POSTGRESQL:
            on_change(True)
            await asyncio.Event().wait()
            return
        leading = False
        conn = None
        try:
            while True:
                try:
                    if conn is None or conn.closed:
                        conn = await self.db.session()  # type: ignore[attr-defined]
                    if leading:
                        await conn.execute("SELECT 1")  # the connection, and so the lock, lives
                    else:
                        cursor = await conn.execute("SELECT pg_try_advisory_lock(%s)",
                                                    (LEADER_LOCK,))
                        row = await cursor.fetchone()
                        if row and row[0]:
                            leading = True
                            on_change(True)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    log.warning("the leader lock's connection failed",
                                extra={"error": repr(exc)})
                    if leading:
                        leading = False
                        on_change(False)
                    if conn is not None:
                        await _close_quietly(conn)
                    conn = None
                await asyncio.sleep(every)
        finally:
            if conn is not None:
                await _close_quietly(conn)
            if leading:
                on_change(False)

    # -- the installation's GitHub budget, shared by every replica --------------------

    def github_limited(self, installation_id: int) -> tuple[float, str]:
        """Until when nothing is sent for the installation, and why (0 when free)."""
        with self._read() as db:
            row = db.execute("SELECT limited_until, why FROM github_budget"
                             " WHERE installation_id = ?", (installation_id,)).fetchone()
        return (row[0], row[1]) if row else (0.0, "")

    def limit_github(self, installation_id: int, until: float, why: str) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO github_budget (installation_id, limited_until, why)"
                " VALUES (?, ?, ?) ON CONFLICT (installation_id) DO UPDATE SET"
                " limited_until = excluded.limited_until, why = excluded.why"
                " WHERE github_budget.limited_until < excluded.limited_until",
                (installation_id, until, why))

    def reserve_github_write(self, installation_id: int, *, spacing: float, per_minute: int,
                             per_hour: int, max_wait: float) -> GitHubSlot:
        """A place for one content-creating call among every replica's: `spacing` seconds
        after the last, at most `per_minute` in a minute and `per_hour` in an hour. A slot
        further off than `max_wait` is not taken: the installation pauses instead."""
        now = time.time()
        lock = " FOR UPDATE" if self.dialect == POSTGRESQL else ""
        with self._tx() as db:
            db.execute("INSERT INTO github_budget (installation_id) VALUES (?)"
                       " ON CONFLICT (installation_id) DO NOTHING", (installation_id,))
            limited_until, why, next_write_at = db.execute(
                "SELECT limited_until, why, next_write_at FROM github_budget"
                f" WHERE installation_id = ?{lock}", (installation_id,)).fetchone()
            if limited_until > now:
                return GitHubSlot(limited_until=limited_until, why=why)
            db.execute("DELETE FROM github_writes WHERE installation_id = ? AND at < ?",
                       (installation_id, now - 3600))
            hour = [r[0] for r in db.execute(
                "SELECT at FROM github_writes WHERE installation_id = ? ORDER BY at",
                (installation_id,)).fetchall()]
            if len(hour) >= per_hour:
                until = hour[len(hour) - per_hour] + 3600
                why = f"{len(hour)} content-creating calls in the last hour, GitHub's limit"
                self._limit_in(db, installation_id, until, why)
                return GitHubSlot(limited_until=until, why=why)
            send_at = max(now, next_write_at)
            minute = [at for at in hour if at > send_at - 60]
            if len(minute) >= per_minute:
                send_at = max(send_at, minute[len(minute) - per_minute] + 60)
            if send_at - now > max_wait:
                why = f"{len(minute)} writes in the last minute, GitHub's limit"
                self._limit_in(db, installation_id, send_at, why)
                return GitHubSlot(limited_until=send_at, why=why)
            db.execute("UPDATE github_budget SET next_write_at = ? WHERE installation_id = ?",
                       (send_at + spacing, installation_id))
            db.execute("INSERT INTO github_writes (installation_id, at) VALUES (?, ?)",
                       (installation_id, send_at))
        return GitHubSlot(wait=send_at - now)

    @staticmethod
    def _limit_in(db: Any, installation_id: int, until: float, why: str) -> None:
        db.execute("UPDATE github_budget SET limited_until = ?, why = ? WHERE installation_id = ?"
                   " AND limited_until < ?", (until, why, installation_id, until))

    # -- a timeline per row, for the status comment, the demo and the API --------------

    def note(self, row_id: str, what: str, at: float | None = None) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO events (row_id, at, what) VALUES (?, ?, ?)",
                (row_id, at or time.time(), what),
            )
        self._changed("note", row_id, None)

    def notes(self, row_id: str) -> list[tuple[float, str]]:
        with self._read() as db:
            rows = db.execute(
                "SELECT at, what FROM events WHERE row_id = ? ORDER BY seq", (row_id,)
            ).fetchall()
        return [(r[0], r[1]) for r in rows]

    # -- who changed what through the API, the MCP server or the CLI -----------------

    def audit(self, who: str, action: str, target: str | None, detail: str | None) -> None:
        with self._tx() as db:
            db.execute("INSERT INTO audit (at, who, action, target, detail) VALUES (?, ?, ?, ?, ?)",
                       (time.time(), who, action, target, detail))

    def audit_trail(self, *, after: int = 0, limit: int = 200) -> list[dict[str, Any]]:
        with self._read() as db:
            rows = db.execute(
                "SELECT seq, at, who, action, target, detail FROM audit WHERE seq > ?"
                " ORDER BY seq LIMIT ?", (after, limit)
            ).fetchall()
        keys = ("seq", "at", "who", "action", "target", "detail")
        return [dict(zip(keys, r, strict=True)) for r in rows]


def _json_text(value: Any) -> str | None:
    """A value as PostgreSQL's `#>>` gives it from the row's JSON."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else json.dumps(value)


async def _close_quietly(conn: Any) -> None:
    try:
        await conn.close()
    except Exception:
        pass


# A delivery with its payload from beside it or, stored before there was a beside, from it.
_DELIVERY_ROWS = (
    "SELECT d.id, d.event, d.action, d.repo, d.installation_id, d.received_at, d.state,"
    " d.error, coalesce(p.payload, d.payload) AS payload"
    " FROM deliveries d LEFT JOIN delivery_payloads p ON p.id = d.id")


def _delivery(row: Any) -> Delivery:
    delivery_id, event, action, repo, installation_id, received_at, state, error, text = row
    try:
        payload = json.loads(text)
    except (ValueError, RecursionError):
        payload = {}  # a delivery refused as unreadable keeps its text, not a payload
    return Delivery(id=delivery_id, event=event, action=action, repo=repo,
                    installation_id=installation_id, received_at=received_at, payload=payload,
                    state=state, error=error)
