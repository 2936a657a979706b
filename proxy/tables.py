"""What the sandbox gate's SQLite tables share: a connection per thread (safe beside
other writers), hashed tokens, and the git grant that bounds the life of every other
per-sandbox credential."""

from __future__ import annotations

import hashlib
import hmac
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import ClassVar

from app.datadir import private_database


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


# Every sandbox's git grant, whose life bounds its other credentials (TokenRegistry).
GIT_GRANTS_SCHEMA = """
CREATE TABLE IF NOT EXISTS proxy_tokens (
    sandbox_id TEXT PRIMARY KEY,
    token_sha256 TEXT NOT NULL,
    repo TEXT NOT NULL,
    branch TEXT NOT NULL,
    installation_id INTEGER,
    allow_force INTEGER NOT NULL,
    issued_at REAL NOT NULL,
    revoked_at REAL
);
CREATE INDEX IF NOT EXISTS proxy_tokens_branch ON proxy_tokens(repo, branch);
"""


def _git_grant_live(table: str) -> str:
    """A WHERE condition: the sandbox of `table`'s row has no revoked git grant."""
    return (f"NOT EXISTS (SELECT 1 FROM proxy_tokens WHERE proxy_tokens.sandbox_id ="
            f" {table}.sandbox_id AND proxy_tokens.revoked_at IS NOT NULL)")


class SqliteTables:
    """Tables in hangar's main SQLite file, created from `SCHEMA` on first use (and the
    git grants, which every sandbox credential's check reads)."""

    SCHEMA = ""
    # Per database file: how many times a credential was revoked or replaced by this
    # process. A cache of checked credentials trusts an entry only while it stands still.
    _revocations: ClassVar[dict[Path, int]] = {}

    def __init__(self, db_path: Path):
        self.db_path = Path(db_path)
        private_database(self.db_path)  # 0600, in a 0700 directory
        self._file = self.db_path.resolve()
        self._local = threading.local()
        with self._connect() as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(GIT_GRANTS_SCHEMA + self.SCHEMA)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        """This thread's connection, kept open: the gate checks a token on every request,
        and a new connection's first statement (opening the WAL index, reading the schema)
        cost ten times the query. Autocommit, synchronous NORMAL as hangar's store: a
        commit is in the WAL, seen by every reader at once and kept if hangar crashes; the
        disk is synced at checkpoints (a sync per commit cost 1-3 ms at the end of every
        model answer), so a crash of the machine may lose the last commits, as it may the
        store's. A statement that fails inside an explicit transaction rolls it back."""
        db = getattr(self._local, "db", None)
        if db is None or self._local.pid != os.getpid():  # a forked child opens its own
            db = sqlite3.connect(self.db_path, timeout=30, isolation_level=None,
                                 check_same_thread=True)
            db.execute("PRAGMA busy_timeout=30000")
            db.execute("PRAGMA synchronous=NORMAL")
            self._local.db, self._local.pid = db, os.getpid()
        try:
            yield db
        finally:
            if db.in_transaction:
                db.rollback()

    def _credential_ended(self) -> None:
        """Say, after its commit, that a credential in this file was revoked or replaced."""
        self._revocations[self._file] = self._revocations.get(self._file, 0) + 1

    def _revocation_count(self) -> int:
        return self._revocations.get(self._file, 0)

    def _live_row(self, table: str, columns: str, sandbox_id: str,
                  token: str) -> tuple | None:
        """`columns` of the sandbox's row in `table` if `token` is its live credential:
        not revoked, and the sandbox's git grant not revoked either (a model or egress
        credential dies with it, so every place that ends a sandbox's access ends them
        all). One statement: one read of the file on the gate's hot path."""
        with self._connect() as db:
            row = db.execute(
                f"SELECT token_sha256, {columns} FROM {table} WHERE sandbox_id = ?"
                f" AND revoked_at IS NULL AND {_git_grant_live(table)}",
                (sandbox_id,)).fetchone()
        if row is None or not hmac.compare_digest(token_hash(token), row[0]):
            return None
        return row[1:]
