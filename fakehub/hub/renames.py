"""Renames: a repository's (same owner, new name) and an account's (new login, so every
repository of it has a new full name). Records keep pointing at the Repo and User
objects, so issues, PRs, checks, rules and installations follow; the old full names
redirect (fakehub/rest/redirects.py, fakehub/git_http.py) until another repository takes
one."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from fakehub.hub.errors import HubError
from fakehub.state import Installation, Repo, User

if TYPE_CHECKING:
    from fakehub.payloads import Shapes
    from fakehub.state import App, Store

# GitHub keeps letters, digits, '-', '_' and '.' in a repository name; a login is letters,
# digits and single inner hyphens, at most 39 characters.
_REPO_NAME = re.compile(r"[A-Za-z0-9._-]{1,100}")
_LOGIN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}")


class RenameOps:
    if TYPE_CHECKING:
        store: Store
        shapes: Shapes

        def repo(self, full_name: str) -> Repo: ...

        def _emit_repo(self, repo: Repo, event: str, payload: dict[str, Any], sender: User,
                       only_app_id: int | None = None) -> None: ...

        def _emit_to_app(self, app: App, event: str, payload: dict[str, Any],
                         inst: Installation, repo: Repo | None) -> None: ...

    def rename_repository(self, full_name: str, new_name: str) -> Repo:
        """The owner renames the repository (same owner). Its Apps hear `repository`
        renamed with the name it had; its old full name redirects to it."""
        repo = self.repo(full_name)
        if not _REPO_NAME.fullmatch(new_name) or new_name in (".", ".."):
            raise HubError(422, f"{new_name!r} is not a repository name GitHub allows")
        if new_name == repo.name:
            return repo
        taken = self.store.repo(f"{repo.owner.login}/{new_name}")
        if taken is not None and taken.id != repo.id:
            raise HubError(422, "Validation Failed", [
                {"resource": "Repository", "code": "custom", "field": "name",
                 "message": "name already exists on this account"}])
        old_name = repo.name
        self.store.rename_repo(repo, new_name)
        _follow_rulesets(repo)
        self._emit_repo(repo, "repository", {
            "action": "renamed",
            "changes": {"repository": {"name": {"from": old_name}}},
        }, repo.owner)
        return repo

    def rename_account(self, login: str, new_login: str) -> User:
        """A person or organization changes their login: each of their repositories has a
        new full name (the old ones redirect), and each App installed on the account hears
        one `installation_target` renamed (GitHub sends no `repository` event for this)."""
        user = self.store.user(login)
        if user is None or user.type == "Bot":
            raise HubError(404, f"no user or organization {login}")
        if not _LOGIN.fullmatch(new_login):
            raise HubError(422, f"{new_login!r} is not a login GitHub allows")
        taken = self.store.user(new_login)
        if taken is not None and taken.id != user.id:
            raise HubError(422, f"login {new_login} is taken")
        old_login = user.login
        if new_login == old_login:
            return user
        self.store.rename_user(user, new_login)
        for repo in self.store.repos.values():
            if repo.owner.id == user.id:
                _follow_rulesets(repo)
        for inst in [i for i in self.store.installations.values() if i.account.id == user.id]:
            self._emit_to_app(self.store.apps[inst.app_id], "installation_target", {
                "action": "renamed",
                "account": self.shapes.user(user),
                "changes": {"login": {"from": old_login}},
                "target_type": "Organization" if user.type == "Organization" else "User",
                "installation": self.shapes.installation_lite(inst),
                "sender": self.shapes.user(user),
            }, inst, None)
        return user


def _follow_rulesets(repo: Repo) -> None:
    """A ruleset names the repository it belongs to as its source."""
    for ruleset in repo.rulesets:
        ruleset["source"] = repo.full_name
