"""fakehub's in-memory state: plain records and the store that indexes them.

Everything here is touched only from the server's event loop; the Driver reaches it
through that loop, so no locks are needed.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# GitHub's permission ladder; a higher index includes the lower ones.
PERMISSION_LEVELS = ["none", "read", "triage", "write", "maintain", "admin"]

DEFAULT_APP_EVENTS = [
    "issue_comment",
    "issues",
    "pull_request",
    "pull_request_review",
    "pull_request_review_comment",
    "check_run",
    "check_suite",
    "status",
    "push",
    "member",
    "installation",
    "installation_repositories",
    "pull_request_review_thread",
    "merge_group",
    "repository",
]

DEFAULT_APP_PERMISSIONS = {
    "checks": "write",
    "contents": "write",
    "issues": "write",
    "metadata": "read",
    "pull_requests": "write",
    "statuses": "write",
    "members": "read",
    "deployments": "read",
}


def now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def iso(when: datetime | None) -> str | None:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ") if when else None


def permission_at_least(have: str, need: str) -> bool:
    return PERMISSION_LEVELS.index(have) >= PERMISSION_LEVELS.index(need)


@dataclass
class User:
    login: str
    id: int
    token: str
    type: str = "User"  # "User", "Bot" or "Organization"
    name: str | None = None
    email: str | None = None

    @property
    def node_id(self) -> str:
        return f"U_{self.id}"


@dataclass
class App:
    id: int
    slug: str
    name: str
    owner: User
    bot: User
    private_key_pem: str
    public_key_pem: str
    private_key_path: Path
    webhook_secret: str
    webhook_url: str | None
    events: list[str]
    permissions: dict[str, str]
    created_at: datetime
    client_id: str
    client_secret: str = ""
    # Where the web application flow may send a person back (the App's "Callback URL").
    callback_urls: list[str] = field(default_factory=list)


@dataclass
class Installation:
    id: int
    app_id: int
    account: User
    repo_ids: set[int] | None  # None: all repositories of the account
    permissions: dict[str, str]
    created_at: datetime
    # The account's owner suspended the App here: when, and who (None while it is not).
    suspended_at: datetime | None = None
    suspended_by: User | None = None

    @property
    def suspended(self) -> bool:
        """GitHub neither mints tokens for a suspended installation, nor honours the ones it
        minted, nor delivers its repositories' webhooks."""
        return self.suspended_at is not None


@dataclass
class Token:
    token: str
    kind: str  # "installation" or "user"
    expires_at: datetime | None = None
    installation_id: int | None = None
    repo_ids: set[int] | None = None  # narrowed installation token; None = all granted
    permissions: dict[str, str] = field(default_factory=dict)
    login: str | None = None
    app_id: int | None = None  # a user token: the App the person authorized


@dataclass
class Identity:
    """Who is calling: an App (JWT), an installation token, or a user token."""

    kind: str  # "app", "installation", "user"
    user: User  # the acting user: the App's bot for apps and installations
    app_id: int | None = None
    installation_id: int | None = None
    token: Token | None = None


@dataclass
class Repo:
    id: int
    owner: User
    name: str
    private: bool
    default_branch: str
    path: Path
    created_at: datetime
    pushed_at: datetime
    collaborators: dict[str, str] = field(default_factory=dict)
    rulesets: list[dict[str, Any]] = field(default_factory=list)
    protections: dict[str, dict[str, Any]] = field(default_factory=dict)  # classic, by branch
    last_pushers: dict[str, int] = field(default_factory=dict)  # branch -> user id
    # Secret scanning's push protection, and the secrets people allowed through it.
    push_protection: bool = False
    allowed_secrets: set[str] = field(default_factory=set)
    ci_command: str | None = None
    ci_name: str = "ci / test"
    ci_timeout: float = 600.0
    next_number: int = 1
    fork_of: int | None = None  # the parent repository's id, for a fork
    # The repository's merge settings: which merge buttons (and merge_method values) work.
    merge_methods: tuple[str, ...] = ("merge", "squash", "rebase")
    labels: dict[str, Label] = field(default_factory=dict)  # by lower-case name
    # Deployments: {id, sha, environment, state, creator} (the latest status's state).
    deployments: list[dict[str, Any]] = field(default_factory=list)

    @property
    def full_name(self) -> str:
        return f"{self.owner.login}/{self.name}"


