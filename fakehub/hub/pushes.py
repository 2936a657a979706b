"""Pushes: which ref updates the rules allow, and what follows one (events, PR heads)."""

from __future__ import annotations

from typing import Any

from fakehub import auth, gitrepo, rulesets
from fakehub.gitrepo import ZERO_SHA
from fakehub.hub.errors import HubError
from fakehub.state import (
    Identity,
    Issue,
    Repo,
    User,
    now,
)


class PushOps:
    """Part of Hub: ref updates from git, merges and the Driver."""

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

    def workflow_refusal(
        self, repo: Repo, actor: Identity, old: str | None, new: str | None,
        changed: list[str] | None = None,
    ) -> str | None:
        """GitHub's refusal when an App without `workflows: write` would create or change
        a file under .github/workflows/ (by push, update-branch or merge). A push names
        its `changed` files (its objects are not in the repository yet)."""
        if actor.kind != "installation" or not new:
            return None
        if auth.installation_permission(actor, "workflows") == "write":
            return None
        if changed is None:  # a merge made here: its objects are in the repository
            changed = [f.filename for f in gitrepo.diff_files(repo.path, old, new)] if old else []
        touched = [f for f in changed if f.startswith(".github/workflows/")]
        if not touched:
            return None
        return (f"refusing to allow a GitHub App to create or update workflow `{touched[0]}` "
                "without `workflows` permission")

    def ref_updated(self, repo: Repo, ref: str, old: str, new: str, pusher: User) -> None:
        """After any ref moved (git push, merge, update-branch): events and PR heads."""
        repo.pushed_at = now()
        self._emit_push(repo, ref, old, new, pusher)
        if not ref.startswith("refs/heads/"):
            return
        branch = ref.removeprefix("refs/heads/")
        repo.last_pushers[branch] = pusher.id
        for issue in self.store.pulls(repo):
            pr = issue.pull
            assert pr is not None
            if issue.state != "open":
                continue
            if pr.base_ref == branch and new != ZERO_SHA:
                pr.base_sha = new
            if pr.head_ref == branch and pr.head_repo_id is None and new != ZERO_SHA \
                    and new != pr.head_sha:  # a fork's PR follows the fork, not the base
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
        """With dismiss_stale_reviews_on_push (a ruleset) or dismiss_stale_reviews (classic
        protection), a new head dismisses older approvals."""
        pr = issue.pull
        assert pr is not None
        classic = (repo.protections.get(pr.base_ref) or {}).get("required_pull_request_reviews")
        dismisses = bool((classic or {}).get("dismiss_stale_reviews")) or any(
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
