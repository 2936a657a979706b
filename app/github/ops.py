"""hangar's operations on one repository, each safe to repeat.

Every create first looks for what an earlier attempt may already have made: a comment
by its hidden marker, a PR by its head branch, a check run by name and external id.
"""

from __future__ import annotations

import base64
import time
from typing import Any
from urllib.parse import quote

from gidgethub import BadRequest, GitHubException, HTTPException

from app import render
from app.github.client import GitHubClient, get_or_none

MAX_COMPARE_FILES = 300  # GitHub's compare lists at most 300 files
MAX_COMPARE_COMMITS = 250  # ... and at most 250 commits
# What hangar keeps of a commit message (an agent may write a megabyte of one): the
# check run and the PR body show subjects only.
MAX_COMMIT_MESSAGE_CHARS = 4096


def same_repository(pr: dict) -> bool:
    """Whether a PR's head lives in its base repository (not in a fork, nor a deleted one)."""
    head = (pr.get("head") or {}).get("repo") or {}
    return head.get("id") is not None and head.get("id") == ((pr.get("base") or {}).get(
        "repo") or {}).get("id")
PAGE = 100  # GitHub's largest page; its default is 30

UNRESOLVED_THREADS = """
query($owner: String!, $name: String!, $number: Int!, $after: String) {
  repository(owner: $owner, name: $name) {
    pullRequest(number: $number) {
      reviewThreads(first: 100, after: $after) {
        nodes { isResolved }
        pageInfo { hasNextPage endCursor }
      }
    }
  }
}"""


THREAD_ROOTS = """
query($owner: String!, $name: String!, $number: Int!, $after: String) {
  repository(owner: $owner, name: $name) {
    pullRequest(number: $number) {
      reviewThreads(first: 100, after: $after) {
        nodes { id isResolved comments(first: 1) { nodes { databaseId } } }
        pageInfo { hasNextPage endCursor }
      }
    }
  }
}"""

RESOLVE_THREAD = """
mutation($id: ID!) {
  resolveReviewThread(input: {threadId: $id}) { thread { isResolved } }
}"""


ENQUEUE = """
mutation($id: ID!, $head: GitObjectID) {
  enqueuePullRequest(input: {pullRequestId: $id, expectedHeadOid: $head}) {
    mergeQueueEntry { position state }
  }
}"""

MARK_READY = """
mutation($id: ID!) {
  markPullRequestReadyForReview(input: {pullRequestId: $id}) { pullRequest { isDraft } }
}"""

QUEUE_ENTRY = """
query($owner: String!, $name: String!, $number: Int!) {
  repository(owner: $owner, name: $name) {
    pullRequest(number: $number) { mergeQueueEntry { position state } }
  }
}"""


def graphql_url(gh: GitHubClient) -> str:
    """GitHub's GraphQL endpoint beside the REST base (Enterprise: /api/graphql)."""
    base = str(gh.base_url).rstrip("/")
    return base[: -len("/v3")] + "/graphql" if base.endswith("/api/v3") else base + "/graphql"


def pr_facts(pr: dict) -> dict:
    """What hangar keeps of a PR as GitHub answered it: number, state, head, base, and
    when it was answered."""
    return {"number": pr["number"], "state": pr.get("state"), "at": time.time(),
            "head": {"sha": pr["head"]["sha"]}, "base": {"ref": pr["base"]["ref"]}}


