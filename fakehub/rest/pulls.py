"""Pull requests: create, read, list, edit, update-branch, merge, reviews."""

from __future__ import annotations

import asyncio

from aiohttp import web

from fakehub import gitrepo
from fakehub.hub import HubError
from fakehub.rest.common import (
    ApiError,
    body_json,
    check_body_length,
    from_hub_error,
    hub,
    int_param,
    page,
    reply,
    repo_for,
    require_identity,
    validation_failed,
)

routes = web.RouteTableDef()


@routes.post("/repos/{owner}/{repo}/pulls")
async def create_pull(request: web.Request) -> web.Response:
    repo = repo_for(request, "pull_requests", "write")
    ident = require_identity(request)
    h = hub(request)
    body = await body_json(request)
    check_body_length("PullRequest", body)
    for field in ("head", "base"):
        if not isinstance(body.get(field), str) or not body[field]:
            raise validation_failed("PullRequest", field)
    try:
        issue = h.open_pull(
            repo,
            head=body["head"],
            base=body["base"],
            title=body.get("title") or "",
            body=body.get("body"),
            actor=ident,
            draft=bool(body.get("draft")),
            maintainer_can_modify=bool(body.get("maintainer_can_modify")),
        )
    except HubError as exc:
        raise from_hub_error(exc) from exc
    return reply(h.shapes.pull(issue), status=201)


@routes.get("/repos/{owner}/{repo}/pulls")
async def list_pulls(request: web.Request) -> web.Response:
    repo = repo_for(request, "pull_requests", "read")
    h = hub(request)
    state = request.query.get("state", "open")
    head = request.query.get("head")
    base = request.query.get("base")
    found = []
    for issue in reversed(h.store.pulls(repo)):
        pr = issue.pull
        assert pr is not None
        if state != "all" and issue.state != state:
            continue
        if head:
            owner, _, branch = head.partition(":")
            head_repo = h.shapes._head_repo(repo, pr)
            if not branch or owner.lower() != head_repo.owner.login.lower() \
                    or branch != pr.head_ref:
                continue
        if base and pr.base_ref != base:
            continue
        found.append(issue)
    chunk, headers = page(request, [h.shapes.pull_simple(i) for i in found])
    return reply(chunk, headers=headers)


def _pull(request: web.Request, repo):
    try:
        return hub(request).pull(repo, int_param(request, "pull_number"))
    except HubError as exc:
        raise from_hub_error(exc) from exc


@routes.get("/repos/{owner}/{repo}/pulls/{pull_number}")
async def get_pull(request: web.Request) -> web.Response:
    repo = repo_for(request, "pull_requests", "read")
    h = hub(request)
    shaped = h.shapes.pull(_pull(request, repo))
    if h.unknown_mergeability_reads > 0 and shaped["state"] == "open":
        h.unknown_mergeability_reads -= 1
        shaped.update(mergeable=None, rebaseable=None, mergeable_state="unknown")
    return reply(shaped)


@routes.patch("/repos/{owner}/{repo}/pulls/{pull_number}")
async def update_pull(request: web.Request) -> web.Response:
    repo = repo_for(request, "pull_requests", "write")
    ident = require_identity(request)
    h = hub(request)
    issue = _pull(request, repo)
    body = await body_json(request)
    check_body_length("PullRequest", body)
    if body.get("state") not in (None, "open", "closed"):
        raise validation_failed("PullRequest", "state", "invalid")
    changes = {k: body[k] for k in ("title", "body", "state", "base") if k in body}
    try:
        h.edit_pull(repo, issue, changes, ident)
    except HubError as exc:
        raise from_hub_error(exc) from exc
    return reply(h.shapes.pull(issue))


@routes.get("/repos/{owner}/{repo}/pulls/{pull_number}/commits")
async def list_pull_commits(request: web.Request) -> web.Response:
    repo = repo_for(request, "pull_requests", "read")
    h = hub(request)
    pr = _pull(request, repo).pull
    commits = gitrepo.commits_between(repo.path, pr.base_sha, pr.head_sha)
    chunk, headers = page(request, [h.shapes.commit(repo, c) for c in commits])
    return reply(chunk, headers=headers)


