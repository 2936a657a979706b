"""GitHub-shaped JSON for fakehub's records, as the REST API and webhooks show them.

Webhook schemas forbid unknown keys, so the webhook shapes here carry exactly GitHub's
fields; REST responses add the extra fields GitHub's REST objects have on top.
"""

from __future__ import annotations

import base64
from typing import Any, Protocol
from urllib.parse import quote

from fakehub import gitrepo
from fakehub.state import (
    App,
    CheckRun,
    CheckSuite,
    Comment,
    Installation,
    Issue,
    Label,
    Repo,
    Review,
    Status,
    Store,
    User,
    iso,
)


class Site(Protocol):
    """What the shapes read of the hub (fakehub/hub): its records, addresses and the
    mergeability it computes."""

    store: Store
    base_url: str

    @property
    def api_url(self) -> str: ...

    def mergeability(self, repo: Repo, issue: Issue) -> tuple[bool | None, str]: ...

REACTION_KEYS = {
    "+1": "+1",
    "-1": "-1",
    "laugh": "laugh",
    "confused": "confused",
    "heart": "heart",
    "hooray": "hooray",
    "rocket": "rocket",
    "eyes": "eyes",
}

# Fields of a full pull request that the "simple" variant (reviews, check suites) omits.
_FULL_PULL_ONLY = (
    "merged",
    "mergeable",
    "rebaseable",
    "mergeable_state",
    "merged_by",
    "comments",
    "review_comments",
    "maintainer_can_modify",
    "commits",
    "additions",
    "deletions",
    "changed_files",
)


def node_id(kind: str, ident: int | str) -> str:
    return base64.b64encode(f"0{kind}{ident}".encode()).decode().rstrip("=")