@dataclass
class Reaction:
    id: int
    user: User
    content: str
    created_at: datetime


@dataclass
class Comment:
    id: int
    repo_id: int
    issue_number: int
    user: User
    body: str
    created_at: datetime
    updated_at: datetime
    via_app_id: int | None = None
    reactions: list[Reaction] = field(default_factory=list)


@dataclass
class PullRequest:
    id: int
    head_ref: str
    head_sha: str
    base_ref: str
    base_sha: str  # base tip when last computed (GitHub shows it in base.sha)
    draft: bool = False
    merged: bool = False
    merged_at: datetime | None = None
    merged_by: User | None = None
    merge_commit_sha: str | None = None
    maintainer_can_modify: bool = False
    head_repo_id: int | None = None  # a fork's id when the head lives there (GitHub: head.repo)
    # Review threads (each line comment of a review starts one: "<review id>-<index>")
    # that someone resolved.
    resolved_threads: set[str] = field(default_factory=set)
    requested_reviewers: list[User] = field(default_factory=list)  # asked, not yet reviewed


@dataclass
class Issue:
    id: int
    repo_id: int
    number: int
    title: str
    body: str | None
    user: User
    created_at: datetime
    updated_at: datetime
    state: str = "open"
    closed_at: datetime | None = None
    state_reason: str | None = None
    via_app_id: int | None = None
    pull: PullRequest | None = None
    reactions: list[Reaction] = field(default_factory=list)
    labels: list[Label] = field(default_factory=list)


@dataclass
class Review:
    id: int
    repo_id: int
    pr_number: int
    user: User
    state: str  # APPROVED, CHANGES_REQUESTED, COMMENTED, DISMISSED
    body: str
    commit_id: str | None
    submitted_at: datetime
    comments: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class CheckSuite:
    id: int
    repo_id: int
    head_sha: str
    head_branch: str | None
    app_id: int
    created_at: datetime
    updated_at: datetime
    status: str = "queued"
    conclusion: str | None = None
    before: str | None = None
    after: str | None = None


@dataclass
class CheckRun:
    id: int
    repo_id: int
    suite_id: int
    app_id: int
    head_sha: str
    name: str
    status: str
    conclusion: str | None
    started_at: datetime | None
    completed_at: datetime | None
    output: dict[str, Any]
    annotations: list[dict[str, Any]] = field(default_factory=list)
    actions: list[dict[str, Any]] = field(default_factory=list)
    external_id: str | None = None
    details_url: str | None = None


@dataclass
class Status:
    id: int
    repo_id: int
    sha: str
    context: str
    state: str
    description: str | None
    target_url: str | None
    creator: User
    created_at: datetime
    updated_at: datetime


@dataclass
class Delivery:
    id: int
    guid: str
    event: str
    action: str | None
    app_id: int
    installation_id: int | None
    repository_id: int | None
    body: bytes
    request_headers: dict[str, str]
    delivered_at: datetime
    status_code: int | None = None
    response_body: str = ""
    duration: float = 0.0
    redelivery: bool = False
    error: str | None = None

    @property
    def payload(self) -> dict[str, Any]:
        import json

        return json.loads(self.body)


@dataclass
class Label:
    id: int
    name: str
    color: str = "ededed"
    description: str | None = None


@dataclass
class Attachment:
    """A file attached to an issue or comment (served at /user-attachments/assets/{id})."""

    id: str
    repo_id: int
    data: bytes
    content_type: str