@routes.get("/repos/{owner}/{repo}/pulls/{pull_number}/files")
async def list_pull_files(request: web.Request) -> web.Response:
    repo = repo_for(request, "pull_requests", "read")
    h = hub(request)
    pr = _pull(request, repo).pull
    base = gitrepo.merge_base(repo.path, pr.base_sha, pr.head_sha) or pr.base_sha
    files = [h.shapes.file_change(repo, f, base, pr.head_sha)
             for f in gitrepo.diff_files(repo.path, base, pr.head_sha)][:3000]  # GitHub's cap
    chunk, headers = page(request, files)
    return reply(chunk, headers=headers)


@routes.put("/repos/{owner}/{repo}/pulls/{pull_number}/update-branch")
async def update_branch(request: web.Request) -> web.Response:
    repo = repo_for(request, "contents", "write")
    ident = require_identity(request)
    h = hub(request)
    issue = _pull(request, repo)
    body = await body_json(request)
    old = issue.pull.head_sha
    try:
        new = h.update_branch(repo, issue, ident, body.get("expected_head_sha"))
    except HubError as exc:
        raise from_hub_error(exc) from exc

    async def later() -> None:
        await asyncio.sleep(h.update_branch_delay)
        h.move_head_after_update(repo, issue, ident, old, new)

    h.spawn(later())
    return reply(
        {"message": "Updating pull request branch.", "url": f"{h.base_url}/{repo.full_name}"
         f"/pull/{issue.number}"},
        status=202,
    )


@routes.get("/repos/{owner}/{repo}/pulls/{pull_number}/merge")
async def is_merged(request: web.Request) -> web.Response:
    repo = repo_for(request, "pull_requests", "read")
    issue = _pull(request, repo)
    if issue.pull and issue.pull.merged:
        return web.Response(status=204)
    raise ApiError(404, "Not Found")


@routes.put("/repos/{owner}/{repo}/pulls/{pull_number}/merge")
async def merge_pull(request: web.Request) -> web.Response:
    repo = repo_for(request, "contents", "write")
    ident = require_identity(request)
    h = hub(request)
    issue = _pull(request, repo)
    body = await body_json(request)
    try:
        sha = h.merge_pull(
            repo,
            issue,
            ident,
            sha=body.get("sha"),
            method=body.get("merge_method") or "merge",
            title=body.get("commit_title"),
            message=body.get("commit_message"),
        )
    except HubError as exc:
        raise from_hub_error(exc) from exc
    return reply({"sha": sha, "merged": True, "message": "Pull Request successfully merged"})


def _names(body: dict, key: str) -> list[str]:
    names = body.get(key) or []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise validation_failed("PullRequest", key, "invalid")
    return names


@routes.get("/repos/{owner}/{repo}/pulls/{pull_number}/requested_reviewers")
async def list_requested_reviewers(request: web.Request) -> web.Response:
    repo = repo_for(request, "pull_requests", "read")
    h = hub(request)
    pr = _pull(request, repo).pull
    return reply({"users": [h.shapes.user(u) for u in pr.requested_reviewers], "teams": []})


@routes.post("/repos/{owner}/{repo}/pulls/{pull_number}/requested_reviewers")
async def request_reviewers(request: web.Request) -> web.Response:
    repo = repo_for(request, "pull_requests", "write")
    ident = require_identity(request)
    h = hub(request)
    issue = _pull(request, repo)
    body = await body_json(request)
    users, teams = _names(body, "reviewers"), _names(body, "team_reviewers")
    try:
        h.request_reviewers(repo, issue, users, teams, ident)
    except HubError as exc:
        raise from_hub_error(exc) from exc
    return reply(h.shapes.pull_simple(issue), status=201)


@routes.delete("/repos/{owner}/{repo}/pulls/{pull_number}/requested_reviewers")
async def remove_requested_reviewers(request: web.Request) -> web.Response:
    repo = repo_for(request, "pull_requests", "write")
    ident = require_identity(request)
    h = hub(request)
    issue = _pull(request, repo)
    body = await body_json(request)
    if "reviewers" not in body:
        raise validation_failed("PullRequest", "reviewers")
    h.remove_requested_reviewers(repo, issue, _names(body, "reviewers"), ident)
    return reply(h.shapes.pull_simple(issue))


