"""Where hangar's state lives: one SQLite file (the embedded default) or a PostgreSQL
database (`HANGAR_DATABASE_URL=postgresql://…`, for several replicas), behind one small,
synchronous interface.

Statements are written once, with `?` placeholders, in the SQL both understand; the few
places where the dialects differ ask `Database.dialect`. Every call is one short
transaction: SQLite's file is on the machine, PostgreSQL answers a statement in well
under a millisecond on a unix socket, so the store stays synchronous, as it always was.
PostgreSQL is reached through psycopg 3 (docs/operations.md says why): its synchronous
connections, pooled, serve the store; one asynchronous connection per replica listens
for wake-ups (`LISTEN`) and holds the chores' leader lock.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger(__name__)

SQLITE, POSTGRESQL = "sqlite", "postgresql"
# The channel replicas tell each other of wake-ups on.
CHANNEL = "hangar"


class DatabaseError(Exception):
    """The database cannot serve hangar; the message says why and what to do."""


class Cursor(Protocol):
    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...


class Connection(Protocol):
    """One connection, in autocommit or inside `Database.transaction()`; `?` placeholders."""

    def execute(self, sql: str, params: Sequence[Any] = (), /) -> Cursor: ...
    def executemany(self, sql: str, params: Sequence[Sequence[Any]], /) -> Any: ...


def is_postgresql(target: Any) -> bool:
    return isinstance(target, str) and target.startswith(("postgresql://", "postgres://"))


def describe(target: Path | str) -> str:
    """The database as a person may be told of it: a file's path, or a server's host and
    database name without the user or password."""
    if not is_postgresql(target):
        return str(target)
    from psycopg.conninfo import conninfo_to_dict

    try:
        parts = conninfo_to_dict(str(target))
    except Exception:
        return "the PostgreSQL database of HANGAR_DATABASE_URL"
    host = str(parts.get("host") or "localhost")
    where = "a unix socket" if host.startswith("/") else host
    return f"PostgreSQL database {parts.get('dbname', '?')!r} on {where}"


class Database:
    """A database hangar keeps its rows in. `dialect` is "sqlite" or "postgresql";
    `shared` says whether other processes (replicas) may use it at the same time."""

    dialect: str
    shared: bool
    target: Path | str

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        """A connection in autocommit: each statement is a transaction of its own."""
        raise NotImplementedError
        yield

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """One transaction that takes the write lock at once (SQLite) or rows as it goes
        (PostgreSQL); committed at the end of the block, rolled back on an exception."""
        raise NotImplementedError
        yield

    def close(self) -> None:
        raise NotImplementedError


class SqliteDatabase(Database):
    """One SQLite file in WAL mode.

    `per_thread`: each thread keeps a connection of its own (the sandbox gate checks a
    token on every request, from any thread, beside other writers); otherwise one
    connection serves every thread, one call at a time (the store: its writes are few and
    short, and one connection sees its own writes at once)."""

    dialect = SQLITE
    shared = False

    def __init__(self, path: Path, *, per_thread: bool = False):
        self.target = self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._per_thread = per_thread
        self._lock = threading.RLock()
        self._local = threading.local()
        self._shared_db: sqlite3.Connection | None = None
        # Every thread's own connection, for close(): a connection left open at exit leaves
        # the WAL beside the file, and a later open reads its pages over the file's own.
        self._thread_dbs: list[sqlite3.Connection] = []
        if not per_thread:
            self._shared_db = self._open(check_same_thread=False)

    def _open(self, *, check_same_thread: bool) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None,
                             check_same_thread=check_same_thread)
        db.execute("PRAGMA journal_mode=WAL")
        # A commit is in the WAL, seen by every reader and kept if hangar crashes; the disk
        # is synced at checkpoints, so a crash of the machine may lose the last commits.
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA busy_timeout=30000")
        return db

    def _connection(self) -> sqlite3.Connection:
        if self._shared_db is not None:
            return self._shared_db
        db = getattr(self._local, "db", None)
        if db is None or self._local.pid != os.getpid():  # a forked child opens its own
            # Used by this thread alone; close() may close it from another.
            db = self._open(check_same_thread=False)
            self._local.db, self._local.pid = db, os.getpid()
            with self._lock:
                self._thread_dbs.append(db)
        return db

    @contextmanager
    def connect(self) -> Iterator[sqlite3.Connection]:
        if self._per_thread:
            db = self._connection()
            try:
                yield db
            finally:
                if db.in_transaction:
                    db.rollback()
            return
        with self._lock:
            yield self._connection()

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        with self.connect() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            try:
                db.execute("COMMIT")
            except sqlite3.Error:
                # A COMMIT the disk refused may leave the transaction open: every later
                # BEGIN would fail too, long after the disk has room again.
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise

    @contextmanager
    def held(self) -> Iterator[None]:
        """No call of this process's through the shared connection runs meanwhile: a WAL
        restart would otherwise wait on one commit after another."""
        with self._lock:
            yield

    def close(self) -> None:
        with self._lock:
            if self._shared_db is not None:
                self._shared_db.close()
            opened, self._thread_dbs = self._thread_dbs, []
        for db in opened:
            db.close()
        self._local.db = None


class _Row(tuple):
    """A row read by column number or by name, as sqlite3.Row is."""

    _names: dict[str, int]

    def __getitem__(self, key: Any) -> Any:  # type: ignore[override]
        if isinstance(key, str):
            return tuple.__getitem__(self, self._names[key])
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self._names)


def _row_factory(cursor: Any) -> Callable[[Sequence[Any]], _Row]:
    names = {column.name: i for i, column in enumerate(cursor.description or ())}

    def make(values: Sequence[Any]) -> _Row:
        row = _Row(values)
        row._names = names
        return row

    return make


_PLACEHOLDERS: dict[str, str] = {}


def postgres_sql(sql: str) -> str:
    """hangar's `?` placeholders as psycopg's `%s` (a literal % doubled)."""
    known = _PLACEHOLDERS.get(sql)
    if known is None:
        known = _PLACEHOLDERS[sql] = sql.replace("%", "%%").replace("?", "%s")
    return known


class _PgConnection:
    def __init__(self, conn: Any):
        self._conn = conn

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        return self._conn.execute(postgres_sql(sql), tuple(params) or None)

    def executemany(self, sql: str, params: Sequence[Sequence[Any]]) -> Any:
        params = list(params)
        if not params:
            return None
        with self._conn.cursor() as cursor:
            cursor.executemany(postgres_sql(sql), params)
            return cursor


class PostgresDatabase(Database):
    """A PostgreSQL database, reached through a pool of psycopg connections (autocommit).

    One pool per URL per process: the store and the gate's tables share it."""

    dialect = POSTGRESQL
    shared = True

    def __init__(self, url: str, *, max_connections: int = 10):
        import psycopg
        from psycopg_pool import ConnectionPool

        self.target = self.url = url
        try:  # one connection first: a server that is not there is said at once
            psycopg.connect(url, autocommit=True, connect_timeout=10).close()
        except Exception as exc:
            raise DatabaseError(
                f"hangar cannot reach the {describe(url)} ({_first_line(exc)}): check "
                "HANGAR_DATABASE_URL and that the server accepts hangar's user.") from None
        self._pool = ConnectionPool(
            url, min_size=1, max_size=max_connections, open=False, name="hangar",
            kwargs={"autocommit": True, "row_factory": _row_factory},
            # A connection dropped by the server (a restart, a failover) is found before use.
            check=ConnectionPool.check_connection, timeout=30)
        try:
            self._pool.open(wait=True, timeout=30)
        except Exception as exc:
            self._pool.close()
            raise DatabaseError(
                f"hangar cannot reach the {describe(url)} ({_first_line(exc)}): check "
                "HANGAR_DATABASE_URL and that the server accepts hangar's user.") from None
        self.closed = False

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        with self._pool.connection() as conn:
            yield _PgConnection(conn)

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        with self._pool.connection() as conn, conn.transaction():
            yield _PgConnection(conn)

    async def session(self) -> Any:
        """A connection of its own, outside the pool, in autocommit: for `LISTEN` and the
        leader's advisory lock, which live as long as the connection."""
        import psycopg

        return await psycopg.AsyncConnection.connect(self.url, autocommit=True)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._pool.close()
            _POOLS.pop(self.url, None)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


