"""Issues, issue comments and reactions."""

from __future__ import annotations

from fakehub.hub.errors import HubError
from fakehub.state import (
    Comment,
    Identity,
    Issue,
    Label,
    Reaction,
    Repo,
    now,
    permission_at_least,
)


class IssueOps:
    """Part of Hub: issues and their comments."""

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
        issue.updated_at = stamp
        # GitHub's `created` payload counts the issue's comments before this one (its
        # examples: `comments` 0 on an issue's first comment, 1 once it is edited).
        shaped = self.shapes.issue(issue)
        self.store.comments[comment.id] = comment
        self._emit_repo(
            repo,
            "issue_comment",
            {"action": "created", "issue": shaped, "comment": self.shapes.comment(comment)},
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

    # -- labels -----------------------------------------------------------------------

    def add_labels(self, repo: Repo, issue: Issue, names: list[str], actor: Identity) -> None:
        """Labels on an issue or PR; a name the repository lacks is created, as on GitHub.
        Each label newly on it sends `labeled`."""
        for name in names:
            if not isinstance(name, str) or not name.strip():
                raise HubError(422, "Validation Failed", [
                    {"resource": "Label", "code": "invalid", "field": "name"}])
            label = repo.labels.get(name.lower())
            if label is None:
                label = repo.labels[name.lower()] = Label(id=self.store.next_id(), name=name)
            if any(have.id == label.id for have in issue.labels):
                continue
            issue.labels.append(label)
            issue.updated_at = now()
            self._emit_label(repo, issue, label, "labeled", actor)

    def remove_label(self, repo: Repo, issue: Issue, name: str, actor: Identity) -> None:
        label = next((have for have in issue.labels if have.name.lower() == name.lower()), None)
        if label is None:
            raise HubError(404, "Label does not exist")
        issue.labels.remove(label)
        issue.updated_at = now()
        self._emit_label(repo, issue, label, "unlabeled", actor)

    def _emit_label(self, repo: Repo, issue: Issue, label: Label, action: str,
                    actor: Identity) -> None:
        shaped = self.shapes.label(repo, label)
        if issue.pull:
            self._emit_repo(repo, "pull_request", {
                "action": action, "number": issue.number,
                "pull_request": self.shapes.pull(issue), "label": shaped}, actor.user)
        else:
            self._emit_repo(repo, "issues", {
                "action": action, "issue": self.shapes.issue(issue), "label": shaped}, actor.user)

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