@routes.get("/repos/{owner}/{repo}/pulls/{pull_number}/reviews")
async def list_reviews(request: web.Request) -> web.Response:
    repo = repo_for(request, "pull_requests", "read")
    h = hub(request)
    issue = _pull(request, repo)
    reviews = h.store.reviews_for(repo, issue.number)
    chunk, headers = page(request, [h.shapes.review(r) for r in reviews])
    return reply(chunk, headers=headers)


@routes.get("/repos/{owner}/{repo}/pulls/{pull_number}/reviews/{review_id}/comments")
async def list_review_comments(request: web.Request) -> web.Response:
    """The comments one review left on lines of the diff (given to submit_review)."""
    repo = repo_for(request, "pull_requests", "read")
    h = hub(request)
    issue = _pull(request, repo)
    review = h.store.reviews.get(int_param(request, "review_id"))
    if review is None or review.repo_id != repo.id or review.pr_number != issue.number:
        raise ApiError(404, "Not Found")
    chunk, headers = page(request, [h.shapes.review_comment(repo, review, i, c)
                                    for i, c in enumerate(review.comments)])
    return reply(chunk, headers=headers)


@routes.get("/repos/{owner}/{repo}/pulls/{pull_number}/comments")
async def list_pull_comments(request: web.Request) -> web.Response:
    """Every review's line comments on the pull request, oldest first."""
    repo = repo_for(request, "pull_requests", "read")
    h = hub(request)
    issue = _pull(request, repo)
    comments = [h.shapes.review_comment(repo, review, i, c)
                for review in h.store.reviews_for(repo, issue.number)
                for i, c in enumerate(review.comments)]
    chunk, headers = page(request, comments)
    return reply(chunk, headers=headers)


@routes.post("/repos/{owner}/{repo}/pulls/{pull_number}/comments/{comment_id}/replies")
async def reply_to_review_comment(request: web.Request) -> web.Response:
    """A reply in a review thread (to its top-level comment only, as GitHub says)."""
    repo = repo_for(request, "pull_requests", "write")
    ident = require_identity(request)
    h = hub(request)
    issue = _pull(request, repo)
    body = await body_json(request)
    if not isinstance(body.get("body"), str):
        raise validation_failed("PullRequestReviewComment", "body")
    try:
        shaped = h.reply_to_review_comment(repo, issue, int_param(request, "comment_id"),
                                           body["body"], ident)
    except HubError as exc:
        raise from_hub_error(exc) from exc
    return reply(shaped, status=201)


@routes.get("/repos/{owner}/{repo}/pulls/comments/{comment_id}")
async def get_review_comment(request: web.Request) -> web.Response:
    repo = repo_for(request, "pull_requests", "read")
    h = hub(request)
    try:
        review, index = h.review_comment_at(repo, int_param(request, "comment_id"))
    except HubError as exc:
        raise from_hub_error(exc) from exc
    return reply(h.shapes.review_comment(repo, review, index, review.comments[index]))


@routes.patch("/repos/{owner}/{repo}/pulls/comments/{comment_id}")
async def edit_review_comment(request: web.Request) -> web.Response:
    repo = repo_for(request, "pull_requests", "write")
    ident = require_identity(request)
    h = hub(request)
    body = await body_json(request)
    if not isinstance(body.get("body"), str):
        raise validation_failed("PullRequestReviewComment", "body")
    try:
        shaped = h.edit_review_comment(repo, int_param(request, "comment_id"), body["body"],
                                       ident)
    except HubError as exc:
        raise from_hub_error(exc) from exc
    return reply(shaped)


@routes.post("/repos/{owner}/{repo}/pulls/{pull_number}/reviews")
async def create_review(request: web.Request) -> web.Response:
    repo = repo_for(request, "pull_requests", "write")
    ident = require_identity(request)
    h = hub(request)
    issue = _pull(request, repo)
    body = await body_json(request)
    check_body_length("PullRequestReview", body)
    event = body.get("event")
    if event is None:
        # GitHub leaves an event-less review PENDING; fakehub does not model drafts.
        raise validation_failed("PullRequestReview", "event")
    try:
        review = h.submit_review(
            repo,
            issue,
            ident,
            event=event,
            body=body.get("body") or "",
            commit_id=body.get("commit_id"),
            comments=body.get("comments"),
        )
    except HubError as exc:
        raise from_hub_error(exc) from exc
    return reply(h.shapes.review(review))
