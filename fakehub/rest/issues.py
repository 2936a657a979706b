"""Issues, issue comments, and reactions."""

from __future__ import annotations

import json

from aiohttp import web

from fakehub.hub import HubError
from fakehub.payloads import REACTION_KEYS
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
)
from fakehub.state import permission_at_least

routes = web.RouteTableDef()


@routes.post("/repos/{owner}/{repo}/issues")
async def create_issue(request: web.Request) -> web.Response:
    repo = repo_for(request, "issues", "write")
    ident = require_identity(request)
    body = await body_json(request)
    check_body_length("Issue", body)
    try:
        issue = hub(request).create_issue(repo, body.get("title") or "", body.get("body"), ident)
    except HubError as exc:
        raise from_hub_error(exc) from exc
    return reply(hub(request).shapes.issue(issue), status=201)


@routes.get("/repos/{owner}/{repo}/issues")
async def list_issues(request: web.Request) -> web.Response:
    repo = repo_for(request, "issues", "read")
    h = hub(request)
    state = request.query.get("state", "open")
    found = [i for (rid, _), i in sorted(h.store.issues.items(), reverse=True)
             if rid == repo.id and (state == "all" or i.state == state)]
    chunk, headers = page(request, [h.shapes.issue(i) for i in found])
    return reply(chunk, headers=headers)


@routes.get("/repos/{owner}/{repo}/issues/comments/{comment_id}")
async def get_comment(request: web.Request) -> web.Response:
    repo = repo_for(request, "issues", "read")
    h = hub(request)
    try:
        comment = h.comment(repo, int_param(request, "comment_id"))
    except HubError as exc:
        raise from_hub_error(exc) from exc
    return reply(h.shapes.comment(comment))


@routes.patch("/repos/{owner}/{repo}/issues/comments/{comment_id}")
async def edit_comment(request: web.Request) -> web.Response:
    repo = repo_for(request, "issues", "write")
    ident = require_identity(request)
    body = await body_json(request)
    if not isinstance(body.get("body"), str):
        raise ApiError(422, "Validation Failed",
                       [{"resource": "IssueComment", "code": "missing_field", "field": "body"}])
    check_body_length("IssueComment", body)
    h = hub(request)
    try:
        comment = h.edit_comment(repo, int_param(request, "comment_id"), body["body"], ident)
    except HubError as exc:
        raise from_hub_error(exc) from exc
    return reply(h.shapes.comment(comment))


@routes.post("/repos/{owner}/{repo}/issues/comments/{comment_id}/reactions")
async def react_to_comment(request: web.Request) -> web.Response:
    repo = repo_for(request, "issues", "write")
    ident = require_identity(request)
    h = hub(request)
    body = await body_json(request)
    content = body.get("content")
    if content not in REACTION_KEYS:
        raise ApiError(422, "Validation Failed",
                       [{"resource": "Reaction", "code": "invalid", "field": "content"}])
    try:
        comment = h.comment(repo, int_param(request, "comment_id"))
    except HubError as exc:
        raise from_hub_error(exc) from exc
    reaction, created = h.react(comment, content, ident)
    return reply(h.shapes.reaction(reaction), status=201 if created else 200)


@routes.get("/repos/{owner}/{repo}/issues/comments/{comment_id}/reactions")
async def list_comment_reactions(request: web.Request) -> web.Response:
    repo = repo_for(request, "issues", "read")
    h = hub(request)
    try:
        comment = h.comment(repo, int_param(request, "comment_id"))
    except HubError as exc:
        raise from_hub_error(exc) from exc
    wanted = request.query.get("content")
    found = [h.shapes.reaction(r) for r in comment.reactions
             if wanted is None or r.content == wanted]
    chunk, headers = page(request, found)
    return reply(chunk, headers=headers)


@routes.get("/repos/{owner}/{repo}/issues/{issue_number}")
async def get_issue(request: web.Request) -> web.Response:
    repo = repo_for(request, "issues", "read")
    h = hub(request)
    try:
        issue = h.issue(repo, int_param(request, "issue_number"))
    except HubError as exc:
        raise from_hub_error(exc) from exc
    return reply(h.shapes.issue(issue))


@routes.patch("/repos/{owner}/{repo}/issues/{issue_number}")
async def update_issue(request: web.Request) -> web.Response:
    repo = repo_for(request, "issues", "write")
    ident = require_identity(request)
    h = hub(request)
    body = await body_json(request)
    check_body_length("Issue", body)
    try:
        issue = h.issue(repo, int_param(request, "issue_number"))
        changes = {k: body[k] for k in ("title", "body", "state") if k in body}
        if changes.get("state") not in (None, "open", "closed"):
            raise ApiError(422, "Validation Failed",
                           [{"resource": "Issue", "code": "invalid", "field": "state"}])
        h.edit_pull(repo, issue, changes, ident)
    except HubError as exc:
        raise from_hub_error(exc) from exc
    return reply(h.shapes.issue(issue))


