"""hangar's durable state: one SQLite file in WAL mode.

Deliveries are stored before the webhook is answered. Jobs, runs and land requests are
pydantic models kept as JSON next to the few columns the engine queries by.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from app.datadir import private_database

M = TypeVar("M", bound=BaseModel)
log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS deliveries (
    id TEXT PRIMARY KEY,
    event TEXT NOT NULL,
    action TEXT,
    repo TEXT,
    installation_id INTEGER,
    received_at REAL NOT NULL,
    payload TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'stored',
    error TEXT,
    dispatched_at REAL
);
CREATE INDEX IF NOT EXISTS deliveries_state ON deliveries(state, received_at);
-- A delivery's payload beside its row, not in it: recording the delivery's outcome then
-- rewrites a row of a hundred bytes, not the payload's pages. Rows stored before this
-- table keep their payload in deliveries.payload; newer rows leave it empty.
CREATE TABLE IF NOT EXISTS delivery_payloads (
    id TEXT PRIMARY KEY,
    payload TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS rows (
    kind TEXT NOT NULL,
    id TEXT NOT NULL,
    active INTEGER NOT NULL,
    updated_at REAL NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (kind, id)
);
CREATE INDEX IF NOT EXISTS rows_active ON rows(kind, active);
-- The engine's lookups: the runs of a job, the run behind a PR or a head, a thread's jobs.
-- Expression indexes over the row's JSON: SQLite keeps them in the row's own transaction.
CREATE INDEX IF NOT EXISTS runs_by_job ON rows(json_extract(data, '$.job_id'))
    WHERE kind = 'run';
CREATE INDEX IF NOT EXISTS runs_by_pr ON rows(json_extract(data, '$.pr_number'))
    WHERE kind = 'run';
CREATE INDEX IF NOT EXISTS runs_by_head ON rows(json_extract(data, '$.head_sha'))
    WHERE kind = 'run';
CREATE INDEX IF NOT EXISTS jobs_by_thread ON rows(
    json_extract(data, '$.thread.repo'), json_extract(data, '$.thread.number'))
    WHERE kind = 'job';
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    row_id TEXT NOT NULL,
    at REAL NOT NULL,
    what TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_row ON events(row_id, seq);
CREATE TABLE IF NOT EXISTS audit (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    who TEXT NOT NULL,
    action TEXT NOT NULL,
    target TEXT,
    detail TEXT
);
"""


# (kind, JSON paths) that an index in _SCHEMA serves; Store.find refuses the others.
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
    payload: dict[str, Any]
    state: str
    error: str | None
    # What intake validated of the payload (app/intake/payloads.py), kept in memory for the
    # handlers; never stored, so None for a delivery read back from the database.
    parts: Any = field(default=None, compare=False, repr=False)


