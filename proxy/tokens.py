"""Per-sandbox git tokens (`hgs_…`), stored only as hashes, and the pushes they made.

The tables live in hangar's database (proxy/tables.py): any thread may use the registry
next to other writers, and with PostgreSQL any replica's gate accepts any token.
"""

from __future__ import annotations

import hmac
import secrets
import time
from dataclasses import dataclass

from .grant import Grant
from .tables import GateTables, token_hash

TOKEN_PREFIX = "hgs_"

@dataclass(frozen=True)
class PushRecord:
    sandbox_id: str
    repo: str
    ref: str
    old: str
    new: str
    bytes: int
    at: float


class TokenRegistry(GateTables):
    def issue(
        self,
        sandbox_id: str,
        *,
        repo: str,
        branch: str | None,
        installation_id: int | None,
        allow_force: bool = True,
        lease: str | None = None,
    ) -> str:
        """A new token for the sandbox (replacing any earlier one); only its hash is kept.

        `branch=None` grants fetching only (an environment build's clone). `lease`: the
        one tip of the branch the sandbox may replace by a non-fast-forward push (the land
        worker's rebase); with it, no other push is allowed.
        """
        if lease is not None and (branch is None or allow_force):
            raise ValueError("a lease is for a branch, on a token that may not force")
        if repo.count("/") != 1 or not all(repo.split("/")):
            raise ValueError(f"repo must be 'owner/name', got {repo!r}")
        if branch is not None and (not branch or branch.startswith("refs/")):
            raise ValueError(f"branch is a plain branch name like 'hangar/12-ab3f', got {branch!r}")
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        with self._transaction() as db:  # the token and its lease change together
            db.execute(
                "INSERT INTO proxy_tokens (sandbox_id, token_sha256, repo, branch,"
                " installation_id, allow_force, issued_at, revoked_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, NULL) ON CONFLICT (sandbox_id) DO UPDATE SET"
                " token_sha256 = excluded.token_sha256, repo = excluded.repo,"
                " branch = excluded.branch, installation_id = excluded.installation_id,"
                " allow_force = excluded.allow_force, issued_at = excluded.issued_at,"
                " revoked_at = NULL",
                (
                    sandbox_id,
                    token_hash(token),
                    repo,
                    branch or "",
                    installation_id,
                    int(allow_force),
                    time.time(),
                ),
            )
            db.execute("DELETE FROM proxy_leases WHERE sandbox_id = ?", (sandbox_id,))
            if lease is not None:
                db.execute("INSERT INTO proxy_leases (sandbox_id, old) VALUES (?, ?)",
                           (sandbox_id, lease))
        self._credential_ended()  # the sandbox's earlier token, if any
        return token

    def check(self, sandbox_id: str, token: str) -> Grant | None:
        """The sandbox's grant if `token` is its current, unrevoked token."""
        with self._connect() as db:
            row = db.execute(
                "SELECT token_sha256, repo, branch, installation_id, allow_force, revoked_at,"
                " (SELECT old FROM proxy_leases WHERE proxy_leases.sandbox_id ="
                " proxy_tokens.sandbox_id)"
                " FROM proxy_tokens WHERE sandbox_id = ?",
                (sandbox_id,),
            ).fetchone()
        if row is None:
            return None
        stored, repo, branch, installation_id, allow_force, revoked_at, lease = row
        if not hmac.compare_digest(token_hash(token), stored) or revoked_at is not None:
            return None
        return Grant(sandbox_id, repo, branch, installation_id, bool(allow_force), lease)

    def owner_of(self, token: str) -> str | None:
        """The sandbox id a live token belongs to, to tell 'wrong sandbox' from 'unknown'."""
        with self._connect() as db:
            row = db.execute(
                "SELECT sandbox_id FROM proxy_tokens WHERE token_sha256 = ? AND revoked_at IS NULL",
                (token_hash(token),),
            ).fetchone()
        return row[0] if row else None

    def revoke(self, sandbox_id: str) -> None:
        with self._connect() as db:
            db.execute(
                "UPDATE proxy_tokens SET revoked_at = ?"
                " WHERE sandbox_id = ? AND revoked_at IS NULL",
                (time.time(), sandbox_id),
            )
        self._credential_ended()

    def revoke_branch(self, repo: str, branch: str) -> int:
        """Revoke every token for the branch (its land request ended); returns how many."""
        with self._connect() as db:
            cursor = db.execute(
                "UPDATE proxy_tokens SET revoked_at = ?"
                " WHERE repo = ? AND branch = ? AND revoked_at IS NULL",
                (time.time(), repo, branch),
            )
        self._credential_ended()
        return cursor.rowcount

    def record_push(
        self,
        sandbox_id: str,
        *,
        repo: str,
        ref: str,
        old: str,
        new: str,
        size: int,
        at: float | None = None,
    ) -> None:
        with self._connect() as db:
            db.execute(
                "INSERT INTO proxy_pushes (sandbox_id, repo, ref, old, new, bytes, at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (sandbox_id, repo, ref, old, new, size, time.time() if at is None else at),
            )

    def pushes(self, sandbox_id: str) -> list[PushRecord]:
        """The sandbox's accepted pushes, oldest first."""
        with self._connect() as db:
            rows = db.execute(
                "SELECT sandbox_id, repo, ref, old, new, bytes, at FROM proxy_pushes"
                " WHERE sandbox_id = ? ORDER BY seq",
                (sandbox_id,),
            ).fetchall()
        return [PushRecord(*row) for row in rows]
