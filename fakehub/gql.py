"""GitHub's GraphQL API, the part hangar uses: a pull request's review threads (and their
comments) and its merge queue entry, files at a commit (`object(expression:)`), a branch's
classic protection (`ref(qualifiedName:) { branchProtectionRule }`), `enqueuePullRequest`,
`markPullRequestReadyForReview` and `resolveReviewThread`.

Queries are parsed and validated by graphql-core against a subset of GitHub's own schema
(the types and fields below are spelled as in GitHub's public schema), so a query GitHub
would refuse as invalid is refused here too; what is not in the subset is refused as an
unknown field, not answered with something made up.
"""

from __future__ import annotations

import base64
from typing import Any

from aiohttp import web
from graphql import build_schema, graphql

from fakehub import auth, gitrepo
from fakehub.git_http import HUB_KEY
from fakehub.hub.errors import HubError
from fakehub.payloads import node_id
from fakehub.state import Repo, permission_at_least

SCHEMA = build_schema('''
"""An object with an ID."""
interface Node { id: ID! }

type Query {
  repository(owner: String!, name: String!, followRenames: Boolean = true): Repository
}

type Repository implements Node {
  id: ID!
  name: String!
  nameWithOwner: String!
  pullRequest(number: Int!): PullRequest
  object(expression: String, oid: GitObjectID): GitObject
  ref(qualifiedName: String!): Ref
}

type Ref implements Node {
  id: ID!
  name: String!
  prefix: String!
  branchProtectionRule: BranchProtectionRule
}

type BranchProtectionRule implements Node {
  id: ID!
  pattern: String!
}

interface GitObject {
  id: ID!
  oid: GitObjectID!
}

type Blob implements Node & GitObject {
  id: ID!
  oid: GitObjectID!
  byteSize: Int!
  isBinary: Boolean
  isTruncated: Boolean!
  text: String
}

type Tree implements Node & GitObject {
  id: ID!
  oid: GitObjectID!
}

type PullRequest implements Node {
  id: ID!
  number: Int!
  headRefOid: GitObjectID!
  isDraft: Boolean!
  isInMergeQueue: Boolean!
  mergeQueueEntry: MergeQueueEntry
  reviewThreads(after: String, before: String, first: Int, last: Int):
    PullRequestReviewThreadConnection!
}

type MergeQueueEntry implements Node {
  id: ID!
  position: Int!
  state: MergeQueueEntryState!
}

enum MergeQueueEntryState { AWAITING_CHECKS LOCKED MERGEABLE QUEUED UNMERGEABLE }

type Mutation {
  enqueuePullRequest(input: EnqueuePullRequestInput!): EnqueuePullRequestPayload
  markPullRequestReadyForReview(input: MarkPullRequestReadyForReviewInput!):
    MarkPullRequestReadyForReviewPayload
  resolveReviewThread(input: ResolveReviewThreadInput!): ResolveReviewThreadPayload
}

input MarkPullRequestReadyForReviewInput {
  clientMutationId: String
  pullRequestId: ID!
}

type MarkPullRequestReadyForReviewPayload {
  clientMutationId: String
  pullRequest: PullRequest
}

input EnqueuePullRequestInput {
  clientMutationId: String
  expectedHeadOid: GitObjectID
  jump: Boolean
  pullRequestId: ID!
}

type EnqueuePullRequestPayload {
  clientMutationId: String
  mergeQueueEntry: MergeQueueEntry
}

type PullRequestReviewThreadConnection {
  nodes: [PullRequestReviewThread]
  pageInfo: PageInfo!
  totalCount: Int!
}

type PullRequestReviewThread implements Node {
  id: ID!
  isResolved: Boolean!
  isOutdated: Boolean!
  path: String!
  comments(after: String, before: String, first: Int, last: Int, skip: Int):
    PullRequestReviewCommentConnection!
}

type PullRequestReviewCommentConnection {
  nodes: [PullRequestReviewComment]
  pageInfo: PageInfo!
  totalCount: Int!
}

type PullRequestReviewComment implements Node {
  id: ID!
  databaseId: Int
  body: String!
  path: String!
}

input ResolveReviewThreadInput {
  clientMutationId: String
  threadId: ID!
}

type ResolveReviewThreadPayload {
  clientMutationId: String
  thread: PullRequestReviewThread
}

type PageInfo {
  endCursor: String
  hasNextPage: Boolean!
  hasPreviousPage: Boolean!
  startCursor: String
}

"""A Git object ID."""
scalar GitObjectID
''')


def _threads(hub, repo: Repo, issue, first: int | None, after: str | None) -> dict:
    if first is None or not 1 <= first <= 100:
        raise ValueError("You must provide a `first` or `last` value to properly paginate the "
                         "`reviewThreads` connection.")
    threads = hub.review_threads(repo, issue)
    start = int(base64.b64decode(after).decode()) if after else 0
    chunk = threads[start:start + first]
    nodes = [_thread(hub, repo, issue, thread_id) for thread_id, _, _ in chunk]
    return _page(nodes, start, len(threads))


