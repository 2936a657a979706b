"""Review threads: a line comment given with a review starts one; replies join it (each a
review of its own, as GitHub makes them); a comment's author edits it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fakehub.hub.errors import HubError
from fakehub.state import Identity, Issue, Repo, Review, now

if TYPE_CHECKING:
    from fakehub.payloads import Shapes
    from fakehub.state import Store, User


class ThreadOps:
    if TYPE_CHECKING:
        store: Store
        shapes: Shapes

        def pull(self, repo: Repo, number: int) -> Issue: ...

        def review_threads(self, repo: Repo, issue: Issue) -> list[tuple[str, Any, dict]]: ...

        def _emit_repo(self, repo: Repo, event: str, payload: dict[str, Any], sender: User,
                       only_app_id: int | None = None) -> None: ...


    def review_comment_at(self, repo: Repo, comment_id: int) -> tuple[Review, int]:
        """The review that holds a line comment, and its index there (ids: review id *
        1000 + n, as shapes.review_comment makes them)."""
        review = self.store.reviews.get(comment_id // 1000)
        index = comment_id % 1000 - 1
        if review is None or review.repo_id != repo.id or not 0 <= index < len(review.comments):
            raise HubError(404, "Not Found")
        return review, index

    def reply_to_review_comment(self, repo: Repo, issue: Issue, comment_id: int, body: str,
                                actor: Identity) -> dict[str, Any]:
        """A reply in the thread a top-level line comment started (GitHub: "Replies to
        replies are not supported"). It is a review of its own, state COMMENTED."""
        root, index = self.review_comment_at(repo, comment_id)
        first = root.comments[index]
        if root.pr_number != issue.number:
            raise HubError(404, "Not Found")
        if first.get("in_reply_to"):
            raise HubError(422, "Validation Failed", [
                {"resource": "PullRequestReviewComment", "code": "invalid",
                 "field": "in_reply_to"}])
        if not body:
            raise HubError(422, "Validation Failed", [
                {"resource": "PullRequestReviewComment", "code": "missing_field",
                 "field": "body"}])
        review = Review(
            id=self.store.next_id(), repo_id=repo.id, pr_number=issue.number, user=actor.user,
            state="COMMENTED", body="", commit_id=root.commit_id, submitted_at=now(),
            comments=[{**{k: first[k] for k in ("path", "line", "side", "position",
                                                 "diff_hunk") if k in first},
                       "body": body, "in_reply_to": comment_id}],
        )
        self.store.reviews[review.id] = review
        shaped = self.shapes.review_comment(repo, review, 0, review.comments[0])
        self._emit_repo(repo, "pull_request_review_comment", {
            "action": "created", "comment": shaped,
            "pull_request": self.shapes.pull_simple(issue)}, actor.user)
        return shaped

    def edit_review_comment(self, repo: Repo, comment_id: int, body: str,
                            actor: Identity) -> dict[str, Any]:
        review, index = self.review_comment_at(repo, comment_id)
        if review.user.id != actor.user.id:
            raise HubError(403, "Resource not accessible by integration"
                           if actor.kind == "installation" else "Forbidden")
        comment = review.comments[index]
        before = comment.get("body", "")
        comment["body"] = body
        comment["updated_at"] = now()
        shaped = self.shapes.review_comment(repo, review, index, comment)
        if before != body:
            self._emit_repo(repo, "pull_request_review_comment", {
                "action": "edited", "changes": {"body": {"from": before}}, "comment": shaped,
                "pull_request": self.shapes.pull_simple(self.pull(repo, review.pr_number))},
                actor.user)
        return shaped

    def thread_comments(self, repo: Repo, issue: Issue, thread_id: str) -> list[dict[str, Any]]:
        """A thread's comments as the REST API shapes them: its first, then its replies."""
        review_id, _, index = thread_id.partition("-")
        review = self.store.reviews[int(review_id)]
        first = self.shapes.review_comment(repo, review, int(index), review.comments[int(index)])
        replies = [self.shapes.review_comment(repo, other, i, c)
                   for other in self.store.reviews_for(repo, issue.number)
                   for i, c in enumerate(other.comments) if c.get("in_reply_to") == first["id"]]
        return [first, *replies]

    def resolve_review_thread(self, repo: Repo, issue: Issue, thread_id: str, resolved: bool,
                              actor: Identity) -> None:
        """"Resolve conversation" (or unresolve): `pull_request_review_thread` is sent when
        the state changes."""
        pr = issue.pull
        assert pr is not None
        if thread_id not in {t for t, _, _ in self.review_threads(repo, issue)}:
            raise HubError(404, "Not Found")
        if (thread_id in pr.resolved_threads) == resolved:
            return
        if resolved:
            pr.resolved_threads.add(thread_id)
        else:
            pr.resolved_threads.discard(thread_id)
        self._emit_repo(repo, "pull_request_review_thread", {
            "action": "resolved" if resolved else "unresolved",
            "thread": {"node_id": thread_id,
                       "comments": self.thread_comments(repo, issue, thread_id)},
            "pull_request": self.shapes.pull_simple(issue)}, actor.user)
