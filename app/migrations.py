"""hangar's schema, version by version, for both databases.

Each migration is a list of statements, written once in SQLite's words and said in
PostgreSQL's by `_postgres` (its float is 8 bytes, its ids are identities, a row's JSON is
read with `::jsonb`). `migrate` runs, in one transaction, the versions a database lacks,
and refuses a database newer than this hangar: the code that wrote it knows rows this one
would misread. Version 1 is the schema hangar had before versions were counted, written
so that it leaves a database of that time as it was.

A new table or column is a new version at the end of `MIGRATIONS`; a version once
released is never edited.
"""

from __future__ import annotations

import re
import time

from app.database import POSTGRESQL, Connection, Database, DatabaseError, describe

_V1_STORE = [
    """CREATE TABLE IF NOT EXISTS deliveries (
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
)""",
    "CREATE INDEX IF NOT EXISTS deliveries_state ON deliveries(state, received_at)",
    # A long payload beside its delivery's row, not in it: recording the delivery's outcome
    # then rewrites a row of a hundred bytes, not the payload's pages. A short one, and
    # every one stored before this table, is in deliveries.payload (Store.write_deliveries).
    """CREATE TABLE IF NOT EXISTS delivery_payloads (
    id TEXT PRIMARY KEY,
    payload TEXT NOT NULL
)""",
    """CREATE TABLE IF NOT EXISTS rows (
    kind TEXT NOT NULL,
    id TEXT NOT NULL,
    active INTEGER NOT NULL,
    updated_at REAL NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (kind, id)
)""",
    "CREATE INDEX IF NOT EXISTS rows_active ON rows(kind, active)",
    # The engine's lookups: the runs of a job, the run behind a PR or a head, a thread's
    # jobs. Expression indexes over the row's JSON, kept in the row's own transaction.
    "CREATE INDEX IF NOT EXISTS runs_by_job ON rows(json_extract(data, '$.job_id'))"
    " WHERE kind = 'run'",
    "CREATE INDEX IF NOT EXISTS runs_by_pr ON rows(json_extract(data, '$.pr_number'))"
    " WHERE kind = 'run'",
    "CREATE INDEX IF NOT EXISTS runs_by_head ON rows(json_extract(data, '$.head_sha'))"
    " WHERE kind = 'run'",
    "CREATE INDEX IF NOT EXISTS jobs_by_thread ON rows(json_extract(data, '$.thread.repo'),"
    " json_extract(data, '$.thread.number')) WHERE kind = 'job'",
    """CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    row_id TEXT NOT NULL,
    at REAL NOT NULL,
    what TEXT NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS events_row ON events(row_id, seq)",
    """CREATE TABLE IF NOT EXISTS audit (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    who TEXT NOT NULL,
    action TEXT NOT NULL,
    target TEXT,
    detail TEXT
)""",
]

# The sandbox gate's tables: every sandbox's git grant (whose life bounds its other
# credentials), its pushes, its model and egress credentials, and what they used.
_V1_GATE = [
    """CREATE TABLE IF NOT EXISTS proxy_tokens (
    sandbox_id TEXT PRIMARY KEY,
    token_sha256 TEXT NOT NULL,
    repo TEXT NOT NULL,
    branch TEXT NOT NULL,
    installation_id INTEGER,
    allow_force INTEGER NOT NULL,
    issued_at REAL NOT NULL,
    revoked_at REAL
)""",
    "CREATE INDEX IF NOT EXISTS proxy_tokens_branch ON proxy_tokens(repo, branch)",
    """CREATE TABLE IF NOT EXISTS proxy_pushes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    sandbox_id TEXT NOT NULL,
    repo TEXT NOT NULL,
    ref TEXT NOT NULL,
    old TEXT NOT NULL,
    new TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    at REAL NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS proxy_pushes_sandbox ON proxy_pushes(sandbox_id, seq)",
    # The branch's tip when a rebase update's token was issued: the one force-push allowed.
    """CREATE TABLE IF NOT EXISTS proxy_leases (
    sandbox_id TEXT PRIMARY KEY,
    old TEXT NOT NULL
)""",
    """CREATE TABLE IF NOT EXISTS model_tokens (
    sandbox_id TEXT PRIMARY KEY,
    token_sha256 TEXT NOT NULL,
    credential TEXT NOT NULL,
    run_id TEXT NOT NULL,
    issued_at REAL NOT NULL,
    revoked_at REAL
)""",
    """CREATE TABLE IF NOT EXISTS model_usage (
    run_id TEXT PRIMARY KEY,
    credential TEXT NOT NULL,
    requests INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    cost_usd REAL,
    last_status INTEGER,
    last_error TEXT,
    reset_at REAL,
    at REAL NOT NULL
)""",
    # One row per request answered (or not reached), written from the answer's first
    # byte: a request cut by a crash or a restart of hangar is still there, still "open".
    """CREATE TABLE IF NOT EXISTS model_requests (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    credential TEXT NOT NULL,
    status INTEGER,
    outcome TEXT NOT NULL,
    error_type TEXT,
    started_at REAL NOT NULL,
    last_byte_at REAL,
    ended_at REAL
)""",
    "CREATE INDEX IF NOT EXISTS model_requests_run ON model_requests(run_id, id)",
    """CREATE TABLE IF NOT EXISTS model_windows (
    credential TEXT NOT NULL,
    "window" TEXT NOT NULL,
    utilization REAL NOT NULL,
    reset_at REAL,
    status TEXT,
    source TEXT NOT NULL,
    at REAL NOT NULL,
    PRIMARY KEY (credential, "window")
)""",
    """CREATE TABLE IF NOT EXISTS model_resumes (
    credential TEXT PRIMARY KEY,
    at REAL NOT NULL,
    by TEXT NOT NULL,
    windows TEXT NOT NULL
)""",
    """CREATE TABLE IF NOT EXISTS egress_grants (
    sandbox_id TEXT PRIMARY KEY,
    token_sha256 TEXT NOT NULL,
    run_id TEXT NOT NULL,
    policy TEXT NOT NULL,
    issued_at REAL NOT NULL,
    revoked_at REAL
)""",
    """CREATE TABLE IF NOT EXISTS egress_blocked (
    run_id TEXT NOT NULL,
    host TEXT NOT NULL,
    port INTEGER NOT NULL,
    count INTEGER NOT NULL,
    first_at REAL NOT NULL,
    last_at REAL NOT NULL,
    reason TEXT NOT NULL,
    PRIMARY KEY (run_id, host, port)
)""",
]