@routes.post("/repos/{owner}/{repo}/issues/{issue_number}/reactions")
async def react_to_issue(request: web.Request) -> web.Response:
    repo = repo_for(request, "issues", "write")
    ident = require_identity(request)
    h = hub(request)
    body = await body_json(request)
    if body.get("content") not in REACTION_KEYS:
        raise ApiError(422, "Validation Failed",
                       [{"resource": "Reaction", "code": "invalid", "field": "content"}])
    try:
        issue = h.issue(repo, int_param(request, "issue_number"))
    except HubError as exc:
        raise from_hub_error(exc) from exc
    reaction, created = h.react(issue, body["content"], ident)
    return reply(h.shapes.reaction(reaction), status=201 if created else 200)


def _labeler(request: web.Request):
    """The repository, if the caller may label its issues: an installation with
    `issues: write`, a person with triage or more (GitHub's role that may label)."""
    repo = repo_for(request, "issues", "write")
    ident = require_identity(request)
    h = hub(request)
    if ident.kind != "installation" and not permission_at_least(
            h.store.permission(repo, ident.user), "triage"):
        raise ApiError(403, "Resource not accessible by personal access token")
    return repo, ident


@routes.get("/repos/{owner}/{repo}/issues/{issue_number}/labels")
async def list_labels(request: web.Request) -> web.Response:
    repo = repo_for(request, "issues", "read")
    h = hub(request)
    try:
        issue = h.issue(repo, int_param(request, "issue_number"))
    except HubError as exc:
        raise from_hub_error(exc) from exc
    chunk, headers = page(request, [h.shapes.label(repo, label) for label in issue.labels])
    return reply(chunk, headers=headers)


@routes.post("/repos/{owner}/{repo}/issues/{issue_number}/labels")
async def add_labels(request: web.Request) -> web.Response:
    repo, ident = _labeler(request)
    h = hub(request)
    raw = await request.read()
    try:
        body = json.loads(raw) if raw else {}
    except ValueError as exc:
        raise ApiError(400, "Problems parsing JSON") from exc
    # GitHub takes {"labels": [...]} or the bare list of names.
    names = body.get("labels") if isinstance(body, dict) else body
    if not isinstance(names, list) or not names:
        raise ApiError(422, "Validation Failed", [
            {"resource": "Label", "code": "missing_field", "field": "labels"}])
    try:
        issue = h.issue(repo, int_param(request, "issue_number"))
        h.add_labels(repo, issue, names, ident)
    except HubError as exc:
        raise from_hub_error(exc) from exc
    return reply([h.shapes.label(repo, label) for label in issue.labels])


@routes.delete("/repos/{owner}/{repo}/issues/{issue_number}/labels/{name}")
async def remove_label(request: web.Request) -> web.Response:
    repo, ident = _labeler(request)
    h = hub(request)
    try:
        issue = h.issue(repo, int_param(request, "issue_number"))
        h.remove_label(repo, issue, request.match_info["name"], ident)
    except HubError as exc:
        raise from_hub_error(exc) from exc
    return reply([h.shapes.label(repo, label) for label in issue.labels])


@routes.get("/repos/{owner}/{repo}/issues/{issue_number}/comments")
async def list_comments(request: web.Request) -> web.Response:
    repo = repo_for(request, "issues", "read")
    h = hub(request)
    number = int_param(request, "issue_number")
    try:
        h.issue(repo, number)
    except HubError as exc:
        raise from_hub_error(exc) from exc
    found = sorted((c for c in h.store.comments.values()
                    if c.repo_id == repo.id and c.issue_number == number), key=lambda c: c.id)
    chunk, headers = page(request, [h.shapes.comment(c) for c in found])
    return reply(chunk, headers=headers)


@routes.post("/repos/{owner}/{repo}/issues/{issue_number}/comments")
async def create_comment(request: web.Request) -> web.Response:
    repo = repo_for(request, "issues", "write")
    ident = require_identity(request)
    h = hub(request)
    body = await body_json(request)
    check_body_length("IssueComment", body)
    try:
        comment = h.add_comment(repo, int_param(request, "issue_number"),
                                body.get("body") or "", ident)
    except HubError as exc:
        raise from_hub_error(exc) from exc
    return reply(h.shapes.comment(comment), status=201)
