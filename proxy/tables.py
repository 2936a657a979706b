"""What the sandbox gate's tables share: hangar's database (a connection per thread with
SQLite, safe beside other writers; the process's pool with PostgreSQL), hashed tokens,
and the git grant that bounds the life of every other per-sandbox credential."""

from __future__ import annotations

import hashlib
import hmac
from contextlib import AbstractContextManager
from pathlib import Path
from typing import ClassVar

from app.database import Connection, Database, is_postgresql, open_database
from app.datadir import private_database
from app.migrations import migrate


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _git_grant_live(table: str) -> str:
    """A WHERE condition: the sandbox of `table`'s row has no revoked git grant."""
    return (f"NOT EXISTS (SELECT 1 FROM proxy_tokens WHERE proxy_tokens.sandbox_id ="
            f" {table}.sandbox_id AND proxy_tokens.revoked_at IS NOT NULL)")


class GateTables:
    """The gate's tables in hangar's database (a SQLite file or PostgreSQL: app/database.py;
    their schema is hangar's, app/migrations.py), with the git grants, which every sandbox
    credential's check reads.

    With SQLite each thread keeps a connection of its own, kept open: the gate checks a
    token on every request, and a new connection's first statement (opening the WAL index,
    reading the schema) cost ten times the query; synchronous NORMAL as the store (a commit
    is in the WAL, seen by every reader at once and kept if hangar crashes; the disk is
    synced at checkpoints, so a crash of the machine may lose the last commits, as it may
    the store's). With PostgreSQL the connections are the process's pool, shared with the
    store: any replica's gate reads the same credentials."""

    # Per database: how many times a credential was revoked or replaced by this process. A
    # cache of checked credentials trusts an entry only while it stands still.
    _revocations: ClassVar[dict[str, int]] = {}

    def __init__(self, target: Path | str | Database):
        if not isinstance(target, Database) and not is_postgresql(target):
            private_database(Path(target))  # 0600, in a 0700 directory
        self.db = open_database(target, per_thread=True)
        self.db_path = target if isinstance(target, str | Database) else Path(target)
        self._key = str(Path(target).resolve()) if isinstance(target, Path) else str(
            self.db.target)
        migrate(self.db)

    def _connect(self) -> AbstractContextManager[Connection]:
        """A connection in autocommit: each statement its own transaction."""
        return self.db.connect()

    def _transaction(self) -> AbstractContextManager[Connection]:
        return self.db.transaction()

    def close(self) -> None:
        self.db.close()

    def _credential_ended(self) -> None:
        """Say, after its commit, that a credential in this file was revoked or replaced."""
        self._revocations[self._key] = self._revocations.get(self._key, 0) + 1

    def _revocation_count(self) -> int:
        return self._revocations.get(self._key, 0)

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
