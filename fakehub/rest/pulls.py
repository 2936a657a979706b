"""Pull requests: create, read, list, edit, update-branch, merge, reviews."""

from __future__ import annotations

from aiohttp import web

from fakehub import gitrepo
from fakehub.hub import HubError
from fakehub.rest.common import (
    ApiError,
    body_json,
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
            if not branch or owner.lower() != repo.owner.login.lower() or branch != pr.head_ref:
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
             for f in gitrepo.diff_files(repo.path, base, pr.head_sha)]
    chunk, headers = page(request, files)
    return reply(chunk, headers=headers)


@routes.put("/repos/{owner}/{repo}/pulls/{pull_number}/update-branch")
async def update_branch(request: web.Request) -> web.Response:
    repo = repo_for(request, "contents", "write")
    ident = require_identity(request)
    h = hub(request)
    issue = _pull(request, repo)
    body = await body_json(request)
    try:
        h.update_branch(repo, issue, ident, body.get("expected_head_sha"))
    except HubError as exc:
        raise from_hub_error(exc) from exc
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
    chunk, headers = page(request, [_review_comment(h, repo, review, i, c)
                                    for i, c in enumerate(review.comments)])
    return reply(chunk, headers=headers)


@routes.get("/repos/{owner}/{repo}/pulls/{pull_number}/comments")
async def list_pull_comments(request: web.Request) -> web.Response:
    """Every review's line comments on the pull request, oldest first."""
    repo = repo_for(request, "pull_requests", "read")
    h = hub(request)
    issue = _pull(request, repo)
    comments = [_review_comment(h, repo, review, i, c)
                for review in h.store.reviews_for(repo, issue.number)
                for i, c in enumerate(review.comments)]
    chunk, headers = page(request, comments)
    return reply(chunk, headers=headers)


def _review_comment(h, repo, review, index: int, comment: dict) -> dict:
    from fakehub.state import iso

    comment_id = review.id * 1000 + index + 1  # stable, and apart from other ids
    api = f"{h.api_url}/repos/{repo.full_name}/pulls"
    html = f"{h.base_url}/{repo.full_name}/pull/{review.pr_number}#discussion_r{comment_id}"
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
        "user": h.shapes.user(review.user),
        "body": comment.get("body", ""),
        "created_at": iso(review.submitted_at),
        "updated_at": iso(review.submitted_at),
        "html_url": html,
        "pull_request_url": f"{api}/{review.pr_number}",
        "author_association": h.shapes.author_association(repo, review.user),
        "_links": {"self": {"href": f"{api}/comments/{comment_id}"},
                   "html": {"href": html},
                   "pull_request": {"href": f"{api}/{review.pr_number}"}},
        "line": line,
        "original_line": line,
        "side": comment.get("side", "RIGHT"),
    }


@routes.post("/repos/{owner}/{repo}/pulls/{pull_number}/reviews")
async def create_review(request: web.Request) -> web.Response:
    repo = repo_for(request, "pull_requests", "write")
    ident = require_identity(request)
    h = hub(request)
    issue = _pull(request, repo)
    body = await body_json(request)
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