class Shapes:
    """Builds JSON for one hub, whose base URL all links start from."""

    def __init__(self, hub: Site) -> None:
        self.hub = hub

    @property
    def store(self) -> Store:
        return self.hub.store

    @property
    def web(self) -> str:
        return self.hub.base_url

    @property
    def api(self) -> str:
        return self.hub.api_url

    # -- users, apps, installations -------------------------------------------------

    def user(self, user: User) -> dict[str, Any]:
        api = f"{self.api}/users/{user.login}"
        return {
            "login": user.login,
            "id": user.id,
            "node_id": node_id("User", user.id),
            "avatar_url": f"{self.web}/avatars/u/{user.id}",
            "gravatar_id": "",
            "url": api,
            "html_url": f"{self.web}/{user.login}",
            "followers_url": f"{api}/followers",
            "following_url": f"{api}/following{{/other_user}}",
            "gists_url": f"{api}/gists{{/gist_id}}",
            "starred_url": f"{api}/starred{{/owner}}{{/repo}}",
            "subscriptions_url": f"{api}/subscriptions",
            "organizations_url": f"{api}/orgs",
            "repos_url": f"{api}/repos",
            "events_url": f"{api}/events{{/privacy}}",
            "received_events_url": f"{api}/received_events",
            "type": user.type,
            "site_admin": False,
        }

    def app(self, app: App) -> dict[str, Any]:
        return {
            "id": app.id,
            "slug": app.slug,
            "node_id": node_id("App", app.id),
            "client_id": app.client_id,
            "owner": self.user(app.owner),
            "name": app.name,
            "description": "",
            "external_url": f"{self.web}/apps/{app.slug}",
            "html_url": f"{self.web}/apps/{app.slug}",
            "created_at": iso(app.created_at),
            "updated_at": iso(app.created_at),
            "permissions": dict(app.permissions),
            # installation events reach every App; GitHub does not list them as subscribed.
            "events": [e for e in app.events if not e.startswith("installation")],
        }

    def app_webhook(self, app: App) -> dict[str, Any]:
        shaped = self.app(app)
        shaped.pop("client_id")
        return shaped

    def installation(self, inst: Installation) -> dict[str, Any]:
        app = self.store.apps[inst.app_id]
        return {
            "id": inst.id,
            "account": self.user(inst.account),
            "repository_selection": "all" if inst.repo_ids is None else "selected",
            "access_tokens_url": f"{self.api}/app/installations/{inst.id}/access_tokens",
            "repositories_url": f"{self.api}/installation/repositories",
            "html_url": f"{self.web}/settings/installations/{inst.id}",
            "app_id": app.id,
            "app_slug": app.slug,
            "target_id": inst.account.id,
            "target_type": inst.account.type if inst.account.type != "Bot" else "User",
            "permissions": dict(inst.permissions),
            "events": [e for e in app.events if not e.startswith("installation")],
            "created_at": iso(inst.created_at),
            "updated_at": iso(inst.created_at),
            "single_file_name": None,
            "has_multiple_single_files": False,
            "single_file_paths": [],
            "suspended_by": self.user(inst.suspended_by) if inst.suspended_by else None,
            "suspended_at": iso(inst.suspended_at),
        }

    def installation_webhook(self, inst: Installation) -> dict[str, Any]:
        shaped = self.installation(inst)
        # Webhook installation objects carry epoch seconds; REST ones carry ISO strings.
        shaped["created_at"] = int(inst.created_at.timestamp())
        shaped["updated_at"] = int(inst.created_at.timestamp())
        return shaped

    def installation_lite(self, inst: Installation) -> dict[str, Any]:
        return {"id": inst.id, "node_id": node_id("Installation", inst.id)}

    # -- repositories ---------------------------------------------------------------

    def repo_urls(self, repo: Repo) -> dict[str, Any]:
        api = f"{self.api}/repos/{repo.full_name}"
        return {
            "html_url": f"{self.web}/{repo.full_name}",
            "url": api,
            "forks_url": f"{api}/forks",
            "keys_url": f"{api}/keys{{/key_id}}",
            "collaborators_url": f"{api}/collaborators{{/collaborator}}",
            "teams_url": f"{api}/teams",
            "hooks_url": f"{api}/hooks",
            "issue_events_url": f"{api}/issues/events{{/number}}",
            "events_url": f"{api}/events",
            "assignees_url": f"{api}/assignees{{/user}}",
            "branches_url": f"{api}/branches{{/branch}}",
            "tags_url": f"{api}/tags",
            "blobs_url": f"{api}/git/blobs{{/sha}}",
            "git_tags_url": f"{api}/git/tags{{/sha}}",
            "git_refs_url": f"{api}/git/refs{{/sha}}",
            "trees_url": f"{api}/git/trees{{/sha}}",
            "statuses_url": f"{api}/statuses/{{sha}}",
            "languages_url": f"{api}/languages",
            "stargazers_url": f"{api}/stargazers",
            "contributors_url": f"{api}/contributors",
            "subscribers_url": f"{api}/subscribers",
            "subscription_url": f"{api}/subscription",
            "commits_url": f"{api}/commits{{/sha}}",
            "git_commits_url": f"{api}/git/commits{{/sha}}",
            "comments_url": f"{api}/comments{{/number}}",
            "issue_comment_url": f"{api}/issues/comments{{/number}}",
            "contents_url": f"{api}/contents/{{+path}}",
            "compare_url": f"{api}/compare/{{base}}...{{head}}",
            "merges_url": f"{api}/merges",
            "archive_url": f"{api}/{{archive_format}}{{/ref}}",
            "downloads_url": f"{api}/downloads",
            "issues_url": f"{api}/issues{{/number}}",
            "pulls_url": f"{api}/pulls{{/number}}",
            "milestones_url": f"{api}/milestones{{/number}}",
            "notifications_url": f"{api}/notifications{{?since,all,participating}}",
            "labels_url": f"{api}/labels{{/name}}",
            "releases_url": f"{api}/releases{{/id}}",
            "deployments_url": f"{api}/deployments",
        }

    def repo(self, repo: Repo, *, webhook: bool = True) -> dict[str, Any]:
        """The repository object shared by webhooks and (with extras) REST."""
        open_issues = sum(
            1 for (rid, _), i in self.store.issues.items() if rid == repo.id and i.state == "open"
        )
        shaped: dict[str, Any] = {
            "id": repo.id,
            "node_id": node_id("Repository", repo.id),
            "name": repo.name,
            "full_name": repo.full_name,
            "private": repo.private,
            "owner": self.user(repo.owner),
            "description": None,
            "fork": repo.fork_of is not None,
            **self.repo_urls(repo),
            "created_at": iso(repo.created_at),
            "updated_at": iso(repo.pushed_at),
            "pushed_at": iso(repo.pushed_at),
            "git_url": f"git://127.0.0.1/{repo.full_name}.git",
            "ssh_url": f"git@127.0.0.1:{repo.full_name}.git",
            "clone_url": f"{self.web}/{repo.full_name}.git",
            "svn_url": f"{self.web}/{repo.full_name}",
            "homepage": None,
            "size": 0,
            "stargazers_count": 0,
            "watchers_count": 0,
            "language": None,
            "has_issues": True,
            "has_projects": False,
            "has_downloads": True,
            "has_wiki": False,
            "has_pages": False,
            "has_discussions": False,
            "forks_count": 0,
            "mirror_url": None,
            "archived": False,
            "disabled": False,
            "open_issues_count": open_issues,
            "license": None,
            "allow_forking": True,
            "is_template": False,
            "web_commit_signoff_required": False,
            "topics": [],
            "visibility": "private" if repo.private else "public",
            "forks": 0,
            "open_issues": open_issues,
            "watchers": 0,
            "default_branch": repo.default_branch,
        }
        if webhook:
            shaped["custom_properties"] = {}
        return shaped

    def repo_rest(self, repo: Repo, viewer: User | None = None) -> dict[str, Any]:
        shaped = self.repo(repo, webhook=False)
        shaped.update(
            {
                "allow_squash_merge": "squash" in repo.merge_methods,
                "allow_merge_commit": "merge" in repo.merge_methods,
                "allow_rebase_merge": "rebase" in repo.merge_methods,
                "allow_auto_merge": False,
                "delete_branch_on_merge": False,
                "allow_update_branch": True,
                "network_count": 0,
                "subscribers_count": 0,
            }
        )
        if viewer is not None:
            shaped["permissions"] = self.permissions_flags(self.store.permission(repo, viewer))
        return shaped

    def repo_minimal(self, repo: Repo) -> dict[str, Any]:
        return {"id": repo.id, "url": f"{self.api}/repos/{repo.full_name}", "name": repo.name}

    def permissions_flags(self, permission: str) -> dict[str, bool]:
        from fakehub.state import permission_at_least

        return {
            "admin": permission_at_least(permission, "admin"),
            "maintain": permission_at_least(permission, "maintain"),
            "push": permission_at_least(permission, "write"),
            "triage": permission_at_least(permission, "triage"),
            "pull": permission_at_least(permission, "read"),
        }

    # -- issues and comments --------------------------------------------------------

    def author_association(self, repo: Repo, user: User) -> str:
        if user.id == repo.owner.id:
            return "OWNER"
        if repo.collaborators.get(user.login.lower()):
            return "COLLABORATOR"
        if self.store.app_by_bot(user):
            return "NONE"
        authored = any(
            i.user.id == user.id and i.pull and i.pull.merged
            for (rid, _), i in self.store.issues.items()
            if rid == repo.id
        )
        return "CONTRIBUTOR" if authored else "NONE"

    def reactions(self, url: str, reactions: list) -> dict[str, Any]:
        counts = {key: 0 for key in REACTION_KEYS}
        for reaction in reactions:
            counts[reaction.content] += 1
        return {"url": url, "total_count": len(reactions), **counts}

    def issue(self, issue: Issue) -> dict[str, Any]:
        repo = self.store.repo_by_id(issue.repo_id)
        assert repo is not None
        api = f"{self.api}/repos/{repo.full_name}/issues/{issue.number}"
        comments = sum(
            1
            for c in self.store.comments.values()
            if c.repo_id == repo.id and c.issue_number == issue.number
        )
        kind = "pull" if issue.pull else "issues"
        shaped: dict[str, Any] = {
            "url": api,
            "repository_url": f"{self.api}/repos/{repo.full_name}",
            "labels_url": f"{api}/labels{{/name}}",
            "comments_url": f"{api}/comments",
            "events_url": f"{api}/events",
            "html_url": f"{self.web}/{repo.full_name}/{kind}/{issue.number}",
            "id": issue.id,
            "node_id": node_id("Issue", issue.id),
            "number": issue.number,
            "title": issue.title,
            "user": self.user(issue.user),
            "labels": [self.label(repo, label) for label in issue.labels],
            "state": issue.state,
            "locked": False,
            "assignee": None,
            "assignees": [],
            "milestone": None,
            "comments": comments,
            "created_at": iso(issue.created_at),
            "updated_at": iso(issue.updated_at),
            "closed_at": iso(issue.closed_at),
            "author_association": self.author_association(repo, issue.user),
            "active_lock_reason": None,
            "body": issue.body,
            "reactions": self.reactions(f"{api}/reactions", issue.reactions),
            "timeline_url": f"{api}/timeline",
            "performed_via_github_app": self._via_app(issue.via_app_id),
            "state_reason": issue.state_reason,
        }
        if issue.pull:
            pulls = f"{self.api}/repos/{repo.full_name}/pulls/{issue.number}"
            shaped["draft"] = issue.pull.draft
            shaped["pull_request"] = {
                "url": pulls,
                "html_url": f"{self.web}/{repo.full_name}/pull/{issue.number}",
                "diff_url": f"{self.web}/{repo.full_name}/pull/{issue.number}.diff",
                "patch_url": f"{self.web}/{repo.full_name}/pull/{issue.number}.patch",
                "merged_at": iso(issue.pull.merged_at),
            }
        return shaped

    def _via_app(self, app_id: int | None) -> dict[str, Any] | None:
        app = self.store.apps.get(app_id) if app_id else None
        return self.app_webhook(app) if app else None

    def label(self, repo: Repo, label: Label) -> dict[str, Any]:
        return {
            "id": label.id,
            "node_id": node_id("Label", label.id),
            "url": f"{self.api}/repos/{repo.full_name}/labels/{quote(label.name)}",
            "name": label.name,
            "description": label.description,
            "color": label.color,
            "default": False,
        }

    def comment(self, comment: Comment) -> dict[str, Any]:
        repo = self.store.repo_by_id(comment.repo_id)
        assert repo is not None
        api = f"{self.api}/repos/{repo.full_name}/issues/comments/{comment.id}"
        issue = self.store.issues[(repo.id, comment.issue_number)]
        kind = "pull" if issue.pull else "issues"
        return {
            "url": api,
            "html_url": f"{self.web}/{repo.full_name}/{kind}/{comment.issue_number}"
            f"#issuecomment-{comment.id}",
            "issue_url": f"{self.api}/repos/{repo.full_name}/issues/{comment.issue_number}",
            "id": comment.id,
            "node_id": node_id("IssueComment", comment.id),
            "user": self.user(comment.user),
            "created_at": iso(comment.created_at),
            "updated_at": iso(comment.updated_at),
            "author_association": self.author_association(repo, comment.user),
            "performed_via_github_app": self._via_app(comment.via_app_id),
            "body": comment.body,
            "reactions": self.reactions(f"{api}/reactions", comment.reactions),
        }

    def reaction(self, reaction) -> dict[str, Any]:
        return {
            "id": reaction.id,
            "node_id": node_id("Reaction", reaction.id),
            "user": self.user(reaction.user),
            "content": reaction.content,
            "created_at": iso(reaction.created_at),
        }

    # -- pull requests --------------------------------------------------------------

    def _head_repo(self, repo: Repo, pr: Any) -> Repo:
        """The repository a PR's head lives in (a fork's, or the base's own)."""
        if pr.head_repo_id is None:
            return repo
        return self.store.repo_by_id(pr.head_repo_id) or repo

    def _branch_side(self, repo: Repo, ref: str, sha: str) -> dict[str, Any]:
        return {
            "label": f"{repo.owner.login}:{ref}",
            "ref": ref,
            "sha": sha,
            "user": self.user(repo.owner),
            "repo": self.repo(repo),
        }

    def pull(self, issue: Issue, *, full: bool = True) -> dict[str, Any]:
        pr = issue.pull
        assert pr is not None
        repo = self.store.repo_by_id(issue.repo_id)
        assert repo is not None
        api = f"{self.api}/repos/{repo.full_name}"
        html = f"{self.web}/{repo.full_name}/pull/{issue.number}"
        state = "open" if issue.state == "open" else "closed"
        shaped: dict[str, Any] = {
            "url": f"{api}/pulls/{issue.number}",
            "id": pr.id,
            "node_id": node_id("PullRequest", pr.id),
            "html_url": html,
            "diff_url": f"{html}.diff",
            "patch_url": f"{html}.patch",
            "issue_url": f"{api}/issues/{issue.number}",
            "number": issue.number,
            "state": state,
            "locked": False,
            "title": issue.title,
            "user": self.user(issue.user),
            "body": issue.body,
            "created_at": iso(issue.created_at),
            "updated_at": iso(issue.updated_at),
            "closed_at": iso(issue.closed_at),
            "merged_at": iso(pr.merged_at),
            "merge_commit_sha": pr.merge_commit_sha,
            "assignee": None,
            "assignees": [],
            "requested_reviewers": [self.user(u) for u in pr.requested_reviewers],
            "requested_teams": [],
            "labels": [self.label(repo, label) for label in issue.labels],
            "milestone": None,
            "draft": pr.draft,
            "commits_url": f"{api}/pulls/{issue.number}/commits",
            "review_comments_url": f"{api}/pulls/{issue.number}/comments",
            "review_comment_url": f"{api}/pulls/comments{{/number}}",
            "comments_url": f"{api}/issues/{issue.number}/comments",
            "statuses_url": f"{api}/statuses/{pr.head_sha}",
            "head": self._branch_side(self._head_repo(repo, pr), pr.head_ref, pr.head_sha),
            "base": self._branch_side(repo, pr.base_ref, pr.base_sha),
            "_links": {
                "self": {"href": f"{api}/pulls/{issue.number}"},
                "html": {"href": html},
                "issue": {"href": f"{api}/issues/{issue.number}"},
                "comments": {"href": f"{api}/issues/{issue.number}/comments"},
                "review_comments": {"href": f"{api}/pulls/{issue.number}/comments"},
                "review_comment": {"href": f"{api}/pulls/comments{{/number}}"},
                "commits": {"href": f"{api}/pulls/{issue.number}/commits"},
                "statuses": {"href": f"{api}/statuses/{pr.head_sha}"},
            },
            "author_association": self.author_association(repo, issue.user),
            "auto_merge": None,
            "active_lock_reason": None,
        }
        if full:
            shaped.update(self._pull_details(repo, issue))
        return shaped

    def _pull_details(self, repo: Repo, issue: Issue) -> dict[str, Any]:
        pr = issue.pull
        assert pr is not None
        mergeable, state = self.hub.mergeability(repo, issue)
        base_for_diff = gitrepo.merge_base(repo.path, pr.base_sha, pr.head_sha) or pr.base_sha
        files = gitrepo.diff_files(repo.path, base_for_diff, pr.head_sha)
        commits = gitrepo.count_commits(repo.path, pr.base_sha, pr.head_sha)
        comments = sum(
            1
            for c in self.store.comments.values()
            if c.repo_id == repo.id and c.issue_number == issue.number
        )
        return {
            "merged": pr.merged,
            "mergeable": mergeable,
            "rebaseable": mergeable,
            "mergeable_state": state,
            "merged_by": self.user(pr.merged_by) if pr.merged_by else None,
            "comments": comments,
            "review_comments": 0,
            "maintainer_can_modify": pr.maintainer_can_modify,
            "commits": commits,
            "additions": sum(f.additions for f in files),
            "deletions": sum(f.deletions for f in files),
            "changed_files": len(files),
        }

    def pull_simple(self, issue: Issue) -> dict[str, Any]:
        shaped = self.pull(issue, full=False)
        for key in _FULL_PULL_ONLY:
            shaped.pop(key, None)
        return shaped

    def pull_minimal(self, issue: Issue) -> dict[str, Any]:
        pr = issue.pull
        assert pr is not None
        repo = self.store.repo_by_id(issue.repo_id)
        assert repo is not None
        return {
            "url": f"{self.api}/repos/{repo.full_name}/pulls/{issue.number}",
            "id": pr.id,
            "number": issue.number,
            "head": {"ref": pr.head_ref, "sha": pr.head_sha,
                     "repo": self.repo_minimal(self._head_repo(repo, pr))},
            "base": {"ref": pr.base_ref, "sha": pr.base_sha, "repo": self.repo_minimal(repo)},
        }

    def review_comment(self, repo: Repo, review: Review, index: int, comment: dict) -> dict:
        """A line comment given with a review (ids stable: review id * 1000 + n)."""
        h = self
        comment_id = review.id * 1000 + index + 1  # stable, and apart from other ids
        api = f"{h.api}/repos/{repo.full_name}/pulls"
        html = f"{h.web}/{repo.full_name}/pull/{review.pr_number}#discussion_r{comment_id}"
        line = comment.get("line")
        return {
            "id": comment_id,
            "node_id": f"PRRC_{comment_id}",
            "url": f"{api}/comments/{comment_id}",
            "pull_request_review_id": review.id,
            "diff_hunk": comment.get("diff_hunk", ""),
            "path": comment.get("path", ""),
            "position": comment.get("position", line),
            "original_position": comment.get("position", line),
            "commit_id": review.commit_id,
            "original_commit_id": review.commit_id,
            "user": h.user(review.user),
            "body": comment.get("body", ""),
            "created_at": iso(review.submitted_at),
            "updated_at": iso(comment.get("updated_at") or review.submitted_at),
            "html_url": html,
            "pull_request_url": f"{api}/{review.pr_number}",
            "author_association": h.author_association(repo, review.user),
            "_links": {"self": {"href": f"{api}/comments/{comment_id}"},
                       "html": {"href": html},
                       "pull_request": {"href": f"{api}/{review.pr_number}"}},
            "line": line,
            "original_line": line,
            "side": comment.get("side", "RIGHT"),
            "start_line": None,
            "original_start_line": None,
            "start_side": None,
            "reactions": self.reactions(f"{api}/comments/{comment_id}/reactions", []),
            # Only a reply has it: the id of the thread's first comment.
            **({"in_reply_to_id": comment["in_reply_to"]} if comment.get("in_reply_to") else {}),
        }

    def review(self, review: Review, *, webhook: bool = False) -> dict[str, Any]:
        repo = self.store.repo_by_id(review.repo_id)
        assert repo is not None
        api = f"{self.api}/repos/{repo.full_name}/pulls/{review.pr_number}"
        html = f"{self.web}/{repo.full_name}/pull/{review.pr_number}"
        return {
            "id": review.id,
            "node_id": node_id("PullRequestReview", review.id),
            "user": self.user(review.user),
            "body": review.body,
            "commit_id": review.commit_id,
            "submitted_at": iso(review.submitted_at),
            "state": review.state.lower() if webhook else review.state,
            "html_url": f"{html}#pullrequestreview-{review.id}",
            "pull_request_url": api,
            "author_association": self.author_association(repo, review.user),
            "_links": {"html": {"href": f"{html}#pullrequestreview-{review.id}"},
                       "pull_request": {"href": api}},
        }

    # -- checks and statuses --------------------------------------------------------

    def _prs_for_sha(self, repo: Repo, sha: str, branch: str | None) -> list[dict[str, Any]]:
        return [
            self.pull_minimal(i)
            for i in self.store.pulls(repo)
            if i.state == "open" and i.pull
            and (i.pull.head_sha == sha or i.pull.head_ref == branch)
        ]

    def check_suite(self, suite: CheckSuite, *, webhook: bool = False) -> dict[str, Any]:
        repo = self.store.repo_by_id(suite.repo_id)
        assert repo is not None
        app = self.store.apps[suite.app_id]
        runs = [c for c in self.store.check_runs.values() if c.suite_id == suite.id]
        head = gitrepo.commit_info(repo.path, suite.head_sha)
        shaped: dict[str, Any] = {
            "id": suite.id,
            "node_id": node_id("CheckSuite", suite.id),
            "head_branch": suite.head_branch,
            "head_sha": suite.head_sha,
            "status": suite.status,
            "conclusion": suite.conclusion,
            "url": f"{self.api}/repos/{repo.full_name}/check-suites/{suite.id}",
            "before": suite.before,
            "after": suite.after,
            "pull_requests": self._prs_for_sha(repo, suite.head_sha, suite.head_branch),
            "app": self.app_webhook(app) if webhook else self.app(app),
            "created_at": iso(suite.created_at),
            "updated_at": iso(suite.updated_at),
            "latest_check_runs_count": len(runs),
            "check_runs_url": f"{self.api}/repos/{repo.full_name}/check-suites/{suite.id}"
            "/check-runs",
            "head_commit": self.simple_commit(head),
            "rerequestable": True,
            "runs_rerequestable": True,
        }
        if not webhook:
            shaped["repository"] = self.repo(repo, webhook=False)
        return shaped

    def simple_commit(self, info: gitrepo.CommitInfo) -> dict[str, Any]:
        return {
            "id": info.sha,
            "tree_id": info.tree,
            "message": info.message,
            "timestamp": info.committer_date,
            "author": {"name": info.author_name, "email": info.author_email},
            "committer": {"name": info.committer_name, "email": info.committer_email},
        }

    def check_run(self, run: CheckRun, *, webhook: bool = False) -> dict[str, Any]:
        repo = self.store.repo_by_id(run.repo_id)
        assert repo is not None
        app = self.store.apps[run.app_id]
        suite = self.store.check_suites[run.suite_id]
        api = f"{self.api}/repos/{repo.full_name}/check-runs/{run.id}"
        shaped: dict[str, Any] = {
            "id": run.id,
            "node_id": node_id("CheckRun", run.id),
            "head_sha": run.head_sha,
            "external_id": run.external_id or "",
            "url": api,
            "html_url": f"{self.web}/{repo.full_name}/runs/{run.id}",
            "details_url": run.details_url or f"{self.web}/{repo.full_name}/runs/{run.id}",
            "status": run.status,
            "conclusion": run.conclusion,
            "started_at": iso(run.started_at),
            "completed_at": iso(run.completed_at),
            "output": {
                "title": run.output.get("title"),
                "summary": run.output.get("summary"),
                "text": run.output.get("text"),
                "annotations_count": len(run.annotations),
                "annotations_url": f"{api}/annotations",
            },
            "name": run.name,
            "check_suite": {"id": suite.id}
            if not webhook
            else self._suite_in_run(suite, repo),
            "app": self.app_webhook(app) if webhook else self.app(app),
            "pull_requests": self._prs_for_sha(repo, run.head_sha, suite.head_branch),
        }
        if not webhook:
            shaped["actions"] = list(run.actions)
        return shaped

    def _suite_in_run(self, suite: CheckSuite, repo: Repo) -> dict[str, Any]:
        return {
            "id": suite.id,
            "node_id": node_id("CheckSuite", suite.id),
            "head_branch": suite.head_branch,
            "head_sha": suite.head_sha,
            "status": suite.status,
            "conclusion": suite.conclusion,
            "url": f"{self.api}/repos/{repo.full_name}/check-suites/{suite.id}",
            "before": suite.before,
            "after": suite.after,
            "pull_requests": self._prs_for_sha(repo, suite.head_sha, suite.head_branch),
            "app": self.app_webhook(self.store.apps[suite.app_id]),
            "created_at": iso(suite.created_at),
            "updated_at": iso(suite.updated_at),
        }

    def status(self, status: Status) -> dict[str, Any]:
        repo = self.store.repo_by_id(status.repo_id)
        assert repo is not None
        return {
            "url": f"{self.api}/repos/{repo.full_name}/statuses/{status.sha}",
            "avatar_url": f"{self.web}/avatars/u/{status.creator.id}",
            "id": status.id,
            "node_id": node_id("StatusContext", status.id),
            "state": status.state,
            "description": status.description,
            "target_url": status.target_url,
            "context": status.context,
            "created_at": iso(status.created_at),
            "updated_at": iso(status.updated_at),
            "creator": self.user(status.creator),
        }

    # -- commits --------------------------------------------------------------------

    def git_user(self, name: str, email: str, date: str) -> dict[str, Any]:
        return {"name": name, "email": email, "date": date}

    def commit(self, repo: Repo, info: gitrepo.CommitInfo, files=None) -> dict[str, Any]:
        api = f"{self.api}/repos/{repo.full_name}"
        author = self._user_by_email(info.author_email)
        committer = self._user_by_email(info.committer_email)
        shaped: dict[str, Any] = {
            "url": f"{api}/commits/{info.sha}",
            "sha": info.sha,
            "node_id": node_id("Commit", int(info.sha[:8], 16)),
            "html_url": f"{self.web}/{repo.full_name}/commit/{info.sha}",
            "comments_url": f"{api}/commits/{info.sha}/comments",
            "commit": {
                "url": f"{api}/git/commits/{info.sha}",
                "author": self.git_user(info.author_name, info.author_email, info.author_date),
                "committer": self.git_user(
                    info.committer_name, info.committer_email, info.committer_date
                ),
                "message": info.message,
                "comment_count": 0,
                "tree": {"sha": info.tree, "url": f"{api}/git/trees/{info.tree}"},
                "verification": {
                    "verified": False,
                    "reason": "unsigned",
                    "payload": None,
                    "signature": None,
                    "verified_at": None,
                },
            },
            "author": self.user(author) if author else None,
            "committer": self.user(committer) if committer else None,
            "parents": [
                {"sha": p, "url": f"{api}/commits/{p}",
                 "html_url": f"{self.web}/{repo.full_name}/commit/{p}"}
                for p in info.parents
            ],
        }
        if files is not None:
            shaped["files"] = files
            adds = sum(f["additions"] for f in files)
            dels = sum(f["deletions"] for f in files)
            shaped["stats"] = {"additions": adds, "deletions": dels, "total": adds + dels}
        return shaped

    def _user_by_email(self, email: str) -> User | None:
        for user in self.store.users.values():
            if user.email == email:
                return user
        return None

    def file_change(self, repo: Repo, change: gitrepo.FileChange, base: str, head: str) -> dict:
        api = f"{self.api}/repos/{repo.full_name}"
        shaped: dict[str, Any] = {
            "sha": change.sha or "0" * 40,
            "filename": change.filename,
            "status": change.status,
            "additions": change.additions,
            "deletions": change.deletions,
            "changes": change.changes,
            "blob_url": f"{self.web}/{repo.full_name}/blob/{head}/{change.filename}",
            "raw_url": f"{self.web}/{repo.full_name}/raw/{head}/{change.filename}",
            "contents_url": f"{api}/contents/{change.filename}?ref={head}",
            "patch": change.patch if change.patch is not None
            else gitrepo.file_patch(repo.path, base, head, change.filename),
        }
        if change.previous_filename:
            shaped["previous_filename"] = change.previous_filename
        return shaped

    def push_commit(self, repo: Repo, info: gitrepo.CommitInfo, distinct: bool = True) -> dict:
        parent = info.parents[0] if info.parents else None
        added, removed, modified = [], [], []
        if parent:
            for change in gitrepo.diff_files(repo.path, parent, info.sha):
                {"added": added, "removed": removed}.get(change.status, modified).append(
                    change.filename
                )
        else:
            added = [e[1] for e in gitrepo.list_tree(repo.path, info.sha, "") or []]
        author = self._user_by_email(info.author_email)
        committer = self._user_by_email(info.committer_email)
        return {
            "id": info.sha,
            "tree_id": info.tree,
            "distinct": distinct,
            "message": info.message,
            "timestamp": info.committer_date,
            "url": f"{self.web}/{repo.full_name}/commit/{info.sha}",
            "author": _committer(info.author_name, info.author_email, author),
            "committer": _committer(info.committer_name, info.committer_email, committer),
            "added": added,
            "removed": removed,
            "modified": modified,
        }


def _committer(name: str, email: str, user: User | None) -> dict[str, Any]:
    shaped: dict[str, Any] = {"name": name, "email": email}
    if user:
        shaped["username"] = user.login
    return shaped
