"""Pull requests: opening, editing, mergeability, merging, update-branch, reviews."""

from __future__ import annotations

from typing import Any

from fakehub import codeowners, diffhunk, gitrepo, protection, rulesets
from fakehub.hub.errors import HubError
from fakehub.state import (
    Identity,
    Issue,
    PullRequest,
    Repo,
    Review,
    Status,
    now,
    permission_at_least,
)

# GitHub's 405 for a merge_method the repository's settings turn off.
DISALLOWED_METHOD = {
    "merge": "Merge commits are not allowed on this repository.",
    "squash": "Squash merges are not allowed on this repository.",
    "rebase": "Rebase merges are not allowed on this repository.",
}

class PullOps:
    """Part of Hub: pull requests and reviews."""

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
        head_owner, _, head_branch = head.rpartition(":")
        errors = []
        head_repo = self._head_repo(repo, head_owner)
        head_sha = gitrepo.ref_sha(head_repo.path, head_branch)
        if head_sha is not None and head_repo is not repo:
            # As GitHub does, the fork's head is kept in the base as refs/pull/N/head.
            gitrepo.git(repo.path, "fetch", "-q", str(head_repo.path),
                        f"refs/heads/{head_branch}:refs/fork-heads/{head_repo.id}/{head_branch}")
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
                    and other.pull.base_ref == base \
                    and other.pull.head_repo_id == (None if head_repo is repo else head_repo.id):
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
                head_repo_id=None if head_repo is repo else head_repo.id,
            ),
        )
        if head_repo is not repo:
            gitrepo.update_ref(repo.path, f"refs/pull/{issue.number}/head", head_sha)
        self.store.issues[(repo.id, issue.number)] = issue
        self._emit_repo(
            repo,
            "pull_request",
            {"action": "opened", "number": issue.number, "pull_request": self.shapes.pull(issue)},
            actor.user,
        )
        self._start_ci(repo, issue)
        return issue

    def _head_repo(self, repo: Repo, owner: str) -> Repo:
        """Where a PR's head lives: the base itself, or its owner's fork of it."""
        if not owner or owner.lower() == repo.owner.login.lower():
            return repo
        for other in self.store.repos.values():
            if other.fork_of == repo.id and other.owner.login.lower() == owner.lower():
                return other
        raise HubError(422, "Validation Failed", [
            {"resource": "PullRequest", "code": "invalid", "field": "head"}])

    def fork(self, repo: Repo, owner: str) -> Repo:
        """owner's fork of repo: a copy of its git history, refs and all."""
        fork = self.create_repo(owner, repo.name, default_branch=repo.default_branch,
                                private=repo.private)
        fork.fork_of = repo.id
        gitrepo.git(fork.path, "fetch", "-q", str(repo.path), "+refs/heads/*:refs/heads/*")
        return fork

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

    def mark_ready(self, repo: Repo, issue: Issue, actor: Identity) -> None:
        """GraphQL `markPullRequestReadyForReview`: a draft becomes ready for review
        (`pull_request` ready_for_review); a PR that is not a draft stays as it is."""
        pr = issue.pull
        assert pr is not None
        if issue.state != "open":
            raise HubError(422, "Pull request is closed")  # [unconfirmed wording]
        if not pr.draft:
            return
        pr.draft = False
        issue.updated_at = now()
        self._emit_repo(repo, "pull_request", {
            "action": "ready_for_review", "number": issue.number,
            "pull_request": self.shapes.pull(issue)}, actor.user)

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
        if self.merge_refusals(repo, issue, None) or self.classic_refusal(repo, issue, None):
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

    def _review_verdict(self, repo: Repo, issue: Issue, *, only_current_head: bool,
                        last_push: bool) -> rulesets.ReviewVerdict:
        pr = issue.pull
        assert pr is not None
        return rulesets.count_reviews(
            self.store.reviews_for(repo, issue.number),
            author_id=issue.user.id,
            head_sha=pr.head_sha,
            only_current_head=only_current_head,
            has_write=lambda u: permission_at_least(self.store.permission(repo, u), "write"),
            last_pusher_id=repo.last_pushers.get(pr.head_ref) if last_push else None,
        )

    def classic_refusal(self, repo: Repo, issue: Issue, actor: Identity | None) -> str | None:
        """What the base branch's classic protection says against merging now (one
        sentence, as GitHub answers it), or None."""
        pr = issue.pull
        assert pr is not None
        stored = repo.protections.get(pr.base_ref)
        if stored is None:
            return None
        reviews = stored.get("required_pull_request_reviews") or {}
        verdict = self._review_verdict(
            repo, issue, only_current_head=bool(reviews.get("dismiss_stale_reviews")),
            last_push=bool(reviews.get("require_last_push_approval")))
        runs = self.store.check_runs_for(repo, pr.head_sha)
        statuses = self.store.statuses_for(repo, pr.head_sha)
        states = {c.context: rulesets.check_state(c.context, c.app_id, runs, statuses)
                  for c in protection.required_checks(stored)}
        base_tip = gitrepo.ref_sha(repo.path, pr.base_ref)
        behind = bool(base_tip) and not gitrepo.is_ancestor(repo.path, base_tip, pr.head_sha)
        is_admin = (actor is not None and actor.kind == "user"
                    and self.permission(repo, actor) == "admin")
        refusal = protection.merge_refusal(
            stored, is_admin=is_admin, approvals=verdict.approvals,
            changes_requested=verdict.changes_requested, check_states=states, behind=behind)
        if refusal or (is_admin and not stored["enforce_admins"]):
            return refusal
        if reviews.get("require_code_owner_reviews"):
            owners = self.code_owner_refusals(
                repo, issue, bool(reviews.get("dismiss_stale_reviews")),
                bool(reviews.get("require_last_push_approval")))
            if owners:
                return owners[0]
        if stored.get("required_conversation_resolution") and self.unresolved_threads(
                repo, issue):
            return rulesets.UNRESOLVED
        if stored.get("lock_branch"):
            return rulesets.UPDATE_RESTRICTED
        return None

    def classic_method_refusal(self, repo: Repo, issue: Issue, method: str) -> str | None:
        """Classic protection's linear history and signatures, against a merge method."""
        pr = issue.pull
        assert pr is not None
        stored = repo.protections.get(pr.base_ref) or {}
        if stored.get("required_linear_history") and method == "merge":
            return rulesets.NOT_LINEAR
        if stored.get("required_signatures") and method in ("merge", "rebase"):
            return rulesets.UNSIGNED
        return None

    def merge_refusals(self, repo: Repo, issue: Issue, actor: Identity | None,
                       method: str | None = None) -> list[str]:
        """What the base branch's rules say against merging this PR now (with `method`:
        also against that merge method)."""
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
            stale = bool(active.parameters.get("dismiss_stale_reviews_on_push"))
            last_push = bool(active.parameters.get("require_last_push_approval"))
            verdict = self._review_verdict(repo, issue, only_current_head=stale,
                                           last_push=last_push)
            if verdict.changes_requested:
                reasons.append("Changes must be addressed before merging: a reviewer with "
                               "write access requested changes.")
            if verdict.approvals < needed:
                noun = "review is" if needed == 1 else "reviews are"
                reasons.append(
                    f"At least {needed} approving {noun} required by reviewers with write access."
                )
            if active.parameters.get("require_code_owner_review"):
                reasons.extend(self.code_owner_refusals(repo, issue, stale, last_push))
            if (active.parameters.get("required_review_thread_resolution")
                    and self.unresolved_threads(repo, issue)):
                reasons.append(rulesets.UNRESOLVED)
        check_reasons, _ = rulesets.required_checks_reasons(
            rules, self.store.check_runs_for(repo, pr.head_sha),
            self.store.statuses_for(repo, pr.head_sha)
        )
        reasons.extend(check_reasons)
        if rulesets.strict_policy(rules):
            base_tip = gitrepo.ref_sha(repo.path, pr.base_ref)
            if base_tip and not gitrepo.is_ancestor(repo.path, base_tip, pr.head_sha):
                reasons.append("This branch must be up to date with the base branch.")
        for active in rules:
            if active.type == "required_deployments":
                for env in active.parameters.get("required_deployment_environments") or []:
                    if not self.deployed(repo, pr.head_sha, env):
                        # [unconfirmed] GitHub's wording for a missing deployment.
                        reasons.append(f"Required deployment \"{env}\" is expected.")
            elif active.type == "merge_queue":
                reasons.append(rulesets.THROUGH_QUEUE)
            elif active.type == "update":
                reasons.append(rulesets.UPDATE_RESTRICTED)
        if method is not None:
            commits = gitrepo.commits_between(repo.path, pr.base_sha, pr.head_sha, limit=1000)
            reasons.extend(rulesets.method_reasons(
                rules, method, pr_has_merge_commits=any(len(c.parents) > 1 for c in commits),
                pr_commits_signed=False))
        return list(dict.fromkeys(reasons))

    def code_owner_refusals(self, repo: Repo, issue: Issue, stale: bool,
                            last_push: bool) -> list[str]:
        """GitHub's words for each set of owners whose approval a changed file still needs
        (owners read from the base's CODEOWNERS; a team owner is never met here)."""
        pr = issue.pull
        assert pr is not None
        rules = codeowners.read(repo.path, gitrepo.ref_sha(repo.path, pr.base_ref) or
                                pr.base_sha)
        if not rules:
            return []
        base = gitrepo.merge_base(repo.path, pr.base_sha, pr.head_sha) or pr.base_sha
        approvers = self._approvers(repo, issue, only_current_head=stale, last_push=last_push)
        waiting: list[list[str]] = []
        for change in gitrepo.diff_files(repo.path, base, pr.head_sha):
            named = codeowners.owners(rules, change.filename)
            if named and not any(o.lstrip("@").lower() in approvers for o in named) \
                    and named not in waiting:
                waiting.append(named)
        return [rulesets.owners_sentence(named) for named in waiting]

    def _approvers(self, repo: Repo, issue: Issue, *, only_current_head: bool,
                   last_push: bool) -> set[str]:
        """The logins whose approval counts, as count_reviews counts them."""
        pr = issue.pull
        assert pr is not None
        reviews = self.store.reviews_for(repo, issue.number)
        found = set()
        for review in reviews:
            one = rulesets.count_reviews(
                [r for r in reviews if r.user.id == review.user.id],
                author_id=issue.user.id, head_sha=pr.head_sha,
                only_current_head=only_current_head,
                has_write=lambda u: permission_at_least(self.store.permission(repo, u), "write"),
                last_pusher_id=repo.last_pushers.get(pr.head_ref) if last_push else None)
            if one.approvals:
                found.add(review.user.login.lower())
        return found

    def review_threads(self, repo: Repo, issue: Issue) -> list[tuple[str, Any, dict]]:
        """(thread id, review, comment) for each line comment that starts a thread (a reply
        joins its thread)."""
        return [(f"{review.id}-{index}", review, comment)
                for review in self.store.reviews_for(repo, issue.number)
                for index, comment in enumerate(review.comments)
                if not comment.get("in_reply_to")]

    def unresolved_threads(self, repo: Repo, issue: Issue) -> int:
        assert issue.pull is not None
        return sum(1 for thread_id, _, _ in self.review_threads(repo, issue)
                   if thread_id not in issue.pull.resolved_threads)

    def deployed(self, repo: Repo, sha: str, environment: str) -> bool:
        latest = [d for d in repo.deployments if d["sha"] == sha
                  and d["environment"] == environment]
        return bool(latest) and latest[-1]["state"] == "success"

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
        if method not in repo.merge_methods:
            raise HubError(405, DISALLOWED_METHOD[method])
        if self.uncomputed_merges > 0:
            # GitHub answers so while it computes mergeability (`mergeable: null`).
            self.uncomputed_merges -= 1
            raise HubError(405, "Pull Request is not mergeable")
        classic = (self.classic_refusal(repo, issue, actor)
                   or self.classic_method_refusal(repo, issue, method))
        if classic:
            raise HubError(405, classic)
        reasons = self.merge_refusals(repo, issue, actor, method)
        if reasons:
            raise HubError(405, rulesets.render_violations(f"refs/heads/{pr.base_ref}", reasons))
        base_tip = gitrepo.ref_sha(repo.path, pr.base_ref)
        if base_tip is None:
            raise HubError(405, "Base branch was deleted")
        new = self._merge_commit(repo, issue, actor, base_tip, method, title, message)
        if new is None:
            raise HubError(405, "Pull Request is not mergeable")
        refusal = self.workflow_refusal(repo, actor, base_tip, new)
        if refusal:
            raise HubError(403, refusal)
        if not gitrepo.update_ref(repo.path, f"refs/heads/{pr.base_ref}", new, base_tip):
            raise HubError(405, "Base branch was modified. Review and try the merge again.")
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
    ) -> str:
        """Check the request and make the merge commit; GitHub answers 202 at once and
        moves the head a little later (move_head_after_update)."""
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
        refusal = self.workflow_refusal(repo, actor, pr.head_sha, new)
        if refusal:
            raise HubError(403, refusal)
        return new

    def move_head_after_update(
        self, repo: Repo, issue: Issue, actor: Identity, old: str, new: str
    ) -> None:
        """The second half of update-branch; a head that moved meanwhile wins (as on GitHub,
        where the update then quietly does nothing)."""
        pr = issue.pull
        assert pr is not None
        try:
            self.internal_push(repo, pr.head_ref, new, actor, expected_old=old)
        except HubError:
            pass

    # -- reviews --------------------------------------------------------------------

    def request_reviewers(self, repo: Repo, issue: Issue, logins: list[str],
                          teams: list[str], actor: Identity) -> None:
        """As GitHub: people with access to the repository, never the PR's author; each
        newly asked sends `review_requested`. fakehub has no teams: asking one is 422."""
        pr = issue.pull
        assert pr is not None
        users = []
        for login in logins:
            user = self.store.user(login) if isinstance(login, str) else None
            if user is not None and user.id == issue.user.id:
                raise HubError(422, "Unprocessable Entity", [
                    "Review cannot be requested from pull request author."])
            # A collaborator (or the owner): reading a public repository is not enough.
            if user is None or (user.id != repo.owner.id
                                and user.login.lower() not in repo.collaborators):
                raise HubError(422, "Unprocessable Entity", [
                    "Reviews may only be requested from collaborators. One or more of the "
                    "users or teams you specified is not a collaborator of the "
                    f"{repo.full_name} repository."])
            users.append(user)
        if teams:
            raise HubError(422, "Unprocessable Entity", [
                "Reviews may only be requested from collaborators. One or more of the users "
                f"or teams you specified is not a collaborator of the {repo.full_name} "
                "repository."])
        for user in users:
            if any(have.id == user.id for have in pr.requested_reviewers):
                continue
            pr.requested_reviewers.append(user)
            self._emit_repo(repo, "pull_request", {
                "action": "review_requested", "number": issue.number,
                "pull_request": self.shapes.pull(issue),
                "requested_reviewer": self.shapes.user(user)}, actor.user)

    def remove_requested_reviewers(self, repo: Repo, issue: Issue, logins: list[str],
                                   actor: Identity) -> None:
        pr = issue.pull
        assert pr is not None
        for login in logins:
            user = next((u for u in pr.requested_reviewers
                         if isinstance(login, str) and u.login.lower() == login.lower()), None)
            if user is None:
                continue
            pr.requested_reviewers.remove(user)
            self._emit_repo(repo, "pull_request", {
                "action": "review_request_removed", "number": issue.number,
                "pull_request": self.shapes.pull(issue),
                "requested_reviewer": self.shapes.user(user)}, actor.user)

    def _with_diff_hunk(self, repo: Repo, base_sha: str, commit: str,
                        comment: dict[str, Any]) -> dict[str, Any]:
        """A line comment with the hunk GitHub gives it, computed from the pull request's
        diff at the review's commit; what a caller passed as `diff_hunk` is not GitHub's
        to take (its API has no such parameter)."""
        base = gitrepo.merge_base(repo.path, base_sha, commit) or base_sha
        line = comment.get("line")
        patch = next((f.patch for f in gitrepo.diff_files(repo.path, base, commit)
                      if f.filename == comment.get("path")), None)
        hunk = (diffhunk.hunk_up_to(patch, line, comment.get("side") or "RIGHT")
                if patch and isinstance(line, int) else "")
        if line is not None and not hunk:  # a line, or a file, the diff does not show
            raise HubError(422, "Unprocessable Entity", [
                "Pull request review thread line must be part of the diff and Pull request "
                "review thread diff hunk can't be blank"])
        return {**comment, "diff_hunk": hunk}

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
            comments=[self._with_diff_hunk(repo, pr.base_sha, commit_id or pr.head_sha, c)
                      for c in comments or []],
        )
        self.store.reviews[review.id] = review
        # A review answers the request: GitHub takes the reviewer off the requested list.
        pr.requested_reviewers = [u for u in pr.requested_reviewers if u.id != actor.user.id]
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
        for index, comment in enumerate(review.comments):
            self._emit_repo(
                repo,
                "pull_request_review_comment",
                {"action": "created",
                 "comment": self.shapes.review_comment(repo, review, index, comment),
                 "pull_request": self.shapes.pull_simple(issue)},
                actor.user,
            )
        return review