class Store:
    """A thin, synchronous store; every call is one short transaction."""

    def __init__(self, path: Path, *, checkpoint_every: float | None = None):
        """`checkpoint_every` (seconds): copy the WAL back into the database on a thread of
        its own that often, instead of in whichever commit fills the WAL (SQLite's way, the
        default): a commit then never waits for that copy and its two fsyncs."""
        private_database(path)  # 0600, in a 0700 directory
        self.path = path
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=5000")
        self._db.executescript(_SCHEMA)
        self._checkpointer: threading.Thread | None = None
        self._stop_checkpoints = threading.Event()
        if checkpoint_every is not None:
            self._db.execute("PRAGMA wal_autocheckpoint=0")
            self._checkpointer = threading.Thread(
                target=self._checkpoints, args=(checkpoint_every,), name="hangar-checkpoint",
                daemon=True)
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
        with self._lock:
            self._db.close()

    def _checkpoints(self, every: float) -> None:
        # Its own connection: a PASSIVE checkpoint waits for no reader or writer, and the
        # page copying and fsyncs run without the GIL, beside the event loop.
        db = sqlite3.connect(self.path, isolation_level=None)
        try:
            while not self._stop_checkpoints.wait(every):
                try:
                    db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                except sqlite3.Error:
                    log.exception("a WAL checkpoint failed; the next one tries again")
        finally:
            db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            try:
                self._db.execute("COMMIT")
            except sqlite3.Error:
                # A COMMIT the disk refused may leave the transaction open: every later
                # BEGIN would fail too, long after the disk has room again.
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise

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

        Returns, for each item, whether it was new (a redelivery keeps its id).
        """
        ids = [d.id for d, _ in items]
        with self._tx() as db:
            known = {row[0] for row in db.execute(
                f"SELECT id FROM deliveries WHERE id IN ({','.join('?' * len(ids))})", ids)
            } if ids else set()
            fresh, rows, payloads = [], [], []
            for d, raw in items:
                new = d.id not in known
                known.add(d.id)
                fresh.append(new)
                if new:
                    rows.append((d.id, d.event, d.action, d.repo, d.installation_id,
                                 d.received_at, d.state, d.error))
                    payloads.append((d.id, raw if raw is not None else json.dumps(d.payload)))
            db.executemany(
                "INSERT INTO deliveries"
                " (id, event, action, repo, installation_id, received_at, payload, state, error)"
                " VALUES (?, ?, ?, ?, ?, ?, '', ?, ?)", rows)
            db.executemany("INSERT INTO delivery_payloads (id, payload) VALUES (?, ?)", payloads)
            if outcomes:
                at = time.time()
                db.executemany(
                    "UPDATE deliveries SET state = ?, error = ?, dispatched_at = ? WHERE id = ?",
                    [(state, error, at, delivery_id) for delivery_id, state, error in outcomes])
        return fresh

    def pending_deliveries(self, limit: int = 100) -> list[Delivery]:
        with self._lock:
            rows = self._db.execute(
                _DELIVERY_ROWS + " WHERE d.state = 'stored' ORDER BY d.received_at LIMIT ?",
                (limit,),
            ).fetchall()
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
        with self._lock:
            row = self._db.execute(_DELIVERY_ROWS + " WHERE d.id = ?", (delivery_id,)).fetchone()
        return _delivery(row) if row else None

    def count_deliveries(self, state: str | None = None) -> int:
        query, args = "SELECT COUNT(*) FROM deliveries", ()
        if state:
            query, args = query + " WHERE state = ?", (state,)
        with self._lock:
            return self._db.execute(query, args).fetchone()[0]

    # -- engine rows --------------------------------------------------------------------

    def put(self, kind: str, row_id: str, model: BaseModel, *, active: bool) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO rows (kind, id, active, updated_at, data) VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT(kind, id) DO UPDATE SET active = excluded.active,"
                " updated_at = excluded.updated_at, data = excluded.data",
                (kind, row_id, int(active), time.time(), model.model_dump_json()),
            )
        self._changed(kind, row_id, model)

    def get(self, kind: str, row_id: str, model: type[M]) -> M | None:
        with self._lock:
            row = self._db.execute(
                "SELECT data FROM rows WHERE kind = ? AND id = ?", (kind, row_id)
            ).fetchone()
        return model.model_validate_json(row["data"]) if row else None

    def delete(self, kind: str, row_id: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM rows WHERE kind = ? AND id = ?", (kind, row_id))

    def all(self, kind: str, model: type[M], *, active: bool | None = None) -> list[M]:
        query, args = "SELECT data FROM rows WHERE kind = ?", [kind]
        if active is not None:
            query += " AND active = ?"
            args.append(int(active))
        with self._lock:
            rows = self._db.execute(query + " ORDER BY rowid", args).fetchall()
        return [model.model_validate_json(r["data"]) for r in rows]

    def find(self, kind: str, model: type[M], **where: Any) -> list[M]:
        """The rows of a kind whose fields equal these, oldest first, through an index.

        Field paths use `__` for a dot (`thread__repo`); only indexed ones are allowed, so
        that no lookup for one event reads the whole history.
        """
        paths = tuple("$." + name.replace("__", ".") for name in where)
        if (kind, paths) not in _INDEXED:
            raise ValueError(f"{kind} rows are not indexed by {', '.join(paths) or 'nothing'}")
        # The kind is spelled out, not bound: a partial index is used only when it matches.
        terms = [f"kind = '{kind}'", *(f"json_extract(data, '{p}') = ?" for p in paths)]
        args = list(where.values())
        with self._lock:
            rows = self._db.execute(
                f"SELECT data FROM rows WHERE {' AND '.join(terms)} ORDER BY rowid", args
            ).fetchall()
        return [model.model_validate_json(r["data"]) for r in rows]

    # -- a timeline per row, for the status comment, the demo and the API --------------

    def note(self, row_id: str, what: str, at: float | None = None) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO events (row_id, at, what) VALUES (?, ?, ?)",
                (row_id, at or time.time(), what),
            )
        self._changed("note", row_id, None)

    def notes(self, row_id: str) -> list[tuple[float, str]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT at, what FROM events WHERE row_id = ? ORDER BY seq", (row_id,)
            ).fetchall()
        return [(r["at"], r["what"]) for r in rows]


    # -- who changed what through the API, the MCP server or the CLI -----------------

    def audit(self, who: str, action: str, target: str | None, detail: str | None) -> None:
        with self._tx() as db:
            db.execute("INSERT INTO audit (at, who, action, target, detail) VALUES (?, ?, ?, ?, ?)",
                       (time.time(), who, action, target, detail))

    def audit_trail(self, *, after: int = 0, limit: int = 200) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT * FROM audit WHERE seq > ? ORDER BY seq LIMIT ?", (after, limit)
            ).fetchall()
        return [dict(r) for r in rows]


# A delivery with its payload from beside it or, stored before there was a beside, from it.
_DELIVERY_ROWS = (
    "SELECT d.id, d.event, d.action, d.repo, d.installation_id, d.received_at, d.state,"
    " d.error, coalesce(p.payload, d.payload) AS payload"
    " FROM deliveries d LEFT JOIN delivery_payloads p ON p.id = d.id")


def _delivery(row: sqlite3.Row) -> Delivery:
    try:
        payload = json.loads(row["payload"])
    except (ValueError, RecursionError):
        payload = {}  # a delivery refused as unreadable keeps its text, not a payload
    return Delivery(
        id=row["id"],
        event=row["event"],
        action=row["action"],
        repo=row["repo"],
        installation_id=row["installation_id"],
        received_at=row["received_at"],
        payload=payload,
        state=row["state"],
        error=row["error"],
    )