class Store:
    """Indexes of every record, and the id sequence they share."""

    def __init__(self) -> None:
        self._ids = itertools.count(1001)
        self.users: dict[str, User] = {}
        self.apps: dict[int, App] = {}
        self.installations: dict[int, Installation] = {}
        self.tokens: dict[str, Token] = {}
        self.repos: dict[str, Repo] = {}  # by lower-case full name
        # A renamed repository's earlier full names (lower-case) → its id: GitHub redirects
        # them to it while no repository has that name.
        self.renamed: dict[str, int] = {}
        self.issues: dict[tuple[int, int], Issue] = {}  # (repo id, number)
        self.comments: dict[int, Comment] = {}
        self.reviews: dict[int, Review] = {}
        self.check_suites: dict[int, CheckSuite] = {}
        self.check_runs: dict[int, CheckRun] = {}
        self.statuses: list[Status] = []
        self.deliveries: list[Delivery] = []
        # (app id, whose allowance was charged, method, path, status) of each REST call
        self.api_calls: list[tuple[int | None, str, str, str, int]] = []
        # App manifest flow: one-time code -> (App id, when it was issued).
        self.manifest_codes: dict[str, tuple[int, datetime]] = {}
        # The web application flow's codes: code → (app id, login, redirect_uri, issued).
        self.oauth_codes: dict[str, tuple[int, str, str, datetime]] = {}
        self.attachments: dict[str, Attachment] = {}  # by asset id

    def next_id(self) -> int:
        return next(self._ids)

    def repo(self, full_name: str) -> Repo | None:
        return self.repos.get(full_name.lower())

    def repo_by_id(self, repo_id: int) -> Repo | None:
        return next((r for r in self.repos.values() if r.id == repo_id), None)

    def repo_renamed_from(self, full_name: str) -> Repo | None:
        """The repository that was called `full_name` and has another name now, while no
        repository has that name (GitHub redirects the old name to it)."""
        if full_name.lower() in self.repos or full_name.lower() not in self.renamed:
            return None
        return self.repo_by_id(self.renamed[full_name.lower()])

    def rename_repo(self, repo: Repo, new_name: str) -> None:
        """The repository takes a new name; its old full name redirects to it."""
        before = repo.full_name
        repo.name = new_name
        self._moved(repo, before)

    def rename_user(self, user: User, new_login: str) -> None:
        """A person or organization takes a new login: every index by login follows, and
        each of their repositories' old full names redirects to it."""
        old = user.login.lower()
        owned = [(r, r.full_name) for r in self.repos.values() if r.owner.id == user.id]
        del self.users[old]
        self.users[new_login.lower()] = user
        for token in self.tokens.values():
            if token.login is not None and token.login.lower() == old:
                token.login = new_login
        for repo in self.repos.values():
            if old in repo.collaborators:
                repo.collaborators[new_login.lower()] = repo.collaborators.pop(old)
        user.login = new_login
        for repo, before in owned:
            self._moved(repo, before)

    def _moved(self, repo: Repo, before: str) -> None:
        """Index `repo` under its full name now, and redirect the one it had `before`."""
        after = repo.full_name.lower()
        # In place and in order: listings (an installation's repositories) keep theirs.
        entries = [(after if r is repo else key, r) for key, r in self.repos.items()]
        self.repos.clear()
        self.repos.update(entries)
        if before.lower() != after:
            self.renamed[before.lower()] = repo.id

    def user(self, login: str) -> User | None:
        return self.users.get(login.lower())

    def issue(self, repo: Repo, number: int) -> Issue | None:
        return self.issues.get((repo.id, number))

    def pulls(self, repo: Repo) -> list[Issue]:
        return [i for (rid, _), i in sorted(self.issues.items()) if rid == repo.id and i.pull]

    def installation_for(self, app_id: int, repo: Repo) -> Installation | None:
        for inst in self.installations.values():
            if inst.app_id != app_id or inst.account.id != repo.owner.id:
                continue
            if inst.repo_ids is None or repo.id in inst.repo_ids:
                return inst
        return None

    def installation_repos(self, inst: Installation) -> list[Repo]:
        return [
            r
            for r in self.repos.values()
            if r.owner.id == inst.account.id and (inst.repo_ids is None or r.id in inst.repo_ids)
        ]

    def app_by_bot(self, user: User) -> App | None:
        return next((a for a in self.apps.values() if a.bot.id == user.id), None)

    def reviews_for(self, repo: Repo, number: int) -> list[Review]:
        return sorted(
            (r for r in self.reviews.values() if r.repo_id == repo.id and r.pr_number == number),
            key=lambda r: r.id,
        )

    def check_runs_for(self, repo: Repo, sha: str) -> list[CheckRun]:
        return [c for c in self.check_runs.values() if c.repo_id == repo.id and c.head_sha == sha]

    def statuses_for(self, repo: Repo, sha: str) -> list[Status]:
        """Newest first, as GitHub lists them."""
        found = [s for s in self.statuses if s.repo_id == repo.id and s.sha == sha]
        return sorted(found, key=lambda s: s.id, reverse=True)

    def permission(self, repo: Repo, user: User) -> str:
        """A user's effective permission on a repository."""
        if user.id == repo.owner.id:
            return "admin"
        granted = repo.collaborators.get(user.login.lower())
        if granted:
            return granted
        return "none" if repo.private else "read"