class RepoOps:
    def __init__(self, gh: GitHubClient, full_name: str, own_app_id: int | None = None):
        self.gh = gh
        self.full_name = full_name
        self.owner, self.name = full_name.split("/", 1)
        self.base = f"/repos/{full_name}"
        # hangar's App: only comments it made are hangar's (any bot can copy a marker).
        self.own_app_id = own_app_id

    # -- comments and reactions -----------------------------------------------------

    async def react(self, comment_id: int, content: str = "eyes") -> None:
        await self.gh.post(
            f"{self.base}/issues/comments/{comment_id}/reactions", data={"content": content}
        )

    async def find_own_comment(self, number: int, marker: str) -> dict | None:
        url = f"{self.base}/issues/{number}/comments?per_page={PAGE}"
        async for comment in self.gh.getiter(url):
            if marker in (comment.get("body") or "") and self.is_own(comment):
                return comment
        return None

    def is_own(self, comment: dict) -> bool:
        """Made by hangar's own App (GitHub names the App that made a comment)."""
        user = comment.get("user") or {}
        if user.get("type") != "Bot":
            return False
        if self.own_app_id is None:
            return True  # who hangar is was not said (a test's client): any bot's
        return (comment.get("performed_via_github_app") or {}).get("id") == self.own_app_id

    async def upsert_comment(
        self, number: int, marker: str, body: str, known_id: int | None = None,
        *, look_first: bool = True, create: bool = True,
    ) -> int | None:
        """Edit hangar's comment carrying `marker`, or post it once (app.creates). Without
        a known id it is looked for on the thread first, unless the caller knows it was
        never posted; with not `create`, one not found is left to another replica's post
        (None)."""
        body = render.fit_body(body)  # GitHub refuses a longer one: the comment would be lost
        comment_id = known_id
        if comment_id is None and look_first:
            found = await self.find_own_comment(number, marker)
            comment_id = found["id"] if found else None
        if comment_id is not None:
            try:
                await self.gh.patch(
                    f"{self.base}/issues/comments/{comment_id}", data={"body": body}
                )
                return comment_id
            except BadRequest as exc:
                if int(exc.status_code) != 404:
                    raise
        if not create:
            return None
        created = await self.gh.post(f"{self.base}/issues/{number}/comments", data={"body": body})
        return created["id"]

    async def upsert_thread_reply(self, pr_number: int, root: int, marker: str,
                                  body: str) -> int:
        """Edit hangar's reply carrying `marker` in the review thread whose first comment
        is `root`, or post it there once. (A review comment does not name the App that made
        it: hangar's is a bot's comment with hangar's marker.)"""
        body = render.fit_body(body)
        url = f"{self.base}/pulls/{pr_number}/comments?per_page={PAGE}"
        async for comment in self.gh.getiter(url):
            if (comment.get("in_reply_to_id") == root
                    and (comment.get("user") or {}).get("type") == "Bot"
                    and marker in (comment.get("body") or "")):
                try:
                    await self.gh.patch(f"{self.base}/pulls/comments/{comment['id']}",
                                        data={"body": body})
                    return comment["id"]
                except HTTPException as exc:
                    if int(exc.status_code) not in (403, 404):
                        raise
                break  # not hangar's to edit, or deleted since: a new reply
        made = await self.gh.post(f"{self.base}/pulls/{pr_number}/comments/{root}/replies",
                                  data={"body": body})
        return made["id"]

    async def permission(self, login: str) -> str:
        data = await get_or_none(self.gh, f"{self.base}/collaborators/{login}/permission")
        return (data or {}).get("permission", "none")

    async def protection(self, branch: str) -> dict | None:
        """The branch's classic protection; None when it has none (404 "Branch not
        protected") or the installation may not read it (no administration: read)."""
        try:
            return await self.gh.getitem(f"{self.base}/branches/{branch}/protection")
        except HTTPException as exc:
            status = int(exc.status_code)
            if status == 404 or (status == 403 and "not accessible" in str(exc)):
                return None
            raise  # a rate limit is no answer: the step is tried again

    async def team_member(self, team: str, login: str) -> bool:
        """Whether `login` is an active member of `@org/team` (a CODEOWNERS owner)."""
        org, _, slug = team.lstrip("@").partition("/")
        data = await get_or_none(self.gh, f"/orgs/{org}/teams/{slug}/memberships/{login}")
        return (data or {}).get("state") == "active"

    async def unresolved_threads(self, number: int) -> int | None:
        """How many review threads of the PR are unresolved (GraphQL only: REST does not
        say); None when GitHub would not answer."""
        count, after = 0, None
        try:
            while True:
                data = await self.gh.graphql(
                    UNRESOLVED_THREADS, endpoint=graphql_url(self.gh), owner=self.owner,
                    name=self.name, number=number, after=after)
                threads = data["repository"]["pullRequest"]["reviewThreads"]
                count += sum(1 for t in threads["nodes"] if not t["isResolved"])
                if not threads["pageInfo"]["hasNextPage"]:
                    return count
                after = threads["pageInfo"]["endCursor"]
        except (GitHubException, KeyError, TypeError):
            return None

    async def resolve_thread(self, number: int, root_comment_id: int) -> bool:
        """Resolve the review thread whose first comment is `root_comment_id` (GraphQL
        only: REST cannot); whether GitHub has it resolved now (False: no such thread).
        GitHub's refusal raises (gidgethub's GraphQL errors)."""
        after = None
        while True:
            data = await self.gh.graphql(
                THREAD_ROOTS, endpoint=graphql_url(self.gh), owner=self.owner, name=self.name,
                number=number, after=after)
            threads = data["repository"]["pullRequest"]["reviewThreads"]
            for thread in threads["nodes"]:
                first = (thread["comments"]["nodes"] or [{}])[0]
                if first.get("databaseId") != root_comment_id:
                    continue
                if thread["isResolved"]:
                    return True
                done = await self.gh.graphql(RESOLVE_THREAD, endpoint=graphql_url(self.gh),
                                             id=thread["id"])
                return bool(done["resolveReviewThread"]["thread"]["isResolved"])
            if not threads["pageInfo"]["hasNextPage"]:
                return False
            after = threads["pageInfo"]["endCursor"]

    async def enqueue(self, node_id: str, head_sha: str) -> dict:
        """Add the PR to its base's merge queue, the head pinned (GraphQL only); its entry
        ({position, state}). GitHub's refusal raises (gidgethub's GraphQL errors)."""
        data = await self.gh.graphql(ENQUEUE, endpoint=graphql_url(self.gh), id=node_id,
                                     head=head_sha)
        return data["enqueuePullRequest"]["mergeQueueEntry"]

    async def mark_ready(self, node_id: str) -> bool:
        """A draft PR becomes ready for review (GraphQL only: REST cannot); whether it is
        now. GitHub's refusal raises (gidgethub's GraphQL errors)."""
        data = await self.gh.graphql(MARK_READY, endpoint=graphql_url(self.gh), id=node_id)
        return not data["markPullRequestReadyForReview"]["pullRequest"]["isDraft"]

    async def queue_entry(self, number: int) -> dict | None:
        """The PR's merge queue entry ({position, state}), or None when it is in none."""
        data = await self.gh.graphql(QUEUE_ENTRY, endpoint=graphql_url(self.gh),
                                     owner=self.owner, name=self.name, number=number)
        return data["repository"]["pullRequest"]["mergeQueueEntry"]

    async def deployed(self, sha: str, environments: tuple[str, ...] | list[str]) -> list[str]:
        """The environments whose latest deployment of `sha` succeeded."""
        done = []
        for env in environments:
            url = f"{self.base}/deployments?sha={sha}&environment={quote(env)}&per_page=1"
            latest = await get_or_none(self.gh, url)
            if not latest:
                continue
            statuses = await get_or_none(
                self.gh, f"{self.base}/deployments/{latest[0]['id']}/statuses?per_page=1")
            if statuses and statuses[0].get("state") == "success":
                done.append(env)
        return done

    # -- git facts ------------------------------------------------------------------

    async def branch_sha(self, branch: str) -> str | None:
        data = await get_or_none(self.gh, f"{self.base}/git/ref/heads/{branch}")
        return data["object"]["sha"] if data else None

    async def compare(self, base: str, head: str) -> dict[str, Any]:
        data = await self.gh.getitem(f"{self.base}/compare/{base}...{head}")
        files = [
            {
                "filename": f["filename"],
                "status": f.get("status"),
                "additions": f.get("additions", 0),
                "deletions": f.get("deletions", 0),
                **({"previous_filename": f["previous_filename"]}
                   if f.get("previous_filename") else {}),
            }
            for f in (data.get("files") or [])[:MAX_COMPARE_FILES]
        ]
        commits = [
            {
                "sha": c["sha"],
                "message": ((c.get("commit") or {}).get("message") or "")[
                    :MAX_COMMIT_MESSAGE_CHARS],
                "author": ((c.get("commit") or {}).get("author") or {}).get("name"),
                # the GitHub accounts linked as author and committer (None: nobody's)
                "people": [{"login": user.get("login"), "type": user.get("type")}
                           for role in ("author", "committer")
                           if (user := c.get(role) or {}).get("login")],
                "verified": bool(((c.get("commit") or {}).get("verification") or {}).get(
                    "verified")),
                "parents": len(c.get("parents") or []) or 1,
            }
            for c in (data.get("commits") or [])[:MAX_COMPARE_COMMITS]
        ]
        return {
            "base_sha": (data.get("base_commit") or {}).get("sha"),
            "ahead_by": data.get("ahead_by", 0),
            "behind_by": data.get("behind_by", 0),
            "total_commits": data.get("total_commits", len(commits)),
            "commits": commits,
            "files": files,
            "truncated": len(files) >= MAX_COMPARE_FILES
            or data.get("total_commits", 0) > len(commits),
        }

    async def get_text(self, path: str, ref: str | None = None) -> str | None:
        url = f"{self.base}/contents/{path}" + (f"?ref={ref}" if ref else "")
        data = await get_or_none(self.gh, url)
        if not isinstance(data, dict) or data.get("type") != "file":  # a directory's list
            return None
        return base64.b64decode(data.get("content") or "").decode("utf-8", "replace")

    async def texts_at(self, sha: str, paths: list[str]) -> dict[str, str | None]:
        """Files at a commit, in one GraphQL query instead of a REST read each (each read
        of a file that is not there is charged too); None for one that is not a file there.
        A binary or truncated one is read through REST, as get_text reads it."""
        texts, _ = await self.texts_and_protection(sha, paths)
        return texts

    async def texts_and_protection(self, sha: str, paths: list[str], branch: str | None = None
                                   ) -> tuple[dict[str, str | None], bool | None]:
        """texts_at, and in the same query whether classic protection guards `branch`
        (`Ref.branchProtectionRule`): a REST read of a branch without it is a 404, charged
        every time. None when not asked, or the branch is not there."""
        names = ", ".join(f"$e{i}: String!" for i in range(len(paths)))
        fields = " ".join(f"f{i}: object(expression: $e{i}) {{ ... on Blob {{ text isBinary "
                          f"isTruncated }} }}" for i in range(len(paths)))
        asked: dict[str, str] = {}
        if branch is not None:
            names += ", $branch: String!"
            fields += " protection: ref(qualifiedName: $branch) { branchProtectionRule { id } }"
            asked["branch"] = f"refs/heads/{branch}"
        query = (f"query($owner: String!, $name: String!, {names}) "
                 f"{{ repository(owner: $owner, name: $name) {{ {fields} }} }}")
        data = await self.gh.graphql(
            query, endpoint=graphql_url(self.gh), owner=self.owner, name=self.name, **asked,
            **{f"e{i}": f"{sha}:{path}" for i, path in enumerate(paths)})
        found = data["repository"]
        ref = found.get("protection") if branch is not None else None
        protected = None if ref is None else ref.get("branchProtectionRule") is not None
        texts: dict[str, str | None] = {}
        for i, path in enumerate(paths):
            blob = found[f"f{i}"] or {}  # null: nothing there; no answer at all raises
            if "text" not in blob:  # not there, or a directory
                texts[path] = None
            elif blob["isBinary"] or blob["isTruncated"] or blob["text"] is None:
                texts[path] = await self.get_text(path, ref=sha)
            else:
                texts[path] = blob["text"]
        return texts, protected

    # -- pull requests --------------------------------------------------------------

    async def remove_label(self, number: int, name: str) -> None:
        """Take a label off an issue; one already gone is no error."""
        try:
            await self.gh.delete(f"{self.base}/issues/{number}/labels/{quote(name, safe='')}")
        except HTTPException as exc:
            if int(exc.status_code) != 404:
                raise

    async def find_pr(self, branch: str) -> dict | None:
        url = f"{self.base}/pulls?head={self.owner}:{branch}&state=all"
        async for pr in self.gh.getiter(url):
            # A fork's branch of the same name is never hangar's (hangar never pushes there).
            if pr["head"]["ref"] == branch and same_repository(pr):
                return pr
        return None

    async def create_pr(self, *, title: str, body: str, head: str, base: str,
                        draft: bool = False) -> dict:
        return await self.gh.post(f"{self.base}/pulls", data={
            "title": title, "body": render.fit_body(body), "head": head, "base": base,
            **({"draft": True} if draft else {})})

    async def update_pr(self, number: int, **fields: Any) -> dict:
        if fields.get("body") is not None:
            fields["body"] = render.fit_body(fields["body"])
        return await self.gh.patch(f"{self.base}/pulls/{number}", data=fields)

    async def get_pr(self, number: int) -> dict:
        return await self.gh.getitem(f"{self.base}/pulls/{number}")

    # -- check runs -----------------------------------------------------------------

    async def check_runs(self, sha: str, query: str = "filter=latest") -> list[dict]:
        """Every check run on a commit, all pages (a matrix CI has more than one page)."""
        url = f"{self.base}/commits/{sha}/check-runs?{query}&per_page={PAGE}"
        return [run async for run in self.gh.getiter(url, iterable_key="check_runs")]

    async def check_suites(self, sha: str) -> list[dict]:
        """Every check suite on a commit, all pages."""
        url = f"{self.base}/commits/{sha}/check-suites?per_page={PAGE}"
        return [suite async for suite in self.gh.getiter(url, iterable_key="check_suites")]

    async def statuses(self, sha: str) -> list[dict]:
        """The latest status of each context on a commit (the combined status), all pages."""
        url = f"{self.base}/commits/{sha}/status?per_page={PAGE}"
        return [status async for status in self.gh.getiter(url, iterable_key="statuses")]

    async def find_check_run(self, name: str, head_sha: str, external_id: str) -> dict | None:
        for run in await self.check_runs(head_sha, f"check_name={name}&filter=all"):
            if run.get("external_id") == external_id:
                return run
        return None

    async def upsert_check_run(
        self,
        name: str,
        head_sha: str,
        external_id: str,
        *,
        status: str,
        conclusion: str | None = None,
        output: dict | None = None,
        actions: list[dict] | None = None,
        details_url: str | None = None,
        known_id: int | None = None,
        look_first: bool = True,
        create: bool = True,
    ) -> int | None:
        """Update the check run, or create it once (app.creates). Without a known id it
        is looked for first, unless the caller knows it was never created; with not
        `create`, one not found is left to another replica's create (None)."""
        fields: dict[str, Any] = {"status": status}
        if conclusion:
            fields["conclusion"] = conclusion
        if output:
            fields["output"] = {key: render.fit_output(value) if key in ("summary", "text")
                                and isinstance(value, str) else value
                                for key, value in output.items()}
        if actions is not None:
            fields["actions"] = actions
        if details_url:
            fields["details_url"] = details_url
        check_id = known_id
        if check_id is None and look_first:
            found = await self.find_check_run(name, head_sha, external_id)
            check_id = found["id"] if found else None
        if check_id is not None:
            await self.gh.patch(f"{self.base}/check-runs/{check_id}", data=fields)
            return check_id
        if not create:
            return None
        created = await self.gh.post(
            f"{self.base}/check-runs",
            data={"name": name, "head_sha": head_sha, "external_id": external_id, **fields},
        )
        return created["id"]


async def read_ci(ops: RepoOps, sha: str) -> tuple[list[dict], list[dict]]:
    """Every check run (the latest of each) and every commit status on one commit, all
    pages of both."""
    return await ops.check_runs(sha), await ops.statuses(sha)