def _page(nodes: list, start: int, total: int) -> dict:
    end = start + len(nodes)
    return {"nodes": nodes, "totalCount": total, "pageInfo": {
        "hasNextPage": end < total, "hasPreviousPage": start > 0,
        "startCursor": base64.b64encode(str(start).encode()).decode() if nodes else None,
        "endCursor": base64.b64encode(str(end).encode()).decode() if nodes else None}}


def _thread(hub, repo: Repo, issue, thread_id: str) -> dict:
    comments = hub.thread_comments(repo, issue, thread_id)

    def page_of(_info, first=None, after=None, **_):
        if first is None or not 1 <= first <= 100:
            raise ValueError("You must provide a `first` or `last` value to properly paginate "
                             "the `comments` connection.")
        start = int(base64.b64decode(after).decode()) if after else 0
        chunk = comments[start:start + first]
        return _page([{"id": c["node_id"], "databaseId": c["id"], "body": c["body"],
                       "path": c["path"]} for c in chunk], start, len(comments))

    return {"id": node_id("PullRequestReviewThread", thread_id),
            "isResolved": thread_id in issue.pull.resolved_threads, "isOutdated": False,
            "path": comments[0].get("path", ""), "comments": page_of}


def _root(hub, ident) -> dict:
    def repository(_info, owner: str, name: str, followRenames: bool = True):
        repo = hub.store.repo(f"{owner}/{name}")
        if repo is None and followRenames:  # GitHub's default: an old name finds it
            repo = hub.store.repo_renamed_from(f"{owner}/{name}")
        if repo is None or not auth.can_read(hub.store, ident, repo):
            raise LookupError(f"Could not resolve to a Repository with the name "
                              f"'{owner}/{name}'.")

        def pull_request(_info, number: int):
            issue = hub.store.issue(repo, number)
            if issue is None or issue.pull is None:
                raise LookupError(f"Could not resolve to a PullRequest with the number of "
                                  f"{number}.")
            return _pull(hub, repo, issue)

        return {"id": node_id("Repository", repo.id), "name": repo.name,
                "nameWithOwner": repo.full_name, "pullRequest": pull_request,
                "object": lambda _i, expression=None, oid=None: _object(repo, expression),
                "ref": lambda _i, qualifiedName: _ref(hub, ident, repo, qualifiedName)}

    return {"repository": repository}


def _object(repo: Repo, expression: str | None) -> dict | None:
    """`REV:PATH` as a blob or a tree; None when there is none (as GitHub answers). Only
    that form of expression: a commit (`REV` alone) is not answered."""
    rev, colon, path = (expression or "").partition(":")
    sha = gitrepo.resolve(repo.path, rev) if colon else None
    if sha is None:
        return None
    blob = gitrepo.read_blob(repo.path, sha, path) if path else None
    if blob is not None:
        content, oid = blob
        try:
            text: str | None = content.decode()
        except UnicodeDecodeError:
            text = None
        binary = text is None or "\0" in text
        return {"__typename": "Blob", "id": node_id("Blob", oid), "oid": oid,
                "byteSize": len(content), "isBinary": binary, "isTruncated": False,
                "text": None if binary else text}
    tree = gitrepo.git(repo.path, "rev-parse", "--verify", "--quiet", f"{sha}:{path}",
                       check=False)
    if tree.returncode != 0 or gitrepo.out(repo.path, "cat-file", "-t",
                                           tree.stdout.decode().strip()) != "tree":
        return None
    oid = tree.stdout.decode().strip()
    return {"__typename": "Tree", "id": node_id("Tree", oid), "oid": oid}


def _ref(hub, ident, repo: Repo, qualified: str) -> dict | None:
    """A branch by its full name (`refs/heads/main`); None when there is none. Its classic
    protection is read as REST reads it: Apps need administration, people admin."""
    name = qualified.removeprefix("refs/heads/")
    if name.startswith("refs/") or gitrepo.ref_sha(repo.path, name) is None:
        return None  # a tag or another kind of ref: not a branch this answers for

    def rule(_info):
        allowed = (auth.installation_permission(ident, "administration") != "none"
                   if ident.kind == "installation"
                   else ident.kind == "user" and hub.store.permission(repo, ident.user) == "admin")
        if not allowed:
            raise PermissionError("Resource not accessible by integration")
        if name not in repo.protections:
            return None
        return {"id": node_id("BranchProtectionRule", f"{repo.id}:{name}"), "pattern": name}

    return {"id": node_id("Ref", f"{repo.id}:{name}"), "name": name,
            "prefix": "refs/heads/", "branchProtectionRule": rule}


def _pull(hub, repo: Repo, issue) -> dict:
    return {"id": node_id("PullRequest", issue.pull.id), "number": issue.number,
            "headRefOid": issue.pull.head_sha,
            "isDraft": issue.pull.draft,
            "isInMergeQueue": hub.entry_for(repo, issue.number) is not None,
            "mergeQueueEntry": lambda _i: _entry(hub, repo, hub.entry_for(repo, issue.number)),
            "reviewThreads": lambda _i, first=None, after=None, **_: _threads(
                hub, repo, issue, first, after)}


