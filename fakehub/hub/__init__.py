"""The hub: fakehub's operations, shared by the REST API, git pushes and the Driver.

Every operation that GitHub would announce queues its webhooks here, after the state
change, so a receiver that calls back sees the new state. The operations live in one
module per concern (pushes, issues, pulls, checks); Hub joins them over one store.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
from pathlib import Path
from typing import Any

from fakehub import auth, gitrepo, rulesets
from fakehub.gitrepo import Signature
from fakehub.hooks import install_hooks
from fakehub.hub.checks import CheckOps
from fakehub.hub.errors import HubError
from fakehub.hub.issues import IssueOps
from fakehub.hub.pulls import PullOps
from fakehub.hub.pushes import PushOps
from fakehub.hub.queue import QueueEntry, QueueOps
from fakehub.hub.renames import RenameOps
from fakehub.hub.threads import ThreadOps
from fakehub.limits import RateCounter
from fakehub.payloads import Shapes
from fakehub.state import (
    DEFAULT_APP_EVENTS,
    DEFAULT_APP_PERMISSIONS,
    App,
    Identity,
    Installation,
    Issue,
    Repo,
    Store,
    Token,
    User,
    now,
)
from fakehub.webhooks import Deliverer

__all__ = ["Hub", "HubError"]

log = logging.getLogger("fakehub")


class Hub(PushOps, IssueOps, PullOps, CheckOps, QueueOps, ThreadOps, RenameOps):
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir)
        self.repos_dir = self.data_dir / "repos"
        self.keys_dir = self.data_dir / "apps"
        self.store = Store()
        self.shapes = Shapes(self)
        self.deliverer = Deliverer(self.store)
        self.base_url = ""  # set once the server is bound to its port
        self.hook_secret = secrets.token_hex(16)
        self.ci: Any = None  # fakehub.ci.CIRunner, attached by the server
        self.record_exchanges = False
        # GitHub computes mergeability in the background; reads before it is done see
        # mergeable null and mergeable_state "unknown". Tests can ask for that.
        self.unknown_mergeability_reads = 0
        self.uncomputed_merges = 0  # merges answered 405 while mergeability is computed
        self.queues: dict[tuple[int, str], list[QueueEntry]] = {}  # (repo id, base) → queue
        # github.com serves public repositories to anonymous git; tests may forbid it to
        # catch code that forgets its credentials.
        self.anonymous_git_reads = True
        self.exchanges: list[dict[str, Any]] = []
        self._background: set[asyncio.Task] = set()
        # update-branch answers 202 and moves the head this much later, as GitHub does
        self.update_branch_delay = 0.5
        # GitHub's primary and secondary rate limits, per caller (fakehub.server)
        self.rates = RateCounter()
        self.enforce_rate_limits = True

    @property
    def api_url(self) -> str:
        return f"{self.base_url}/api/v3"

    def spawn(self, coro) -> asyncio.Task:
        """Background work that is tracked, so shutdown can wait for it."""
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def settle(self) -> None:
        """Wait until background work and queued deliveries are done."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)
        await self.deliverer.wait_idle()

    # -- users, apps, installations -------------------------------------------------

    def create_user(self, login: str, *, bot: bool = False, kind: str | None = None) -> User:
        if self.store.user(login):
            raise HubError(422, f"login {login} is taken")
        ident = self.store.next_id()
        user = User(
            login=login,
            id=ident,
            token=auth.user_token(),
            type=kind or ("Bot" if bot else "User"),
            name=login,
            email=f"{ident}+{login}@users.noreply.fakehub.local",
        )
        self.store.users[login.lower()] = user
        self.store.tokens[user.token] = Token(user.token, "user", login=login)
        return user

    def ensure_user(self, login: str) -> User:
        return self.store.user(login) or self.create_user(login)

    def create_app(
        self,
        name: str = "hangar",
        webhook_url: str | None = None,
        events: list[str] | None = None,
        permissions: dict[str, str] | None = None,
        owner: str | None = None,
        callback_urls: list[str] | None = None,
    ) -> App:
        slug = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
        if any(a.slug == slug for a in self.store.apps.values()):
            raise HubError(422, f"an App named {slug} exists")
        app_id = self.store.next_id()
        private, public = auth.app_key_pair(len(self.store.apps))
        self.keys_dir.mkdir(parents=True, exist_ok=True)
        key_path = self.keys_dir / f"{slug}.private-key.pem"
        key_path.write_text(private)
        key_path.chmod(0o600)
        bot = self.create_user(f"{slug}[bot]", bot=True)
        bot.email = f"{bot.id}+{slug}[bot]@users.noreply.fakehub.local"
        owner_user = self.store.user(owner) if owner else None
        app = App(
            id=app_id,
            slug=slug,
            name=name,
            owner=owner_user or self._apps_owner(),
            bot=bot,
            private_key_pem=private,
            public_key_pem=public,
            private_key_path=key_path,
            webhook_secret=auth.new_webhook_secret(),
            webhook_url=webhook_url,
            events=list(events if events is not None else DEFAULT_APP_EVENTS),
            permissions=dict(permissions or DEFAULT_APP_PERMISSIONS),
            created_at=now(),
            client_id=f"Iv1.{secrets.token_hex(8)}",
            client_secret=secrets.token_hex(20),
            callback_urls=list(callback_urls or []),
        )
        self.store.apps[app_id] = app
        return app

    def _apps_owner(self) -> User:
        return self.store.user("fakehub-apps") or self.create_user(
            "fakehub-apps", kind="Organization"
        )

    def install(self, app_id: int, account: str, repos: list[str] | None) -> Installation:
        app = self._app(app_id)
        owner = self.ensure_user(account)
        existing = next(
            (i for i in self.store.installations.values()
             if i.app_id == app_id and i.account.id == owner.id),
            None,
        )
        ids = None if repos is None else {self._repo_named(owner, r).id for r in repos}
        if existing:
            added = set() if ids is None or existing.repo_ids is None else ids - existing.repo_ids
            if ids is None:
                existing.repo_ids = None
            elif existing.repo_ids is not None:
                existing.repo_ids |= ids
            if added:
                self._emit_installation_repos(existing, added=self._repos_by_id(added))
            return existing
        inst = Installation(
            id=self.store.next_id(),
            app_id=app.id,
            account=owner,
            repo_ids=ids,
            permissions=dict(app.permissions),
            created_at=now(),
        )
        self.store.installations[inst.id] = inst
        self._emit_to_app(
            app,
            "installation",
            {
                "action": "created",
                "installation": self.shapes.installation_webhook(inst),
                "repositories": [self._repo_brief(r) for r in self.store.installation_repos(inst)],
                "sender": self.shapes.user(owner),
            },
            inst,
            None,
        )
        return inst

    def revoke_authorization(self, app_id: int, login: str) -> None:
        """The person revokes their authorization of the App (Settings → Applications):
        GitHub revokes the user access tokens it gave the App for them, and sends the App
        `github_app_authorization` revoked, whatever events it subscribes to."""
        app = self._app(app_id)
        user = self.store.user(login)
        if user is None:
            raise HubError(404, f"no user {login}")
        for secret, token in list(self.store.tokens.items()):
            if token.kind == "user" and token.app_id == app.id \
                    and (token.login or "").lower() == user.login.lower():
                del self.store.tokens[secret]
        self.deliverer.enqueue(app, "github_app_authorization",
                               {"action": "revoked", "sender": self.shapes.user(user)},
                               installation_id=None, repository_id=None)

    def uninstall(self, installation_id: int) -> None:
        """The account's owner uninstalls the App. GitHub deletes the installation: its
        tokens stop working at once, the App hears `installation` deleted (with the
        repositories it had) and nothing more of the account."""
        inst = self._installation(installation_id)
        payload = {
            "action": "deleted",
            "installation": self.shapes.installation_webhook(inst),
            "repositories": [self._repo_brief(r) for r in self.store.installation_repos(inst)],
            "sender": self.shapes.user(inst.account),
        }
        del self.store.installations[inst.id]
        self._emit_to_app(self.store.apps[inst.app_id], "installation", payload, inst, None)

    def suspend(self, installation_id: int) -> None:
        """The account's owner suspends the App: GitHub keeps the installation (listed,
        with suspended_at and suspended_by) but mints no token for it, refuses the tokens
        it minted and delivers none of its repositories' webhooks, only `installation`
        suspend. Suspending a suspended installation changes nothing."""
        inst = self._installation(installation_id)
        if not inst.suspended:
            inst.suspended_at, inst.suspended_by = now(), inst.account
            self._emit_suspension(inst, "suspend")

    def unsuspend(self, installation_id: int) -> None:
        """The account's owner lifts the suspension: `installation` unsuspend, and tokens
        and webhooks work again."""
        inst = self._installation(installation_id)
        if inst.suspended:
            inst.suspended_at, inst.suspended_by = None, None
            self._emit_suspension(inst, "unsuspend")

    def _emit_suspension(self, inst: Installation, action: str) -> None:
        self._emit_to_app(self.store.apps[inst.app_id], "installation", {
            "action": action,
            "installation": self.shapes.installation_webhook(inst),
            "sender": self.shapes.user(inst.account),
        }, inst, None)

    def remove_repositories(self, installation_id: int, repos: list[str]) -> None:
        """The account's owner takes repositories out of the installation (an "all
        repositories" one becomes "selected": all but these). Its tokens, old and new, no
        longer reach them, and the App hears `installation_repositories` removed and
        nothing more of them."""
        inst = self._installation(installation_id)
        covered = {r.id for r in self.store.installation_repos(inst)}
        gone = {self._repo_named(inst.account, r).id for r in repos} & covered
        if not gone:
            return
        inst.repo_ids = covered - gone
        self._emit_installation_repos(inst, removed=self._repos_by_id(gone))

    def _emit_installation_repos(self, inst: Installation, *, added: list[Repo] | None = None,
                                 removed: list[Repo] | None = None) -> None:
        self._emit_to_app(
            self.store.apps[inst.app_id],
            "installation_repositories",
            {
                "action": "removed" if removed else "added",
                "installation": self.shapes.installation_webhook(inst),
                "repository_selection": "selected",
                "repositories_added": [self._repo_brief(r) for r in added or []],
                "repositories_removed": [self._repo_brief(r) for r in removed or []],
                "requester": None,
                "sender": self.shapes.user(inst.account),
            },
            inst,
            None,
        )

    def _repos_by_id(self, ids: set[int]) -> list[Repo]:
        return sorted((r for r in self.store.repos.values() if r.id in ids), key=lambda r: r.id)

    def _repo_brief(self, repo: Repo) -> dict[str, Any]:
        return {
            "id": repo.id,
            "node_id": self.shapes.repo(repo)["node_id"],
            "name": repo.name,
            "full_name": repo.full_name,
            "private": repo.private,
        }

    def _app(self, app_id: int) -> App:
        app = self.store.apps.get(app_id)
        if app is None:
            raise HubError(404, "Not Found")
        return app

    def _installation(self, installation_id: int) -> Installation:
        inst = self.store.installations.get(installation_id)
        if inst is None:
            raise HubError(404, "Not Found")
        return inst

    def _repo_named(self, owner: User, name: str) -> Repo:
        """One of owner's repositories, by its name or its full name."""
        account, _, name = name.rpartition("/")
        repo = self.store.repo(f"{owner.login}/{name}")
        if repo is None or (account and account.lower() != owner.login.lower()):
            raise HubError(404, f"no repository {account or owner.login}/{name}")
        return repo

    # -- repositories ---------------------------------------------------------------

    def create_repo(
        self,
        owner: str,
        name: str,
        files: dict[str, str | bytes] | Path | None = None,
        default_branch: str = "main",
        private: bool = False,
        message: str = "Initial commit",
    ) -> Repo:
        owner_user = self.ensure_user(owner)
        if self.store.repo(f"{owner}/{name}"):
            raise HubError(422, "Repository creation failed.", [
                {"resource": "Repository", "code": "custom", "field": "name",
                 "message": "name already exists on this account"}])
        repo_id = self.store.next_id()
        path = self.repos_dir / owner.lower() / f"{name.lower()}.git"
        if path.exists():  # a renamed repository keeps its directory; this one takes another
            path = path.with_name(f"{name.lower()}-{repo_id}.git")
        gitrepo.init_bare(path, default_branch)
        install_hooks(path)
        stamp = now()
        repo = Repo(
            id=repo_id,
            owner=owner_user,
            name=name,
            private=private,
            default_branch=default_branch,
            path=path,
            created_at=stamp,
            pushed_at=stamp,
        )
        self.store.repos[repo.full_name.lower()] = repo
        if files is not None:
            content = gitrepo.files_from_dir(files) if isinstance(files, Path) else files
            executable = gitrepo.executables_in_dir(files) if isinstance(files, Path) else set()
            author = self.signature(owner_user)
            sha = gitrepo.commit_files(path, None, dict(content), message, author, executable)
            gitrepo.update_ref(path, f"refs/heads/{default_branch}", sha)
        for inst in self.store.installations.values():
            if inst.account.id == owner_user.id and inst.repo_ids is None:
                self._emit_installation_repos(inst, added=[repo])
        return repo

    def repo(self, full_name: str) -> Repo:
        repo = self.store.repo(full_name)
        if repo is None:
            raise HubError(404, "Not Found")
        return repo

    def grant(self, full_name: str, login: str, permission: str) -> None:
        if permission not in ("admin", "maintain", "write", "triage", "read"):
            raise HubError(422, f"unknown permission {permission}")
        repo = self.repo(full_name)
        user = self.ensure_user(login)
        old = repo.collaborators.get(login.lower())
        repo.collaborators[login.lower()] = permission
        if old == permission:
            return
        # GitHub's `member` event; its legacy `permission` maps maintain and triage down.
        legacy = {"maintain": "write", "triage": "read"}
        changes: dict[str, Any] = {"permission": {"to": legacy.get(permission, permission)}}
        if old is not None:
            changes = {"old_permission": {"from": old},
                       "permission": {"from": legacy.get(old, old),
                                      "to": legacy.get(permission, permission)}}
        self._emit_repo(repo, "member", {"action": "edited" if old else "added",
                                         "member": self.shapes.user(user), "changes": changes},
                        repo.owner)

    def signature(self, user: User) -> Signature:
        return Signature(user.name or user.login, user.email or f"{user.login}@fakehub.local")

    def permission(self, repo: Repo, ident: Identity) -> str:
        if ident.kind in ("installation", "app"):
            return "write"
        return self.store.permission(repo, ident.user)

    # -- rulesets -------------------------------------------------------------------

    def add_ruleset(self, repo: Repo, raw: dict[str, Any]) -> dict[str, Any]:
        ruleset = rulesets.normalize_ruleset(raw, self.store.next_id(), repo)
        repo.rulesets.append(ruleset)
        return ruleset

    # -- CI -------------------------------------------------------------------------

    def _start_ci(self, repo: Repo, issue: Issue) -> None:
        if self.ci is not None and repo.ci_command:
            self.ci.schedule(repo, issue)

    # -- webhooks -------------------------------------------------------------------

    def _emit_repo(
        self,
        repo: Repo,
        event: str,
        payload: dict[str, Any],
        sender: User,
        only_app_id: int | None = None,
    ) -> None:
        """Send an event to every App installed on the repo that subscribes to it (a
        suspended installation hears nothing)."""
        for app in self.store.apps.values():
            inst = self.store.installation_for(app.id, repo)
            if inst is None or inst.suspended or event not in app.events:
                continue
            if only_app_id is not None and app.id != only_app_id:
                continue
            body = dict(payload)
            body["repository"] = self.shapes.repo(repo)
            body["sender"] = self.shapes.user(sender)
            body["installation"] = self.shapes.installation_lite(inst)
            self.deliverer.enqueue(app, event, body, installation_id=inst.id,
                                   repository_id=repo.id)

    def _emit_to_app(
        self, app: App, event: str, payload: dict[str, Any], inst: Installation, repo: Repo | None
    ) -> None:
        """Send an event about the installation itself; every App gets these, but a
        suspended installation hears only `installation` events."""
        if event not in app.events and event not in (
                "installation", "installation_repositories", "installation_target"):
            return
        if inst.suspended and event != "installation":
            return
        self.deliverer.enqueue(app, event, payload, installation_id=inst.id,
                               repository_id=repo.id if repo else None)
