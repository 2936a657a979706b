"""What steps read of GitHub, and how long it is kept: one repository's operations for an
installation, people's permissions, repository config and other files at a ref or a
commit, and what guards a branch. Webhooks drop what they say changed (a membership or
collaborator event, a `branch_protection_rule` or `repository_ruleset` event)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import aiohttp
from cachetools import LRUCache, TTLCache
from gidgethub import QueryError

from app.github.client import AppAuth, GitHubClient, InstallationToken
from app.github.ops import RepoOps
from app.models import Thread
from app.settings import Settings

log = logging.getLogger(__name__)

# A command is acted on, and an approval counted, with a permission at most this old;
# membership and collaborator events drop it at once.
PERMISSION_TTL_S = 30
CONFIG_TTL_S = 30
# A branch's classic protection, or its absence (a 404 is charged every time and never a
# 304), and what guards a branch as a land check shows it, are kept this long; a
# `branch_protection_rule` or `repository_ruleset` event drops them at once.
PROTECTION_TTL_S = 12 * 3600
WRITE_PERMISSIONS = ("admin", "maintain", "write")


class GitHubReads:
    """The GitHub client for an installation (repo_ops), with cached permissions,
    repository config and branch protection; and what else a step asks of the App's
    identity (a client for /app routes with its JWT, an installation's client or token),
    so that a step never holds the App's key."""

    def __init__(self, auth: AppAuth, settings: Settings):
        self._auth = auth
        self.settings = settings
        self._permissions: TTLCache[tuple[str, str], str] = TTLCache(4096, PERMISSION_TTL_S)
        self._configs: TTLCache[tuple[str, str], str | None] = TTLCache(1024, CONFIG_TTL_S)
        self._pinned_configs: LRUCache[tuple[str, ...], str | None] = LRUCache(1024)
        self._protections: TTLCache[tuple[str, ...], Any] = TTLCache(1024, PROTECTION_TTL_S)

    async def repo_ops(self, thread: Thread) -> RepoOps:
        return RepoOps(await self._auth.client(thread.installation_id), thread.repo,
                       own_app_id=self.settings.app_id)

    async def app_client(self) -> GitHubClient:
        """A client for /app routes; pass `jwt=self.jwt()` with each call."""
        return await self._auth.client_for_app()

    def jwt(self) -> str:
        return self._auth.jwt()

    async def client(self, installation_id: int) -> GitHubClient:
        return await self._auth.client(installation_id)

    async def installation_token(
        self, installation_id: int, *, repository: str | None = None,
        permissions: Mapping[str, str] | None = None,
    ) -> InstallationToken:
        return await self._auth.installation_token(
            installation_id, repository=repository, permissions=permissions)

    def forget_installation(self, installation_id: int) -> None:
        """The installation's permissions changed: tokens minted before carry the old."""
        self._auth.forget_installation(installation_id)

    def installation_ended(self, installation_id: int, how: str) -> None:
        """Suspended or uninstalled: nothing is asked of GitHub for it until it is usable."""
        self._auth.installation_ended(installation_id, how)

    def installation_usable(self, installation_id: int) -> None:
        self._auth.installation_usable(installation_id)

    @property
    def session(self) -> aiohttp.ClientSession:
        """The one HTTP session hangar holds (also for what is not GitHub: notifiers)."""
        return self._auth.session

    async def permission(self, ops: RepoOps, login: str) -> str:
        key = (ops.full_name, login)
        cached = self._permissions.get(key)
        if cached is None:
            cached = await ops.permission(login)
            self._permissions[key] = cached
        return cached

    def forget_permissions(self, owner: str | None) -> int:
        """Drop cached permissions on the owner's repositories (all, when owner is None)."""
        stale = [k for k in list(self._permissions)
                 if owner is None or k[0].split("/")[0].lower() == owner.lower()]
        for key in stale:
            self._permissions.pop(key, None)
        return len(stale)

    async def may_write(self, ops: RepoOps, login: str) -> bool:
        return await self.permission(ops, login) in WRITE_PERMISSIONS

    async def config_text(self, ops: RepoOps, ref: str, sha: str | None = None,
                          path: str | None = None) -> str | None:
        """`.github/hangar.yml` (or another file at `path`) at ref, read at most every
        CONFIG_TTL_S per repo and ref; given the commit ref points at now, read once for
        that commit (it never changes: a file that is not there, a 404, is kept too, and a
        404 no ETag makes free)."""
        from app.repoconfig import CONFIG_PATH

        path = path or CONFIG_PATH
        key = (ops.full_name, ref) if path == CONFIG_PATH else (ops.full_name, f"{ref}:{path}")
        if sha is not None:
            pinned = (ops.full_name, sha, path)
            if pinned not in self._pinned_configs:
                self._pinned_configs[pinned] = await ops.get_text(path, ref=sha)
                # ref's file as of now too: a later read by ref alone costs no second call
                self._configs.setdefault(key, self._pinned_configs[pinned])
            return self._pinned_configs[pinned]
        if key not in self._configs:
            self._configs[key] = await ops.get_text(path, ref=ref)
        return self._configs[key]

    async def read_at(self, ops: RepoOps, sha: str | None, paths: list[str],
                      ref: str | None = None) -> None:
        """Read these files at a commit in one query, for config_text(..., sha, path) to
        answer from what it keeps (`ref`: the branch that points at sha now, answered by
        ref alone too, as config_text keeps a read at sha; and whether classic protection
        guards it, its absence kept as branch_protection keeps it); a failure leaves them
        to be read one by one."""
        from app.repoconfig import CONFIG_PATH

        wanted = [path for path in paths if (ops.full_name, sha, path) not in
                  self._pinned_configs]
        if sha is None or len(wanted) < 2:
            return  # one file is one REST read either way
        protected: bool | None = None
        try:
            try:
                texts, protected = await ops.texts_and_protection(sha, wanted, ref)
            except QueryError:
                if ref is None:
                    raise
                # Its protection may be unreadable (no administration: read): files alone
                texts = await ops.texts_at(sha, wanted)
        except Exception as exc:
            log.warning("could not read files at a commit in one query; reading them one "
                        "by one", extra={"repo": ops.full_name, "error": repr(exc)[:300]})
            return
        for path, text in texts.items():
            self._pinned_configs[(ops.full_name, sha, path)] = text
            if ref is not None:
                key = (ops.full_name, ref) if path == CONFIG_PATH else (
                    ops.full_name, f"{ref}:{path}")
                self._configs.setdefault(key, text)
        if ref is not None and protected is False:
            self._protections.setdefault((ops.full_name, ref), None)

    async def branch_protection(self, ops: RepoOps, branch: str) -> dict | None:
        """The branch's classic protection, or None when it has none or the installation
        may not read it: kept PROTECTION_TTL_S, absence too (GitHub charges every 404)."""
        return await self.kept((ops.full_name, branch), lambda: ops.protection(branch))

    async def kept(self, key: tuple[str, ...], read: Callable[[], Awaitable[Any]]) -> Any:
        """What `read` answers about a repository (key[0]), kept PROTECTION_TTL_S and
        dropped by forget_protection: what guards its branches."""
        if key not in self._protections:
            self._protections[key] = await read()
        return self._protections[key]

    def forget_protection(self, repo: str | None) -> None:
        """A `branch_protection_rule` event: the repository's classic protection changed."""
        for key in [k for k in list(self._protections) if repo is None or k[0] == repo]:
            self._protections.pop(key, None)