# Several replicas on one database: a row stepped by one replica at a time (its lease:
# owner and expiry; the host whose sandbox it needs, if any), a delivery handed to the
# replica that received it, named locks (one status comment's edits), and the
# installation's GitHub budget shared by every replica.
_V2_REPLICAS = [
    "ALTER TABLE rows ADD COLUMN lease_owner TEXT",
    "ALTER TABLE rows ADD COLUMN lease_until REAL",
    "ALTER TABLE rows ADD COLUMN host TEXT",
    "ALTER TABLE deliveries ADD COLUMN lease_owner TEXT",
    "ALTER TABLE deliveries ADD COLUMN lease_until REAL",
    """CREATE TABLE IF NOT EXISTS locks (
    name TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    until REAL NOT NULL
)""",
    # What the database itself must say to every replica (served before; a rebuild owed).
    """CREATE TABLE IF NOT EXISTS flags (
    name TEXT PRIMARY KEY,
    at REAL NOT NULL
)""",
    """CREATE TABLE IF NOT EXISTS github_budget (
    installation_id INTEGER PRIMARY KEY,
    limited_until REAL NOT NULL DEFAULT 0,
    why TEXT NOT NULL DEFAULT '',
    next_write_at REAL NOT NULL DEFAULT 0,
    strikes INTEGER NOT NULL DEFAULT 0,
    last_strike REAL NOT NULL DEFAULT 0
)""",
    """CREATE TABLE IF NOT EXISTS github_writes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    installation_id INTEGER NOT NULL,
    at REAL NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS github_writes_at ON github_writes(installation_id, at)",
]

MIGRATIONS: list[list[str]] = [_V1_STORE + _V1_GATE, _V2_REPLICAS]
VERSION = len(MIGRATIONS)

# Taken by the transaction that migrates a PostgreSQL database: replicas starting at once
# migrate one after the other.
_MIGRATION_LOCK = 0x68616E67  # "hang"


def _postgres(statement: str) -> str:
    """A statement in SQLite's words, said in PostgreSQL's."""
    statement = statement.replace("INTEGER PRIMARY KEY AUTOINCREMENT",
                                  "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY")
    statement = re.sub(r"\bINTEGER\b", "BIGINT", statement)
    statement = re.sub(r"\bREAL\b", "DOUBLE PRECISION", statement)
    statement = re.sub(r"json_extract\(data, '\$\.([\w.]+)'\)",
                       lambda m: f"((data::jsonb) #>> '{{{m.group(1).replace('.', ',')}}}')",
                       statement)
    if statement.startswith("CREATE TABLE IF NOT EXISTS rows ("):
        # SQLite's rowid, the order rows were first written in.
        statement = statement.replace("data TEXT NOT NULL,",
                                      "data TEXT NOT NULL,\n    seq BIGINT GENERATED BY DEFAULT"
                                      " AS IDENTITY,")
    return statement


def statements(version: int, dialect: str) -> list[str]:
    said = MIGRATIONS[version - 1]
    return [_postgres(s) for s in said] if dialect == POSTGRESQL else list(said)


def current_version(db: Database) -> int:
    """The version a database is at: 0 for one of before versions (or empty)."""
    with db.connect() as conn:
        return _version(db, conn)


def _version(db: Database, conn: Connection) -> int:
    if db.dialect == POSTGRESQL:
        exists = conn.execute("SELECT to_regclass('schema_version') IS NOT NULL").fetchone()[0]
    else:
        exists = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table'"
                              " AND name = 'schema_version'").fetchone() is not None
    if not exists:
        return 0
    row = conn.execute("SELECT max(version) FROM schema_version").fetchone()
    return int(row[0] or 0)


def migrate(db: Database) -> int:
    """Bring the database to this hangar's version; the version it was at. Raises
    DatabaseError, with what to do, for a database newer than this hangar."""
    with db.transaction() as conn:
        if db.dialect == POSTGRESQL:
            conn.execute("SELECT pg_advisory_xact_lock(?)", (_MIGRATION_LOCK,))
        found = _version(db, conn)
        if found > VERSION:
            raise DatabaseError(
                f"hangar's {describe(db.target)} is at schema version {found}, newer than "
                f"this hangar knows ({VERSION}): run the hangar release that wrote it (or a "
                "newer one), or restore a backup made by this release.")
        if found == VERSION:
            return found
        table = ("CREATE TABLE IF NOT EXISTS schema_version ("
                 " version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)")
        conn.execute(_postgres(table) if db.dialect == POSTGRESQL else table)
        for version in range(found + 1, VERSION + 1):
            for statement in statements(version, db.dialect):
                conn.execute(statement)
            conn.execute("INSERT INTO schema_version (version, applied_at) VALUES (?, ?)",
                         (version, time.time()))
        return found


class CopyRefused(DatabaseError):
    """The copy was not made; the message says why."""


def copy_database(source: Database, target: Database) -> dict[str, int]:
    """Copy every row of every table of `source` (a SQLite file at this version) into
    `target` (migrated here), in one transaction, then read the copy back and compare it
    with the source, table by table. Refuses a target that holds any row. How many rows
    each table got."""
    migrate(source)
    migrate(target)
    with source.connect() as src:
        tables = [r[0] for r in src.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            " AND name != 'schema_version' ORDER BY name").fetchall()]
        columns = {t: [r[1] for r in src.execute(f'PRAGMA table_info("{t}")').fetchall()]
                   for t in tables}
    with target.connect() as dst:
        holding = [t for t in tables
                   if dst.execute(f"SELECT 1 FROM {t} LIMIT 1").fetchone() is not None]
    if holding:
        raise CopyRefused(
            f"the {describe(target.target)} already holds rows (in {', '.join(holding)}): "
            "hangar copies only into an empty database, never over one; create a new "
            "database (createdb) and point --to at it.")
    counts: dict[str, int] = {}
    with source.connect() as src, target.transaction() as dst:
        for table in tables:
            names = columns[table]
            # SQLite's rowid is the rows' first-written order; PostgreSQL keeps it as seq.
            extra = ["seq"] if table == "rows" else []
            chosen = ", ".join([*(f'"{n}"' for n in names), *(["rowid"] if extra else [])])
            rows = src.execute(f"SELECT {chosen} FROM {table}").fetchall()
            into = ", ".join([*(f'"{n}"' for n in names), *extra])
            marks = ", ".join("?" * (len(names) + len(extra)))
            dst.executemany(f"INSERT INTO {table} ({into}) VALUES ({marks})", rows)
            counts[table] = len(rows)
        for table, column in _IDENTITIES:
            dst.execute(f"SELECT setval(pg_get_serial_sequence('{table}', '{column}'),"
                        f" coalesce((SELECT max({column}) FROM {table}), 0) + 1, false)")
    for table in tables:
        if _digest(source, table, columns[table]) != _digest(target, table, columns[table]):
            raise DatabaseError(
                f"the copy of table {table} in the {describe(target.target)} differs from "
                "the SQLite file: drop that database and copy again; hangar.db is unchanged.")
    with target.transaction() as dst:  # served from before: starting on it owes no rebuild
        dst.execute("INSERT INTO flags (name, at) VALUES ('served', ?)"
                    " ON CONFLICT (name) DO NOTHING", (time.time(),))
    return counts


# The columns PostgreSQL numbers itself: after a copy, the next number follows the copy's.
_IDENTITIES = [("rows", "seq"), ("events", "seq"), ("audit", "seq"),
               ("proxy_pushes", "seq"), ("model_requests", "id"), ("github_writes", "seq")]


def _digest(db: Database, table: str, columns: list[str]) -> tuple[int, str]:
    """How many rows a table holds and a hash of all of them, in one order both agree on."""
    import hashlib

    chosen = ", ".join(f'"{n}"' for n in columns)
    digest = hashlib.sha256()
    with db.connect() as conn:
        rows = conn.execute(f"SELECT {chosen} FROM {table}").fetchall()
    for row in sorted(repr(tuple(row)) for row in rows):
        digest.update(row.encode())
    return len(rows), digest.hexdigest()