# One pool per PostgreSQL URL in a process, shared by the store and the gate's tables;
# counted, so that the last to close it closes it.
_POOLS: dict[str, tuple[PostgresDatabase, int]] = {}
_POOLS_LOCK = threading.Lock()


class _SharedPostgres(Database):
    """A handle on a process-wide pool: closing it closes the pool once no one holds it."""

    dialect = POSTGRESQL
    shared = True

    def __init__(self, url: str):
        with _POOLS_LOCK:
            found = _POOLS.get(url)
            if found is None or found[0].closed:
                found = (PostgresDatabase(url), 0)
            self._db = found[0]
            _POOLS[url] = (found[0], found[1] + 1)
        self.target = self.url = url
        self._closed = False

    def connect(self):  # type: ignore[override]
        return self._db.connect()

    def transaction(self):  # type: ignore[override]
        return self._db.transaction()

    async def session(self) -> Any:
        return await self._db.session()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with _POOLS_LOCK:
            db, holders = _POOLS.get(self.url, (self._db, 1))
            if holders <= 1:
                _POOLS.pop(self.url, None)
                db.close()
            else:
                _POOLS[self.url] = (db, holders - 1)


def open_database(target: Path | str | Database, *, per_thread: bool = False) -> Database:
    """The database at `target`: a `postgresql://` URL, or a SQLite file's path."""
    if isinstance(target, Database):
        return target
    if is_postgresql(target):
        return _SharedPostgres(str(target))
    return SqliteDatabase(Path(target), per_thread=per_thread)