def _entry(hub, repo: Repo, entry) -> dict | None:
    if entry is None:
        return None
    queue = hub.queue(repo, entry.base)
    return {"id": node_id("MergeQueueEntry", entry.id), "position": queue.index(entry) + 1,
            "state": "AWAITING_CHECKS" if entry.group_head else "QUEUED"}


def _mutations(hub, ident) -> dict:
    def enqueue(_info, input: dict):  # GitHub names the argument `input`
        wanted = input["pullRequestId"]
        for repo in hub.store.repos.values():
            for issue in hub.store.pulls(repo):
                if node_id("PullRequest", issue.pull.id) != wanted:
                    continue
                if ident.kind == "installation" and not (
                        auth.installation_covers(hub.store, ident, repo)
                        and auth.installation_permission(ident, "contents") == "write"):
                    raise PermissionError("Resource not accessible by integration")
                try:
                    entry = hub.enqueue(repo, issue, ident, input.get("expectedHeadOid"))
                except HubError as exc:
                    raise ValueError(exc.message) from exc
                return {"clientMutationId": input.get("clientMutationId"),
                        "mergeQueueEntry": _entry(hub, repo, entry)}
        raise LookupError(f"Could not resolve to a node with the global id of '{wanted}'")

    def mark_ready(_info, input: dict):
        wanted = input["pullRequestId"]
        repo, issue = _pull_by_node(hub, wanted)
        if ident.kind == "installation" and not (
                auth.installation_covers(hub.store, ident, repo)
                and auth.installation_permission(ident, "pull_requests") == "write"):
            raise PermissionError("Resource not accessible by integration")
        if ident.kind == "user" and not permission_at_least(
                hub.store.permission(repo, ident.user), "write"):
            raise PermissionError(f"{ident.user.login} does not have permission to mark "
                                  "this pull request ready for review")  # [unconfirmed]
        try:
            hub.mark_ready(repo, issue, ident)
        except HubError as exc:
            raise ValueError(exc.message) from exc
        return {"clientMutationId": input.get("clientMutationId"),
                "pullRequest": _pull(hub, repo, issue)}

    def resolve_thread(_info, input: dict):
        wanted = input["threadId"]
        for repo in hub.store.repos.values():
            for issue in hub.store.pulls(repo):
                for thread_id, _, _ in hub.review_threads(repo, issue):
                    if node_id("PullRequestReviewThread", thread_id) != wanted:
                        continue
                    if ident.kind == "installation" and not (
                            auth.installation_covers(hub.store, ident, repo)
                            and auth.installation_permission(ident, "pull_requests") == "write"):
                        raise PermissionError("Resource not accessible by integration")
                    if ident.kind == "user" and not permission_at_least(
                            hub.store.permission(repo, ident.user), "write") and \
                            ident.user.id != issue.user.id:  # the PR's author may [unconfirmed]
                        raise PermissionError(f"{ident.user.login} does not have permission "
                                              "to resolve this thread")  # [unconfirmed]
                    hub.resolve_review_thread(repo, issue, thread_id, True, ident)
                    return {"clientMutationId": input.get("clientMutationId"),
                            "thread": _thread(hub, repo, issue, thread_id)}
        raise LookupError(f"Could not resolve to a node with the global id of '{wanted}'")

    return {"enqueuePullRequest": enqueue, "markPullRequestReadyForReview": mark_ready,
            "resolveReviewThread": resolve_thread}


def _pull_by_node(hub, wanted: str) -> tuple[Repo, Any]:
    for repo in hub.store.repos.values():
        for issue in hub.store.pulls(repo):
            if node_id("PullRequest", issue.pull.id) == wanted:
                return repo, issue
    raise LookupError(f"Could not resolve to a node with the global id of '{wanted}'")


async def endpoint(request: web.Request) -> web.Response:
    """POST /api/graphql (GitHub Enterprise's address; github.com's is /graphql)."""
    hub = request.app[HUB_KEY]
    try:
        ident = auth.identify(hub.store, request.headers.get("Authorization"))
    except auth.AuthError as exc:
        return web.json_response({"message": exc.message}, status=exc.status)
    if ident is None:
        return web.json_response({"message": "This endpoint requires you to be authenticated."},
                                 status=401)
    try:
        body = await request.json()
    except ValueError:
        return web.json_response({"message": "Problems parsing JSON"}, status=400)
    query = body.get("query") or ""
    root = {**_root(hub, ident), **_mutations(hub, ident)}
    result = await graphql(SCHEMA, query, root_value=root,
                           variable_values=body.get("variables"))
    answer: dict[str, Any] = {"data": result.data}
    if result.errors:
        answer["errors"] = [{"message": e.message, "path": e.path,
                             "type": {LookupError: "NOT_FOUND", PermissionError: "FORBIDDEN",
                                      ValueError: "UNPROCESSABLE"}.get(
                                          type(e.original_error)),
                             } for e in result.errors]
    caller = f"{ident.kind}:{ident.installation_id or ident.user.id}"
    hub.store.api_calls.append((ident.app_id, caller, "POST", "/graphql", 200))
    return web.json_response(answer)
