"""The synchronous, thread-safe Driver that tests and the demo use to run fakehub.

Every method runs its work on fakehub's own event loop and waits for the result, so
calls from any thread see a consistent hub. Read-outs return the same JSON shapes the
REST API returns.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar
from urllib.parse import quote

from fakehub import auth, gitrepo
from fakehub.faults import Fault, Faults
from fakehub.hub import Hub
from fakehub.state import Delivery, Identity, Repo, User, now
from fakehub.webhooks import Disorder


class Server(Protocol):
    """What the driver needs of the server thread it drives (fakehub/testing.py)."""

    hub: Hub
    loop: asyncio.AbstractEventLoop

    @property
    def faults(self) -> Faults: ...

T = TypeVar("T")


@dataclass(frozen=True)
class AppInfo:
    id: int
    slug: str
    bot_login: str
    private_key_pem: str
    private_key_path: Path
    webhook_secret: str
    client_id: str = ""
    client_secret: str = ""


@dataclass(frozen=True)
class UserInfo:
    login: str
    id: int
    token: str


@dataclass(frozen=True)
class DeliveryInfo:
    id: int
    guid: str
    event: str
    action: str | None
    app_id: int
    installation_id: int | None
    payload: dict[str, Any]
    body: bytes
    headers: dict[str, str]
    status_code: int | None
    error: str | None
    redelivery: bool


def _delivery_info(d: Delivery) -> DeliveryInfo:
    return DeliveryInfo(d.id, d.guid, d.event, d.action, d.app_id, d.installation_id, d.payload,
                        d.body, dict(d.request_headers), d.status_code, d.error, d.redelivery)


class Driver:
    def __init__(self, server: Server) -> None:
        self._server = server
        self._hub: Hub = server.hub

    # -- plumbing -------------------------------------------------------------------

    def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        async def run() -> T:
            return fn(*args, **kwargs)

        return asyncio.run_coroutine_threadsafe(run(), self._server.loop).result(60)

    def _user(self, who: str | UserInfo | User) -> User:
        login = who if isinstance(who, str) else who.login
        user = self._hub.store.user(login)
        if user is None:
            raise KeyError(f"no user {login}; create_user() first")
        return user

    def _as(self, who: str | UserInfo | User) -> Identity:
        user = self._user(who)
        app = self._hub.store.app_by_bot(user)
        if app is not None:
            return Identity("installation", user, app_id=app.id)
        return Identity("user", user)

    def _repo(self, full_name: str) -> Repo:
        return self._hub.repo(full_name)

    @property
    def hub(self) -> Hub:
        """The hub itself, for reads in tests; mutate only through the Driver."""
        return self._hub

    @property
    def base_url(self) -> str:
        return self._hub.base_url

    @property
    def api_url(self) -> str:
        return self._hub.api_url

    @property
    def data_dir(self) -> Path:
        return self._hub.data_dir

    def settle(self, timeout: float = 120.0) -> None:
        """Wait until CI runs and queued webhook deliveries are done (the bound is one a
        machine under load keeps: a test that waits longer has failed anyway)."""
        asyncio.run_coroutine_threadsafe(self._hub.settle(), self._server.loop).result(timeout)

    # -- Apps, users, repositories --------------------------------------------------

    def create_app(
        self,
        name: str = "hangar",
        webhook_url: str | None = None,
        events: list[str] | None = None,
        permissions: dict[str, str] | None = None,
    ) -> AppInfo:
        app = self._call(self._hub.create_app, name, webhook_url, events, permissions)
        return AppInfo(app.id, app.slug, app.bot.login, app.private_key_pem,
                       app.private_key_path, app.webhook_secret, app.client_id,
                       app.client_secret)

    def set_callback_urls(self, app_id: int, *urls: str) -> None:
        """The App's callback URLs, where its web sign-in may send a person back."""
        def update() -> None:
            self._hub.store.apps[app_id].callback_urls = list(urls)

        self._call(update)
    def set_webhook_url(self, app_id: int, url: str | None) -> None:
        def update() -> None:
            self._hub.store.apps[app_id].webhook_url = url

        self._call(update)

    def write_webhook_secret(self, app_id: int, path: Path) -> Path:
        path.write_text(self._hub.store.apps[app_id].webhook_secret)
        path.chmod(0o600)
        return path

    def create_user(self, login: str, *, bot: bool = False) -> UserInfo:
        user = self._call(self._hub.create_user, login, bot=bot)
        return UserInfo(user.login, user.id, user.token)

    def create_repo(
        self,
        owner: str,
        name: str,
        files: dict[str, str | bytes] | Path | None = None,
        default_branch: str = "main",
        private: bool = False,
    ) -> dict[str, Any]:
        def create() -> dict[str, Any]:
            repo = self._hub.create_repo(owner, name, files if files is not None else {
                "README.md": f"# {name}\n"}, default_branch, private)
            return self._hub.shapes.repo_rest(repo)

        return self._call(create)

    def set_private(self, full_name: str, private: bool = True) -> None:
        def update() -> None:
            self._repo(full_name).private = private

        self._call(update)

    def grant(self, full_name: str, login: str, permission: str) -> None:
        self._call(self._hub.grant, full_name, login, permission)

    def create_org(self, login: str) -> UserInfo:
        """An organization account (no members: its repositories' owner acts as it)."""
        user = self._call(self._hub.create_user, login, kind="Organization")
        return UserInfo(user.login, user.id, user.token)

    def rename_repository(self, full_name: str, new_name: str) -> str:
        """The owner renames the repository ("owner/name") to `new_name`, same owner; its
        new full name. Everything of it stays attached; its Apps hear `repository`
        renamed; REST at the old name redirects (301 for GET and HEAD, 307 otherwise, to
        /repositories/{id}/…) and git at the old path keeps working, until a new
        repository takes the old name. The Driver itself knows only the new name."""
        return self._call(lambda: self._hub.rename_repository(full_name, new_name).full_name)

    def rename_account(self, login: str, new_login: str) -> None:
        """A person or organization changes their login: each of their repositories is
        `new_login/name` from now on, the old full names redirecting as a renamed
        repository's do; each App installed on the account hears one
        `installation_target` renamed (and no `repository` event). Tokens keep working."""
        self._call(self._hub.rename_account, login, new_login)

    def install(self, app_id: int, account: str, repos: list[str] | None = None) -> int:
        return self._call(self._hub.install, app_id, account, repos).id

    def set_installation_permissions(self, installation_id: int, permissions: dict[str, str]
                                     ) -> None:
        """What an installation grants (e.g. an owner has not accepted a new permission
        yet); tokens minted from now on carry these."""
        def configure() -> None:
            self._hub.store.installations[installation_id].permissions = dict(permissions)

        self._call(configure)

    def revoke_authorization(self, app_id: int, login: str) -> None:
        """`login` revokes their authorization of the App: the user access tokens the App
        got for them answer 401 "Bad credentials" from then on, and the App hears
        `github_app_authorization` revoked."""
        self._call(self._hub.revoke_authorization, app_id, login)

    def uninstall(self, installation_id: int) -> None:
        """The account's owner uninstalls the App. GitHub deletes the installation at once:
        GET /app/installations/{id} and minting answer 404, every token minted from it
        answers 401 "Bad credentials" (git refuses it too), the App hears `installation`
        deleted and then nothing more of the account's repositories."""
        self._call(self._hub.uninstall, installation_id)

    def suspend(self, installation_id: int) -> None:
        """The account's owner suspends the App. GitHub keeps the installation (listed,
        with suspended_at and suspended_by) but answers a mint 403 "This installation has
        been suspended", refuses tokens minted before with 403, and delivers only
        `installation` suspend, none of the account's repositories' webhooks."""
        self._call(self._hub.suspend, installation_id)

    def unsuspend(self, installation_id: int) -> None:
        """The account's owner lifts a suspension: `installation` unsuspend, and tokens
        (old and new) and webhooks work again."""
        self._call(self._hub.unsuspend, installation_id)

    def remove_repositories(self, installation_id: int, repos: list[str]) -> None:
        """The account's owner takes repositories ("owner/name") out of the installation;
        an "all repositories" one becomes "selected", all but these. GitHub sends
        `installation_repositories` removed; the installation's tokens, old and new, then
        reach them no more (404 when private), a token narrowed to one cannot be minted
        (422), and none of their webhooks reach the App."""
        self._call(self._hub.remove_repositories, installation_id, list(repos))

    def installation_token(
        self, installation_id: int, repositories: list[str] | None = None
    ) -> str:
        """A fresh installation token, as POST .../access_tokens would mint."""
        def mint() -> str:
            inst = self._hub.store.installations[installation_id]
            return auth.mint_installation_token(self._hub.store, inst, repositories).token

        return self._call(mint)

    def resolve_thread(self, repo: str, number: int, review_id: int, index: int = 0,
                       resolved: bool = True, as_user: str | None = None) -> None:
        """Resolve (or unresolve) the thread a review's line comment started, as a person
        pressing "Resolve conversation" (GraphQL `resolveReviewThread`); GitHub sends
        pull_request_review_thread resolved (unresolved)."""
        def resolve() -> None:
            target = self._repo(repo)
            review = self._hub.store.reviews[review_id]
            self._hub.resolve_review_thread(
                target, self._hub.pull(target, number), f"{review_id}-{index}", resolved,
                self._as(as_user or review.user))

        self._call(resolve)

    def thread_resolved(self, repo: str, number: int, comment_id: int) -> bool:
        """Whether the thread the line comment `comment_id` started is resolved."""
        def read() -> bool:
            pr = self._hub.pull(self._repo(repo), number).pull
            return f"{comment_id // 1000}-{comment_id % 1000 - 1}" in pr.resolved_threads

        return self._call(read)

    def review_comments(self, repo: str, number: int) -> list[dict[str, Any]]:
        """The PR's line comments and replies, oldest first, as the REST API lists them."""
        def listed() -> list[dict[str, Any]]:
            target = self._repo(repo)
            return [self._hub.shapes.review_comment(target, review, i, c)
                    for review in self._hub.store.reviews_for(target, number)
                    for i, c in enumerate(review.comments)]

        return self._call(listed)

    def reply_in_thread(self, repo: str, number: int, comment_id: int, body: str,
                        as_user: str) -> int:
        """A person's reply in the review thread `comment_id` started; the reply's id."""
        def post() -> int:
            target = self._repo(repo)
            return self._hub.reply_to_review_comment(
                target, self._hub.pull(target, number), comment_id, body, self._as(as_user))["id"]

        return self._call(post)

    def deploy(self, repo: str, sha: str, environment: str, state: str = "success") -> None:
        """A deployment of `sha` to `environment` whose latest status is `state`."""
        def record() -> None:
            target = self._repo(repo)
            target.deployments.append({"id": self._hub.store.next_id(), "sha": sha,
                                       "environment": environment, "state": state,
                                       "creator": target.owner, "at": now()})

        self._call(record)

    def revoke_token(self, token: str) -> None:
        """Revoke a token (as `DELETE /installation/token` or an admin would): GitHub then
        answers 401 "Bad credentials" to it."""
        self._call(lambda: self._hub.store.tokens.pop(token, None))

    # -- acting as people -----------------------------------------------------------

    def create_issue(self, repo: str, title: str, body: str = "", as_user: str = "") -> int:
        def create() -> int:
            return self._hub.create_issue(self._repo(repo), title, body, self._as(as_user)).number

        return self._call(create)

    def attach(self, repo: str, data: bytes, content_type: str = "image/png") -> str:
        """Attach a file as a person does by dropping it in a comment box; its URL, for
        the markdown of a body or comment."""
        from fakehub.rest.attachments import attach

        def upload() -> str:
            found = attach(self._hub.store, self._repo(repo), data, content_type)
            return f"{self.base_url}/user-attachments/assets/{found.id}"

        return self._call(upload)

    def comment(self, repo: str, number: int, body: str, as_user: str) -> int:
        def create() -> int:
            return self._hub.add_comment(self._repo(repo), number, body, self._as(as_user)).id

        return self._call(create)

    def label(self, repo: str, number: int, name: str, as_user: str) -> None:
        """Add a label to an issue or PR as a person (GitHub lets triage and up)."""
        def add() -> None:
            found = self._repo(repo)
            self._hub.add_labels(found, self._hub.issue(found, number), [name], self._as(as_user))

        self._call(add)

    def edit_comment(self, repo: str, comment_id: int, body: str, as_user: str) -> None:
        self._call(lambda: self._hub.edit_comment(self._repo(repo), comment_id, body,
                                                  self._as(as_user)))

    def react(self, repo: str, comment_id: int, content: str, as_user: str) -> None:
        def react() -> None:
            comment = self._hub.comment(self._repo(repo), comment_id)
            self._hub.react(comment, content, self._as(as_user))

        self._call(react)

    def open_pr(
        self,
        repo: str,
        head: str,
        title: str,
        as_user: str,
        *,
        base: str | None = None,
        body: str = "",
        draft: bool = False,
    ) -> int:
        def create() -> int:
            target = self._repo(repo)
            issue = self._hub.open_pull(target, head=head, base=base or target.default_branch,
                                        title=title, body=body, actor=self._as(as_user),
                                        draft=draft)
            return issue.number

        return self._call(create)

    def fork(self, repo: str, owner: str) -> str:
        """owner's fork of repo (GitHub's "Fork"); its full name."""
        return self._call(lambda: self._hub.fork(self._repo(repo), owner).full_name)

    def set_anonymous_git(self, allowed: bool) -> None:
        """Whether public repositories can be cloned without a token (GitHub: yes).
        Turn it off to catch code that forgets to send its credentials."""
        def toggle() -> None:
            self._hub.anonymous_git_reads = allowed

        self._call(toggle)

    def delay_mergeability(self, reads: int = 1, merges: int = 0) -> None:
        """The next `reads` GETs of an open PR answer mergeable null, state "unknown",
        as GitHub does while it computes mergeability in the background; the next `merges`
        merges are answered 405 "Pull Request is not mergeable" meanwhile, as GitHub's."""
        def set_reads() -> None:
            self._hub.unknown_mergeability_reads = reads
            self._hub.uncomputed_merges = merges

        self._call(set_reads)

    def press_check_button(
        self, repo: str, check_run_id: int, identifier: str | None, as_user: str
    ) -> None:
        """A person presses a check run's action button, or "Re-run" when identifier is
        None; the owning App gets check_run requested_action / rerequested."""
        def press() -> None:
            target = self._repo(repo)
            run = self._hub.store.check_runs[check_run_id]
            self._hub.request_check_action(target, run, identifier, self._user(as_user))

        self._call(press)

    def rerun_all_checks(self, repo: str, sha: str, app_id: int, as_user: str) -> None:
        """A person presses "Re-run all checks" on an App's check suite on `sha`; that App
        gets check_suite rerequested."""
        def press() -> None:
            target = self._repo(repo)
            suite = next(s for s in self._hub.store.check_suites.values()
                         if s.repo_id == target.id and s.head_sha == sha
                         and s.app_id == app_id)
            self._hub.rerequest_suite(target, suite, self._user(as_user))

        self._call(press)

    def close_pr(self, repo: str, number: int, as_user: str) -> None:
        def close() -> None:
            target = self._repo(repo)
            self._hub.edit_pull(target, self._hub.pull(target, number), {"state": "closed"},
                                self._as(as_user))

        self._call(close)

    def retarget_pr(self, repo: str, number: int, base: str, as_user: str) -> None:
        """A person changing the pull request's base branch (an `edited` event follows)."""
        def retarget() -> None:
            target = self._repo(repo)
            self._hub.edit_pull(target, self._hub.pull(target, number), {"base": base},
                                self._as(as_user))

        self._call(retarget)

    def review(
        self,
        repo: str,
        pr_number: int,
        as_user: str,
        event: str = "APPROVE",
        body: str = "",
        commit_id: str | None = None,
        comments: list[dict[str, Any]] | None = None,
    ) -> int:
        def submit() -> int:
            target = self._repo(repo)
            return self._hub.submit_review(
                target, self._hub.pull(target, pr_number), self._as(as_user), event=event,
                body=body, commit_id=commit_id, comments=comments,
            ).id

        return self._call(submit)

    def merge_pr(
        self, repo: str, number: int, as_user: str, *, method: str = "merge",
        sha: str | None = None,
    ) -> str:
        """Merge as a person would in the UI (the rules apply to them)."""
        def merge() -> str:
            target = self._repo(repo)
            return self._hub.merge_pull(target, self._hub.pull(target, number),
                                        self._as(as_user), sha=sha, method=method)

        return self._call(merge)

    def push_files(
        self,
        repo: str,
        branch: str,
        files: dict[str, str | bytes | None],
        message: str,
        as_user: str,
        *,
        force: bool = False,
        base: str | None = None,
        bypass_rules: bool = False,
    ) -> str:
        """A person pushing one commit; webhooks follow as for a git push.

        The commit goes on top of `branch` (or `base`, or the default branch when the
        branch is new). `force=True` builds it on the tip's first parent instead,
        rewriting the last commit, i.e. a force push. Files mapped to None are deleted.
        The branch's rules apply unless `bypass_rules` (setup as an admin would do).
        Raises HubError with GitHub's rule-violation message when refused.
        """
        def push() -> str:
            target = self._repo(repo)
            actor = self._as(as_user)
            tip = gitrepo.ref_sha(target.path, branch)
            parent = base and gitrepo.resolve(target.path, base)
            if not parent:
                parent = tip or gitrepo.ref_sha(target.path, target.default_branch)
            if force and tip:
                info = gitrepo.commit_info(target.path, tip)
                parent = info.parents[0] if info.parents else None
            sha = gitrepo.commit_files(target.path, parent, dict(files), message,
                                       self._hub.signature(actor.user))
            return self._hub.internal_push(target, branch, sha, actor, enforce=not bypass_rules)

        return self._call(push)

    def delete_branch(self, repo: str, branch: str, as_user: str) -> None:
        def delete() -> None:
            target = self._repo(repo)
            old = gitrepo.ref_sha(target.path, branch)
            if old is None:
                return
            gitrepo.delete_ref(target.path, f"refs/heads/{branch}")
            self._hub.ref_updated(target, f"refs/heads/{branch}", old, gitrepo.ZERO_SHA,
                                  self._user(as_user))

        self._call(delete)

    # -- rules, CI, statuses --------------------------------------------------------

    def set_ruleset(self, repo: str, ruleset: dict[str, Any]) -> dict[str, Any]:
        """Add a repository ruleset (GitHub's POST /rulesets body); returns it with its id."""
        return self._call(lambda: self._hub.add_ruleset(self._repo(repo), ruleset))

    def set_push_protection(self, repo: str, enabled: bool = True) -> None:
        """Secret scanning's push protection: a push adding a known token format is refused."""
        def toggle() -> None:
            self._repo(repo).push_protection = enabled

        self._call(toggle)

    def allow_secret(self, repo: str, secret: str) -> None:
        """What following the refusal's unblock URL does: this secret may be pushed."""
        from fakehub.pushprotection import Finding

        key = Finding("", secret, "", "", 0).key
        self._call(lambda: self._repo(repo).allowed_secrets.add(key))

    def delete_ruleset(self, repo: str, ruleset_id: int) -> None:
        """Remove a repository ruleset (GitHub's DELETE /rulesets/{id})."""
        def remove() -> None:
            target = self._repo(repo)
            target.rulesets[:] = [r for r in target.rulesets if r["id"] != ruleset_id]

        self._call(remove)

    def protect(
        self,
        repo: str,
        *,
        approvals: int = 1,
        checks: list[str] | tuple[str, ...] = ("ci / test",),
        dismiss_stale: bool = True,
        strict: bool = False,
        bypass_app_ids: list[int] | tuple[int, ...] = (),
        last_push: bool = False,
        integration_ids: dict[str, int] | None = None,
    ) -> dict[str, Any]:
        """The usual ruleset on the default branch: PR, reviews, checks, no force, no delete.
        `integration_ids`: the App each named check must come from."""
        rules: list[dict[str, Any]] = [
            {"type": "deletion"},
            {"type": "non_fast_forward"},
            {"type": "pull_request", "parameters": {
                "required_approving_review_count": approvals,
                "dismiss_stale_reviews_on_push": dismiss_stale,
                "require_code_owner_review": False,
                "require_last_push_approval": last_push,
                "required_review_thread_resolution": False,
                "allowed_merge_methods": ["merge", "squash", "rebase"]}},
        ]
        if checks:
            rules.append({"type": "required_status_checks", "parameters": {
                "strict_required_status_checks_policy": strict,
                "required_status_checks": [
                    {"context": c, **({"integration_id": integration_ids[c]}
                                      if c in (integration_ids or {}) else {})}
                    for c in checks]}})
        return self.set_ruleset(repo, {
            "name": "protect default branch",
            "target": "branch",
            "enforcement": "active",
            "conditions": {"ref_name": {"include": ["~DEFAULT_BRANCH"], "exclude": []}},
            "rules": rules,
            "bypass_actors": [{"actor_id": i, "actor_type": "Integration",
                               "bypass_mode": "always"} for i in bypass_app_ids],
        })

    def protect_branch(self, repo: str, branch: str, *, approvals: int | None = 1,
                       checks: list[str] | tuple[str, ...] = ("ci / test",),
                       strict: bool = False, dismiss_stale: bool = True,
                       last_push: bool = False, enforce_admins: bool = False,
                       ) -> dict[str, Any]:
        """Classic branch protection on `branch` (GitHub's PUT …/protection body);
        approvals=None sets no required reviews, checks=() no required checks."""
        from fakehub import protection

        body: dict[str, Any] = {
            "required_status_checks": {"strict": strict, "contexts": list(checks)}
            if checks else None,
            "enforce_admins": enforce_admins,
            "required_pull_request_reviews": None if approvals is None else {
                "required_approving_review_count": approvals,
                "dismiss_stale_reviews": dismiss_stale,
                "require_last_push_approval": last_push},
            "restrictions": None,
        }

        def put() -> dict[str, Any]:
            target = self._repo(repo)
            target.protections[branch] = protection.normalize(body)
            return protection.as_github(target.protections[branch], "")

        return self._call(put)

    def set_ci(
        self, repo: str, command: str | None, name: str = "ci / test", timeout: float = 600.0
    ) -> None:
        """Run `command` (a shell line) on every new PR head; None turns CI off."""
        def configure() -> None:
            target = self._repo(repo)
            target.ci_command, target.ci_name, target.ci_timeout = command, name, timeout

        self._call(configure)

    def set_merge_methods(self, repo: str, *methods: str) -> None:
        """The repository's merge settings: only these merge_method values are allowed."""
        def configure() -> None:
            self._repo(repo).merge_methods = tuple(methods)

        self._call(configure)

    @property
    def ci_app_id(self) -> int:
        return self._call(lambda: self._hub.ci.app.id)

    def set_status(
        self,
        repo: str,
        sha: str,
        context: str,
        state: str,
        description: str = "",
        target_url: str | None = None,
        as_user: str | None = None,
    ) -> int:
        def create() -> int:
            target = self._repo(repo)
            actor = self._as(as_user) if as_user else self._as(target.owner.login)
            fields = {"context": context, "state": state, "description": description,
                      "target_url": target_url}
            return self._hub.create_status(target, sha, fields, actor).id

        return self._call(create)

    def complete_check(
        self,
        repo: str,
        sha: str,
        name: str = "ci / test",
        conclusion: str = "success",
        *,
        title: str | None = None,
        summary: str = "",
        text: str | None = None,
        status: str = "completed",
    ) -> int:
        """Report a check run as the CI App (another CI than the App under test)."""
        def create() -> int:
            target = self._repo(repo)
            app = self._hub.ci.app
            fields: dict[str, Any] = {"name": name, "head_sha": sha, "status": status}
            if status == "completed":
                fields["conclusion"] = conclusion
            fields["output"] = {"title": title or f"{name}: {conclusion}",
                                "summary": summary or conclusion, "text": text}
            return self._hub.create_check_run(target, app.id, fields, app.bot).id

        return self._call(create)

    # -- webhooks -------------------------------------------------------------------

    def deliveries(self, app_id: int | None = None, event: str | None = None) -> list[DeliveryInfo]:
        def collect() -> list[DeliveryInfo]:
            return [_delivery_info(d) for d in self._hub.store.deliveries
                    if (app_id is None or d.app_id == app_id)
                    and (event is None or d.event == event)]

        return self._call(collect)

    def disorder_webhooks(self, duplicate_rate: float = 0.5, reorder_window: float = 0.2,
                          seed: int = 0) -> None:
        """Deliver as GitHub may: about `duplicate_rate` of deliveries twice (same GUID),
        and those queued within `reorder_window` seconds in a shuffled order; `seed`
        makes a run repeatable. `disorder_webhooks(0, 0)` goes back to once, in order."""
        disorder = Disorder(duplicate_rate, reorder_window, seed)
        self._call(lambda: self._hub.deliverer.set_disorder(disorder))

    def redeliver(self, delivery_guid: str) -> DeliveryInfo:
        return self._call(lambda: _delivery_info(self._hub.deliverer.redeliver(delivery_guid)))

    def delivery_mark(self) -> int:
        """The id of the newest delivery so far (0 if none): pass it as `since`."""
        return self._call(lambda: max((d.id for d in self._hub.store.deliveries), default=0))

    def wait_for_delivery(
        self,
        event: str,
        action: str | None = None,
        *,
        app_id: int | None = None,
        where: Callable[[dict[str, Any]], bool] | None = None,
        since: int = 0,
        timeout: float = 120.0,
    ) -> DeliveryInfo:
        """The first recorded delivery matching (newer than `since`); polls until `timeout`,
        one a machine under load keeps."""
        deadline = time.monotonic() + timeout
        while True:
            for d in self.deliveries(app_id, event):
                if d.id <= since:
                    continue
                if (action is None or d.action == action) and (where is None or where(d.payload)):
                    return d
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {event}.{action} delivery within {timeout} s")
            time.sleep(0.05)

    # -- faults ---------------------------------------------------------------------

    def inject_fault(
        self,
        method: str,
        path_regex: str,
        *,
        status: int = 502,
        times: int | None = 1,
        rate: float | None = None,
        retry_after: int | None = None,
        hang_seconds: float | None = None,
        secondary_rate_limit: bool = False,
        rate_limit: bool = False,
        after: bool = False,
        message: str | None = None,
    ) -> Fault:
        """Fail matching REST calls (path relative to /api/v3, e.g. r"/pulls/\\d+/merge$")
        or git requests (whole path, e.g. r"\\.git/git-receive-pack$").

        `times=None` keeps failing until clear_faults(); `rate` fails that fraction of
        matching calls. `secondary_rate_limit` answers 403 with GitHub's message and
        Retry-After; `rate_limit` answers 403/429 with x-ratelimit-remaining: 0.
        `after` does what was asked first and then fails (GitHub's write-then-502);
        `message` is the JSON answer's message (GitHub's words for a refusal).
        """
        fault = Fault(method.upper(), path_regex, status=status, times=times, rate=rate,
                      retry_after=retry_after, hang_seconds=hang_seconds,
                      secondary_rate_limit=secondary_rate_limit, primary_rate_limit=rate_limit,
                      after=after, message=message)
        return self._call(self._server.faults.add, fault)

    def clear_faults(self) -> None:
        self._call(self._server.faults.clear)

    # -- read-outs ------------------------------------------------------------------

    def get_pr(self, repo: str, number: int) -> dict[str, Any]:
        return self._call(lambda: self._hub.shapes.pull(self._hub.pull(self._repo(repo), number)))

    def list_prs(self, repo: str, state: str = "all") -> list[dict[str, Any]]:
        def collect() -> list[dict[str, Any]]:
            target = self._repo(repo)
            return [self._hub.shapes.pull(i) for i in self._hub.store.pulls(target)
                    if state == "all" or i.state == state]

        return self._call(collect)

    def get_issue(self, repo: str, number: int) -> dict[str, Any]:
        return self._call(lambda: self._hub.shapes.issue(self._hub.issue(self._repo(repo), number)))

    def issue_comments(self, repo: str, number: int) -> list[dict[str, Any]]:
        def collect() -> list[dict[str, Any]]:
            target = self._repo(repo)
            found = sorted((c for c in self._hub.store.comments.values()
                            if c.repo_id == target.id and c.issue_number == number),
                           key=lambda c: c.id)
            return [self._hub.shapes.comment(c) for c in found]

        return self._call(collect)

    def reactions(self, repo: str, comment_id: int) -> list[dict[str, Any]]:
        def collect() -> list[dict[str, Any]]:
            comment = self._hub.comment(self._repo(repo), comment_id)
            return [self._hub.shapes.reaction(r) for r in comment.reactions]

        return self._call(collect)

    def reviews(self, repo: str, number: int) -> list[dict[str, Any]]:
        def collect() -> list[dict[str, Any]]:
            target = self._repo(repo)
            return [self._hub.shapes.review(r) for r in self._hub.store.reviews_for(target, number)]

        return self._call(collect)

    def check_runs(self, repo: str, sha: str) -> list[dict[str, Any]]:
        def collect() -> list[dict[str, Any]]:
            target = self._repo(repo)
            runs = sorted(self._hub.store.check_runs_for(target, sha), key=lambda r: r.id)
            return [self._hub.shapes.check_run(r) for r in runs]

        return self._call(collect)

    def statuses(self, repo: str, sha: str) -> list[dict[str, Any]]:
        def collect() -> list[dict[str, Any]]:
            target = self._repo(repo)
            return [self._hub.shapes.status(s) for s in self._hub.store.statuses_for(target, sha)]

        return self._call(collect)

    def ref_sha(self, repo: str, ref: str) -> str | None:
        """The sha of a branch name or full ref, None when it does not exist."""
        return self._call(lambda: gitrepo.ref_sha(self._repo(repo).path, ref))

    def read_file(self, repo: str, path: str, ref: str | None = None) -> bytes | None:
        def read() -> bytes | None:
            target = self._repo(repo)
            rev = ref or target.default_branch
            # A branch's tip, read from its ref file, makes the answer one kept by id.
            found = gitrepo.read_blob(target.path, gitrepo.ref_sha(target.path, rev) or rev, path)
            return found[0] if found else None

        return self._call(read)

    def repo_path(self, repo: str) -> Path:
        """The bare repository on disk (read-only use: inspect with git)."""
        return self._repo(repo).path

    def git_url(self, repo: str, token: str | None = None) -> str:
        """The clone URL, with basic-auth credentials when a token is given."""
        if token is None:
            return f"{self.base_url}/{repo}.git"
        host = self.base_url.removeprefix("http://")
        return f"http://x-access-token:{quote(token, safe='')}@{host}/{repo}.git"

    def api_calls(self, app_id: int | None = None, *,
                  charged_to: str | None = None) -> list[tuple[str, str, int]]:
        """Every REST call so far as (method, path under /api/v3, status).

        With `app_id`, only calls made with that App's JWT or its installation tokens.
        With `charged_to` ("installation" or "app"), only the calls whose allowance that
        is: an installation token's calls count against the installation's hourly
        allowance, the App's JWT calls (tokens, hook deliveries) against the App's own.
        """
        def collect() -> list[tuple[str, str, int]]:
            return [(m, p, s) for a, key, m, p, s in self._hub.store.api_calls
                    if (app_id is None or a == app_id)
                    and (charged_to is None or key.split(":")[0] == charged_to)]

        return self._call(collect)

    def reset_api_calls(self) -> None:
        self._call(self._hub.store.api_calls.clear)

    def record_exchanges(self, on: bool = True) -> None:
        """Keep every REST request/response body (the contract tests read them)."""
        def toggle() -> None:
            self._hub.record_exchanges = on

        self._call(toggle)

    def exchanges(self) -> list[dict[str, Any]]:
        return self._call(lambda: list(self._hub.exchanges))
