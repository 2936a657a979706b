"""The hub: fakehub's operations, shared by the REST API, git pushes and the Driver.

Every operation that GitHub would announce queues its webhooks here, after the state
change, so a receiver that calls back sees the new state.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
from datetime import datetime
from pathlib import Path
from typing import Any

from fakehub import auth, gitrepo, rulesets
from fakehub.gitrepo import ZERO_SHA, Signature
from fakehub.payloads import Shapes
from fakehub.state import (
    DEFAULT_APP_EVENTS,
    DEFAULT_APP_PERMISSIONS,
    App,
    CheckRun,
    CheckSuite,
    Comment,
    Identity,
    Installation,
    Issue,
    PullRequest,
    Reaction,
    Repo,
    Review,
    Status,
    Store,
    Token,
    User,
    iso,
    now,
    permission_at_least,
)
from fakehub.webhooks import Deliverer

log = logging.getLogger("fakehub")

# Check-suite conclusions, most important first (GitHub reports the highest).
SUITE_PRIORITY = [
    "action_required",
    "cancelled",
    "timed_out",
    "failure",
    "startup_failure",
    "stale",
    "neutral",
    "skipped",
    "success",
]


class HubError(Exception):
    """An operation GitHub would refuse: an HTTP status and GitHub's message."""

    def __init__(self, status: int, message: str, errors: list[dict] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.errors = errors


class Hub:
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
        # github.com serves public repositories to anonymous git; tests may forbid it to
        # catch code that forgets its credentials.
        self.anonymous_git_reads = True
        self.exchanges: list[dict[str, Any]] = []
        self._background: set[asyncio.Task] = set()

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
    ) -> App:
        slug = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
        if any(a.slug == slug for a in self.store.apps.values()):
            raise HubError(422, f"an App named {slug} exists")
        app_id = self.store.next_id()
        private, public = auth.new_key_pair()
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
                self._emit_installation_repos(app, existing, added)
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

    def _emit_installation_repos(self, app: App, inst: Installation, added: set[int]) -> None:
        repos = [r for r in self.store.installation_repos(inst) if r.id in added]
        self._emit_to_app(
            app,
            "installation_repositories",
            {
                "action": "added",
                "installation": self.shapes.installation_webhook(inst),
                "repository_selection": "selected",
                "repositories_added": [self._repo_brief(r) for r in repos],
                "repositories_removed": [],
                "requester": None,
                "sender": self.shapes.user(inst.account),
            },
            inst,
            None,
        )

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

    def _repo_named(self, owner: User, name: str) -> Repo:
        name = name.split("/")[-1]
        repo = self.store.repo(f"{owner.login}/{name}")
        if repo is None:
            raise HubError(404, f"no repository {owner.login}/{name}")
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
        path = self.repos_dir / owner.lower() / f"{name.lower()}.git"
        gitrepo.init_bare(path, default_branch)
        from fakehub.git_http import install_hooks

        install_hooks(path)
        stamp = now()
        repo = Repo(
            id=self.store.next_id(),
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
                self._emit_installation_repos(self.store.apps[inst.app_id], inst, {repo.id})
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
        self.ensure_user(login)
        repo.collaborators[login.lower()] = permission

    def signature(self, user: User) -> Signature:
        return Signature(user.name or user.login, user.email or f"{user.login}@fakehub.local")

    def permission(self, repo: Repo, ident: Identity) -> str:
        if ident.kind in ("installation", "app"):
            return "write"
        return self.store.permission(repo, ident.user)

    # -- pushes ---------------------------------------------------------------------

    def push_allowed(
        self, repo: Repo, ident: Identity, ref: str, old: str | None, new: str | None, ff: bool
    ) -> list[str]:
        """Why a direct push of `ref` is refused by the rules (empty: allowed)."""
        if not ref.startswith("refs/heads/"):
            return []
        branch = ref.removeprefix("refs/heads/")
        rules = rulesets.active_rules(repo, branch)
        if not rules:
            return []
        checks_pass = False
        if new:
            reasons, _ = rulesets.required_checks_reasons(
                rules, self.store.check_runs_for(repo, new), self.store.statuses_for(repo, new)
            )
            checks_pass = not reasons
        return rulesets.push_violations(
            rules,
            ident,
            self.permission(repo, ident),
            old=old,
            new=new,
            fast_forward=ff,
            checks_pass=checks_pass,
        )

    def ref_updated(self, repo: Repo, ref: str, old: str, new: str, pusher: User) -> None:
        """After any ref moved (git push, merge, update-branch): events and PR heads."""
        repo.pushed_at = now()
        self._emit_push(repo, ref, old, new, pusher)
        if not ref.startswith("refs/heads/"):
            return
        branch = ref.removeprefix("refs/heads/")
        for issue in self.store.pulls(repo):
            pr = issue.pull
            assert pr is not None
            if issue.state != "open":
                continue
            if pr.base_ref == branch and new != ZERO_SHA:
                pr.base_sha = new
            if pr.head_ref == branch and new != ZERO_SHA and new != pr.head_sha:
                before = pr.head_sha
                pr.head_sha = new
                issue.updated_at = now()
                self._emit_repo(
                    repo,
                    "pull_request",
                    {
                        "action": "synchronize",
                        "number": issue.number,
                        "before": before,
                        "after": new,
                        "pull_request": self.shapes.pull(issue),
                    },
                    pusher,
                )
                self._dismiss_stale_approvals(repo, issue, pusher)
                self._start_ci(repo, issue)

    def _dismiss_stale_approvals(self, repo: Repo, issue: Issue, actor: User) -> None:
        """With dismiss_stale_reviews_on_push, a new head dismisses older approvals."""
        pr = issue.pull
        assert pr is not None
        dismisses = any(
            a.type == "pull_request" and a.parameters.get("dismiss_stale_reviews_on_push")
            for a in rulesets.active_rules(repo, pr.base_ref)
        )
        if not dismisses:
            return
        for review in self.store.reviews_for(repo, issue.number):
            if review.state != "APPROVED" or review.commit_id == pr.head_sha:
                continue
            review.state = "DISMISSED"
            self._emit_repo(
                repo,
                "pull_request_review",
                {
                    "action": "dismissed",
                    "review": self.shapes.review(review, webhook=True),
                    "pull_request": self.shapes.pull_simple(issue),
                },
                actor,
            )

    def _emit_push(self, repo: Repo, ref: str, old: str, new: str, pusher: User) -> None:
        created, deleted = old == ZERO_SHA, new == ZERO_SHA
        commits: list[dict[str, Any]] = []
        head_commit = None
        forced = False
        if not deleted:
            base = None if created else old
            if created:
                base = gitrepo.ref_sha(repo.path, repo.default_branch)
                base = base if base and base != new else None
            elif not gitrepo.is_ancestor(repo.path, old, new):
                forced = True
                base = gitrepo.merge_base(repo.path, old, new)
            infos = gitrepo.commits_between(repo.path, base, new, limit=20)
            commits = [self.shapes.push_commit(repo, info) for info in infos]
            head_commit = self.shapes.push_commit(repo, gitrepo.commit_info(repo.path, new))
        compare = (
            f"{self.base_url}/{repo.full_name}/commit/{new[:12]}"
            if created
            else f"{self.base_url}/{repo.full_name}/compare/{old[:12]}...{new[:12]}"
        )
        self._emit_repo(
            repo,
            "push",
            {
                "ref": ref,
                "before": old,
                "after": new,
                "created": created,
                "deleted": deleted,
                "forced": forced,
                "base_ref": None,
                "compare": compare,
                "commits": commits,
                "head_commit": head_commit,
                "pusher": {"name": pusher.login, "email": pusher.email},
            },
            pusher,
        )

    def internal_push(
        self,
        repo: Repo,
        branch: str,
        new: str,
        actor: Identity,
        *,
        expected_old: str | None = None,
        enforce: bool = True,
    ) -> str:
        """Move a branch as a push by `actor` would (rules checked, events sent)."""
        ref = f"refs/heads/{branch}"
        old = gitrepo.ref_sha(repo.path, branch)
        if expected_old is not None and old != expected_old:
            raise HubError(409, "Reference moved")
        ff = old is None or gitrepo.is_ancestor(repo.path, old, new)
        if enforce:
            reasons = self.push_allowed(repo, actor, ref, old, new, ff)
            if reasons:
                raise HubError(422, rulesets.render_violations(ref, reasons))
        if not gitrepo.update_ref(repo.path, ref, new, old or ZERO_SHA):
            raise HubError(409, "Reference moved")
        self.ref_updated(repo, ref, old or ZERO_SHA, new, actor.user)
        return new

    # -- issues and comments --------------------------------------------------------

    def create_issue(self, repo: Repo, title: str, body: str | None, actor: Identity) -> Issue:
        if not title:
            raise HubError(422, "Validation Failed", [
                {"resource": "Issue", "code": "missing_field", "field": "title"}])
        stamp = now()
        issue = Issue(
            id=self.store.next_id(),
            repo_id=repo.id,
            number=self._next_number(repo),
            title=title,
            body=body,
            user=actor.user,
            created_at=stamp,
            updated_at=stamp,
            via_app_id=actor.app_id,
        )
        self.store.issues[(repo.id, issue.number)] = issue
        self._emit_repo(repo, "issues", {"action": "opened", "issue": self.shapes.issue(issue)},
                        actor.user)
        return issue

    def _next_number(self, repo: Repo) -> int:
        number = repo.next_number
        repo.next_number += 1
        return number

    def issue(self, repo: Repo, number: int) -> Issue:
        issue = self.store.issue(repo, number)
        if issue is None:
            raise HubError(404, "Not Found")
        return issue

    def set_issue_state(self, repo: Repo, issue: Issue, state: str, actor: Identity) -> None:
        if state == issue.state:
            return
        issue.state = state
        issue.updated_at = now()
        issue.closed_at = now() if state == "closed" else None
        issue.state_reason = "completed" if state == "closed" else "reopened"
        action = "closed" if state == "closed" else "reopened"
        if issue.pull:
            self._emit_repo(
                repo,
                "pull_request",
                {"action": action, "number": issue.number, "pull_request": self.shapes.pull(issue)},
                actor.user,
            )
        else:
            self._emit_repo(repo, "issues", {"action": action, "issue": self.shapes.issue(issue)},
                            actor.user)

    def add_comment(self, repo: Repo, number: int, body: str, actor: Identity) -> Comment:
        issue = self.issue(repo, number)
        if not body:
            raise HubError(422, "Validation Failed", [
                {"resource": "IssueComment", "code": "missing_field", "field": "body"}])
        stamp = now()
        comment = Comment(
            id=self.store.next_id(),
            repo_id=repo.id,
            issue_number=number,
            user=actor.user,
            body=body,
            created_at=stamp,
            updated_at=stamp,
            via_app_id=actor.app_id if actor.kind == "installation" else None,
        )
        self.store.comments[comment.id] = comment
        issue.updated_at = stamp
        self._emit_repo(
            repo,
            "issue_comment",
            {"action": "created", "issue": self.shapes.issue(issue),
             "comment": self.shapes.comment(comment)},
            actor.user,
        )
        return comment

    def comment(self, repo: Repo, comment_id: int) -> Comment:
        comment = self.store.comments.get(comment_id)
        if comment is None or comment.repo_id != repo.id:
            raise HubError(404, "Not Found")
        return comment

    def edit_comment(self, repo: Repo, comment_id: int, body: str, actor: Identity) -> Comment:
        comment = self.comment(repo, comment_id)
        if comment.user.id != actor.user.id and not permission_at_least(
            self.permission(repo, actor), "write"
        ):
            raise HubError(403, "Must have admin rights to Repository.")
        before = comment.body
        comment.body = body
        comment.updated_at = now()
        issue = self.issue(repo, comment.issue_number)
        self._emit_repo(
            repo,
            "issue_comment",
            {
                "action": "edited",
                "changes": {"body": {"from": before}},
                "issue": self.shapes.issue(issue),
                "comment": self.shapes.comment(comment),
            },
            actor.user,
        )
        return comment

    def react(
        self, target: Comment | Issue, content: str, actor: Identity
    ) -> tuple[Reaction, bool]:
        """(reaction, created): one reaction per user and content, like GitHub."""
        for reaction in target.reactions:
            if reaction.user.id == actor.user.id and reaction.content == content:
                return reaction, False
        reaction = Reaction(self.store.next_id(), actor.user, content, now())
        target.reactions.append(reaction)
        return reaction, True

    # -- pull requests --------------------------------------------------------------

    def open_pull(
        self,
        repo: Repo,
        *,
        head: str,
        base: str,
        title: str,
        body: str | None,
        actor: Identity,
        draft: bool = False,
        maintainer_can_modify: bool = False,
    ) -> Issue:
        head_branch = head.split(":", 1)[1] if ":" in head else head
        errors = []
        head_sha = gitrepo.ref_sha(repo.path, head_branch)
        base_sha = gitrepo.ref_sha(repo.path, base)
        if not title:
            errors.append({"resource": "PullRequest", "code": "missing_field", "field": "title"})
        if head_sha is None:
            errors.append({"resource": "PullRequest", "code": "invalid", "field": "head"})
        if base_sha is None:
            errors.append({"resource": "PullRequest", "code": "invalid", "field": "base"})
        if errors:
            raise HubError(422, "Validation Failed", errors)
        assert head_sha and base_sha
        if head_sha == base_sha or gitrepo.is_ancestor(repo.path, head_sha, base_sha):
            raise HubError(422, "Validation Failed", [{
                "resource": "PullRequest", "code": "custom",
                "message": f"No commits between {base} and {head_branch}"}])
        for other in self.store.pulls(repo):
            assert other.pull
            if other.state == "open" and other.pull.head_ref == head_branch \
                    and other.pull.base_ref == base:
                raise HubError(422, "Validation Failed", [{
                    "resource": "PullRequest", "code": "custom",
                    "message": f"A pull request already exists for "
                               f"{repo.owner.login}:{head_branch}."}])
        stamp = now()
        issue = Issue(
            id=self.store.next_id(),
            repo_id=repo.id,
            number=self._next_number(repo),
            title=title,
            body=body,
            user=actor.user,
            created_at=stamp,
            updated_at=stamp,
            via_app_id=actor.app_id,
            pull=PullRequest(
                id=self.store.next_id(),
                head_ref=head_branch,
                head_sha=head_sha,
                base_ref=base,
                base_sha=base_sha,
                draft=draft,
                maintainer_can_modify=maintainer_can_modify,
            ),
        )
        self.store.issues[(repo.id, issue.number)] = issue
        self._emit_repo(
            repo,
            "pull_request",
            {"action": "opened", "number": issue.number, "pull_request": self.shapes.pull(issue)},
            actor.user,
        )
        self._start_ci(repo, issue)
        return issue

    def pull(self, repo: Repo, number: int) -> Issue:
        issue = self.store.issue(repo, number)
        if issue is None or issue.pull is None:
            raise HubError(404, "Not Found")
        return issue

    def edit_pull(
        self, repo: Repo, issue: Issue, changes: dict[str, Any], actor: Identity
    ) -> None:
        before: dict[str, Any] = {}
        if "title" in changes and changes["title"] != issue.title:
            before["title"] = {"from": issue.title}
            issue.title = changes["title"]
        if "body" in changes and changes["body"] != issue.body:
            before["body"] = {"from": issue.body or ""}
            issue.body = changes["body"]
        if "base" in changes and issue.pull and changes["base"] != issue.pull.base_ref:
            base_sha = gitrepo.ref_sha(repo.path, changes["base"])
            if base_sha is None:
                raise HubError(422, "Validation Failed", [
                    {"resource": "PullRequest", "code": "invalid", "field": "base"}])
            before["base"] = {"ref": {"from": issue.pull.base_ref},
                              "sha": {"from": issue.pull.base_sha}}
            issue.pull.base_ref, issue.pull.base_sha = changes["base"], base_sha
        if before:
            issue.updated_at = now()
            event = "pull_request" if issue.pull else "issues"
            payload: dict[str, Any] = {"action": "edited", "changes": before}
            if issue.pull:
                payload.update(number=issue.number, pull_request=self.shapes.pull(issue))
            else:
                payload["issue"] = self.shapes.issue(issue)
            self._emit_repo(repo, event, payload, actor.user)
        if "state" in changes:
            self.set_issue_state(repo, issue, changes["state"], actor)

    def mergeability(self, repo: Repo, issue: Issue) -> tuple[bool | None, str]:
        """(mergeable, mergeable_state) computed from git and the rules."""
        pr = issue.pull
        assert pr is not None
        if pr.merged or issue.state != "open":
            return None, "unknown"
        base_tip = gitrepo.ref_sha(repo.path, pr.base_ref) or pr.base_sha
        _, clean = gitrepo.merge_tree(repo.path, base_tip, pr.head_sha)
        if not clean:
            return False, "dirty"
        if pr.draft:
            return True, "draft"
        if self.merge_refusals(repo, issue, None):
            return True, "blocked"
        if not gitrepo.is_ancestor(repo.path, base_tip, pr.head_sha):
            return True, "behind"
        runs = self.store.check_runs_for(repo, pr.head_sha)
        failing = any(
            r.status == "completed" and r.conclusion not in rulesets.PASSING_CONCLUSIONS
            for r in runs
        ) or any(
            s.state in ("failure", "error")
            for s in self._latest_statuses(repo, pr.head_sha)
        )
        pending = any(r.status != "completed" for r in runs) or any(
            s.state == "pending" for s in self._latest_statuses(repo, pr.head_sha)
        )
        return True, "unstable" if failing or pending else "clean"

    def _latest_statuses(self, repo: Repo, sha: str) -> list[Status]:
        latest: dict[str, Status] = {}
        for status in self.store.statuses_for(repo, sha):  # newest first
            latest.setdefault(status.context, status)
        return list(latest.values())

    def merge_refusals(self, repo: Repo, issue: Issue, actor: Identity | None) -> list[str]:
        """What the base branch's rules say against merging this PR now."""
        pr = issue.pull
        assert pr is not None
        rules = rulesets.active_rules(repo, pr.base_ref)
        if actor is not None:
            permission = self.permission(repo, actor)
            rules = [r for r in rules if not rulesets.may_bypass(r.ruleset, actor, permission)]
        reasons: list[str] = []
        for active in rules:
            if active.type != "pull_request":
                continue
            needed = int(active.parameters.get("required_approving_review_count", 0))
            verdict = rulesets.count_reviews(
                self.store.reviews_for(repo, issue.number),
                author_id=issue.user.id,
                head_sha=pr.head_sha,
                only_current_head=bool(active.parameters.get("dismiss_stale_reviews_on_push")),
                has_write=lambda u: permission_at_least(self.store.permission(repo, u), "write"),
            )
            if verdict.changes_requested:
                reasons.append("Changes must be addressed before merging: a reviewer with "
                               "write access requested changes.")
            if verdict.approvals < needed:
                noun = "review is" if needed == 1 else "reviews are"
                reasons.append(
                    f"At least {needed} approving {noun} required by reviewers with write access."
                )
        check_reasons, _ = rulesets.required_checks_reasons(
            rules, self.store.check_runs_for(repo, pr.head_sha),
            self.store.statuses_for(repo, pr.head_sha)
        )
        reasons.extend(check_reasons)
        if rulesets.strict_policy(rules):
            base_tip = gitrepo.ref_sha(repo.path, pr.base_ref)
            if base_tip and not gitrepo.is_ancestor(repo.path, base_tip, pr.head_sha):
                reasons.append("This branch must be up to date with the base branch.")
        return list(dict.fromkeys(reasons))

    def merge_pull(
        self,
        repo: Repo,
        issue: Issue,
        actor: Identity,
        *,
        sha: str | None,
        method: str = "merge",
        title: str | None = None,
        message: str | None = None,
    ) -> str:
        pr = issue.pull
        assert pr is not None
        if pr.merged or issue.state != "open":
            raise HubError(405, "Pull Request is not mergeable")
        if sha and sha != pr.head_sha:
            raise HubError(409, "Head branch was modified. Review and try the merge again.")
        if pr.draft:
            raise HubError(405, "Draft pull requests cannot be merged.")
        if method not in ("merge", "squash", "rebase"):
            raise HubError(422, "Validation Failed", [
                {"resource": "PullRequest", "code": "invalid", "field": "merge_method"}])
        reasons = self.merge_refusals(repo, issue, actor)
        if reasons:
            raise HubError(405, rulesets.render_violations(f"refs/heads/{pr.base_ref}", reasons))
        base_tip = gitrepo.ref_sha(repo.path, pr.base_ref)
        if base_tip is None:
            raise HubError(405, "Base branch was deleted")
        new = self._merge_commit(repo, issue, actor, base_tip, method, title, message)
        if new is None:
            raise HubError(405, "Pull Request is not mergeable")
        if not gitrepo.update_ref(repo.path, f"refs/heads/{pr.base_ref}", new, base_tip):
            raise HubError(409, "Base branch was modified. Review and try the merge again.")
        stamp = now()
        pr.merged, pr.merged_at, pr.merged_by, pr.merge_commit_sha = True, stamp, actor.user, new
        issue.state, issue.closed_at, issue.updated_at = "closed", stamp, stamp
        self.ref_updated(repo, f"refs/heads/{pr.base_ref}", base_tip, new, actor.user)
        self._emit_repo(
            repo,
            "pull_request",
            {"action": "closed", "number": issue.number, "pull_request": self.shapes.pull(issue)},
            actor.user,
        )
        return new

    def _merge_commit(
        self,
        repo: Repo,
        issue: Issue,
        actor: Identity,
        base_tip: str,
        method: str,
        title: str | None,
        message: str | None,
    ) -> str | None:
        pr = issue.pull
        assert pr is not None
        who = self.signature(actor.user)
        if method == "rebase":
            commits = gitrepo.commits_between(repo.path, base_tip, pr.head_sha, limit=1000)
            return gitrepo.rebase_commits(repo.path, base_tip, commits, who)
        tree, clean = gitrepo.merge_tree(repo.path, base_tip, pr.head_sha)
        if not clean or tree is None:
            return None
        if method == "squash":
            head_title = f"{issue.title} (#{issue.number})"
            commits = gitrepo.commits_between(repo.path, base_tip, pr.head_sha, limit=250)
            body = message if message is not None else "\n\n".join(
                f"* {c.message}" for c in commits
            )
            text = f"{title or head_title}\n\n{body}".rstrip() + "\n"
            return gitrepo.commit_tree(repo.path, tree, [base_tip], text, who)
        head_title = f"Merge pull request #{issue.number} from {repo.owner.login}/{pr.head_ref}"
        text = f"{title or head_title}\n\n{message if message is not None else issue.title}"
        return gitrepo.commit_tree(repo.path, tree, [base_tip, pr.head_sha], text + "\n", who)

    def update_branch(
        self, repo: Repo, issue: Issue, actor: Identity, expected_head_sha: str | None
    ) -> None:
        pr = issue.pull
        assert pr is not None
        if expected_head_sha and expected_head_sha != pr.head_sha:
            raise HubError(422, "expected_head_sha didn't match current head ref.")
        base_tip = gitrepo.ref_sha(repo.path, pr.base_ref)
        assert base_tip is not None
        if gitrepo.is_ancestor(repo.path, base_tip, pr.head_sha):
            raise HubError(422, "There are no new commits on the base branch.")
        tree, clean = gitrepo.merge_tree(repo.path, pr.head_sha, base_tip)
        if not clean or tree is None:
            raise HubError(422, "merge conflict between base and head")
        text = f"Merge branch '{pr.base_ref}' into {pr.head_ref}\n"
        new = gitrepo.commit_tree(
            repo.path, tree, [pr.head_sha, base_tip], text, self.signature(actor.user)
        )
        try:
            self.internal_push(repo, pr.head_ref, new, actor, expected_old=pr.head_sha)
        except HubError as exc:
            raise HubError(422, "expected_head_sha didn't match current head ref.") from exc

    # -- reviews --------------------------------------------------------------------

    def submit_review(
        self,
        repo: Repo,
        issue: Issue,
        actor: Identity,
        *,
        event: str,
        body: str = "",
        commit_id: str | None = None,
        comments: list[dict[str, Any]] | None = None,
    ) -> Review:
        pr = issue.pull
        assert pr is not None
        states = {"APPROVE": "APPROVED", "REQUEST_CHANGES": "CHANGES_REQUESTED",
                  "COMMENT": "COMMENTED"}
        if event not in states:
            raise HubError(422, "Validation Failed", [
                {"resource": "PullRequestReview", "code": "invalid", "field": "event"}])
        if actor.user.id == issue.user.id and event in ("APPROVE", "REQUEST_CHANGES"):
            verb = "approve" if event == "APPROVE" else "request changes on"
            raise HubError(422, "Unprocessable Entity", [
                f"Review Can not {verb} your own pull request"])
        if event in ("REQUEST_CHANGES", "COMMENT") and not body and not comments:
            raise HubError(422, "Unprocessable Entity", [
                f"Review body is required for {event} events"])
        review = Review(
            id=self.store.next_id(),
            repo_id=repo.id,
            pr_number=issue.number,
            user=actor.user,
            state=states[event],
            body=body,
            commit_id=commit_id or pr.head_sha,
            submitted_at=now(),
            comments=list(comments or []),
        )
        self.store.reviews[review.id] = review
        self._emit_repo(
            repo,
            "pull_request_review",
            {
                "action": "submitted",
                "review": self.shapes.review(review, webhook=True),
                "pull_request": self.shapes.pull_simple(issue),
            },
            actor.user,
        )
        return review

    # -- checks ---------------------------------------------------------------------

    def _suite_for(self, repo: Repo, app_id: int, sha: str) -> CheckSuite:
        for suite in self.store.check_suites.values():
            if suite.repo_id == repo.id and suite.app_id == app_id and suite.head_sha == sha:
                return suite
        branch = next(
            (name.removeprefix("refs/heads/")
             for name, tip in gitrepo.list_refs(repo.path, "refs/heads/").items() if tip == sha),
            None,
        )
        stamp = now()
        suite = CheckSuite(
            id=self.store.next_id(),
            repo_id=repo.id,
            head_sha=sha,
            head_branch=branch,
            app_id=app_id,
            created_at=stamp,
            updated_at=stamp,
            after=sha,
        )
        self.store.check_suites[suite.id] = suite
        return suite

    def create_check_run(
        self, repo: Repo, app_id: int, fields: dict[str, Any], actor: User
    ) -> CheckRun:
        sha = gitrepo.resolve(repo.path, fields["head_sha"])
        if sha is None:
            raise HubError(422, "Validation Failed", [
                {"resource": "CheckRun", "code": "invalid", "field": "head_sha"}])
        suite = self._suite_for(repo, app_id, sha)
        stamp = now()
        run = CheckRun(
            id=self.store.next_id(),
            repo_id=repo.id,
            suite_id=suite.id,
            app_id=app_id,
            head_sha=sha,
            name=fields["name"],
            status="queued",
            conclusion=None,
            started_at=stamp,
            completed_at=None,
            output={},
        )
        self.store.check_runs[run.id] = run
        self._apply_check_fields(run, fields)
        shaped = self.shapes.check_run(run, webhook=True)
        self._emit_repo(repo, "check_run", {"action": "created", "check_run": shaped}, actor)
        if run.status == "completed":
            self._check_run_completed(repo, run, actor)
        else:
            self._roll_up(repo, suite, actor)
        return run

    def update_check_run(
        self, repo: Repo, run: CheckRun, app_id: int, fields: dict[str, Any], actor: User
    ) -> CheckRun:
        if run.app_id != app_id:
            raise HubError(403, f"Invalid app_id `{app_id}` - check run can only be modified by "
                                "the GitHub App that created it.")
        was_completed = run.status == "completed"
        self._apply_check_fields(run, fields)
        if run.status == "completed" and not was_completed:
            self._check_run_completed(repo, run, actor)
        else:
            self._roll_up(repo, self.store.check_suites[run.suite_id], actor)
        return run

    def _apply_check_fields(self, run: CheckRun, fields: dict[str, Any]) -> None:
        for key in ("name", "details_url", "external_id"):
            if key in fields:
                setattr(run, key, fields[key])
        if fields.get("started_at"):
            run.started_at = _parse_time(fields["started_at"])
        if "status" in fields:
            run.status = fields["status"]
        if fields.get("conclusion"):
            run.conclusion = fields["conclusion"]
            run.status = "completed"
        if run.status == "completed":
            run.completed_at = (
                _parse_time(fields["completed_at"]) if fields.get("completed_at") else now()
            )
        if fields.get("output"):
            output = dict(fields["output"])
            run.annotations.extend(output.pop("annotations", []) or [])
            output.pop("images", None)
            run.output.update(output)
        if "actions" in fields:
            run.actions = list(fields["actions"] or [])

    def request_check_action(
        self, repo: Repo, run: CheckRun, identifier: str | None, actor: User
    ) -> None:
        """A person pressed a check run's button (identifier) or "Re-run" (None).

        Like GitHub, only the App that owns the run hears about it.
        """
        payload: dict[str, Any] = {"check_run": self.shapes.check_run(run, webhook=True)}
        if identifier is None:
            payload = {"action": "rerequested", **payload}
        else:
            payload = {"action": "requested_action", **payload,
                       "requested_action": {"identifier": identifier}}
        self._emit_repo(repo, "check_run", payload, actor, only_app_id=run.app_id)
        if identifier is None and self.ci is not None and run.app_id == self.ci.app.id:
            self._rerun_ci_for(repo, run.head_sha)

    def _rerun_ci_for(self, repo: Repo, sha: str) -> None:
        """fakehub's CI answers "Re-run" on its own runs by running the head again."""
        for issue in self.store.pulls(repo):
            if issue.state == "open" and issue.pull and issue.pull.head_sha == sha:
                if repo.ci_command:
                    self.ci.schedule(repo, issue, again=True)
                return

    def _check_run_completed(self, repo: Repo, run: CheckRun, actor: User) -> None:
        self._emit_repo(repo, "check_run",
                        {"action": "completed",
                         "check_run": self.shapes.check_run(run, webhook=True)},
                        actor)
        self._roll_up(repo, self.store.check_suites[run.suite_id], actor)

    def _roll_up(self, repo: Repo, suite: CheckSuite, actor: User) -> None:
        runs = [r for r in self.store.check_runs.values() if r.suite_id == suite.id]
        suite.updated_at = now()
        if not runs or any(r.status != "completed" for r in runs):
            suite.status = "in_progress" if any(r.status == "in_progress" for r in runs) \
                else "queued"
            suite.conclusion = None
            return
        was_completed = suite.status == "completed"
        conclusions = {r.conclusion for r in runs}
        suite.status = "completed"
        suite.conclusion = next((c for c in SUITE_PRIORITY if c in conclusions), "success")
        if not was_completed:
            self._emit_repo(
                repo,
                "check_suite",
                {"action": "completed",
                 "check_suite": self.shapes.check_suite(suite, webhook=True)},
                actor,
            )

    def create_status(
        self,
        repo: Repo,
        sha: str,
        fields: dict[str, Any],
        actor: Identity,
    ) -> Status:
        resolved = gitrepo.resolve(repo.path, sha)
        if resolved is None:
            raise HubError(422, f"No commit found for SHA: {sha}")
        if fields.get("state") not in ("error", "failure", "pending", "success"):
            raise HubError(422, "Validation Failed", [
                {"resource": "Status", "code": "custom", "field": "state",
                 "message": "state is not included in the list"}])
        stamp = now()
        status = Status(
            id=self.store.next_id(),
            repo_id=repo.id,
            sha=resolved,
            context=fields.get("context") or "default",
            state=fields["state"],
            description=fields.get("description"),
            target_url=fields.get("target_url"),
            creator=actor.user,
            created_at=stamp,
            updated_at=stamp,
        )
        self.store.statuses.append(status)
        self._emit_status(repo, status, actor.user)
        return status

    def _emit_status(self, repo: Repo, status: Status, actor: User) -> None:
        info = gitrepo.commit_info(repo.path, status.sha)
        commit = self.shapes.commit(repo, info)
        commit.pop("files", None)
        commit.pop("stats", None)
        commit["commit"]["verification"].pop("verified_at")  # not in the webhook's shape
        branches = [
            {"name": name.removeprefix("refs/heads/"),
             "commit": {"sha": tip, "url": f"{self.api_url}/repos/{repo.full_name}/commits/{tip}"},
             "protected": bool(rulesets.active_rules(repo, name.removeprefix("refs/heads/")))}
            for name, tip in gitrepo.list_refs(repo.path, "refs/heads/").items()
            if tip == status.sha
        ]
        self._emit_repo(
            repo,
            "status",
            {
                "id": status.id,
                "sha": status.sha,
                "name": repo.full_name,
                "target_url": status.target_url,
                "avatar_url": None,
                "context": status.context,
                "description": status.description,
                "state": status.state,
                "commit": commit,
                "branches": branches,
                "created_at": iso(status.created_at),
                "updated_at": iso(status.updated_at),
            },
            actor,
        )

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
        """Send an event to every App installed on the repo that subscribes to it."""
        for app in self.store.apps.values():
            inst = self.store.installation_for(app.id, repo)
            if inst is None or event not in app.events:
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
        if event not in app.events and event not in ("installation", "installation_repositories"):
            return
        self.deliverer.enqueue(app, event, payload, installation_id=inst.id,
                               repository_id=repo.id if repo else None)



def _parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
