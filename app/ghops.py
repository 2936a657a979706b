"""hangar's operations on one repository, each safe to repeat.

Every create first looks for what an earlier attempt may already have made: a comment
by its hidden marker, a PR by its head branch, a check run by name and external id.
"""

from __future__ import annotations

import base64
from typing import Any

from gidgethub import BadRequest

from app.github import GitHubClient, get_or_none

MAX_COMPARE_FILES = 300  # GitHub's compare lists at most 300 files


class RepoOps:
    def __init__(self, gh: GitHubClient, full_name: str):
        self.gh = gh
        self.full_name = full_name
        self.owner, self.name = full_name.split("/", 1)
        self.base = f"/repos/{full_name}"

    # -- comments and reactions -----------------------------------------------------

    async def react(self, comment_id: int, content: str = "eyes") -> None:
        await self.gh.post(
            f"{self.base}/issues/comments/{comment_id}/reactions", data={"content": content}
        )

    async def find_own_comment(self, number: int, marker: str) -> dict | None:
        async for comment in self.gh.getiter(f"{self.base}/issues/{number}/comments"):
            user = comment.get("user") or {}
            if marker in (comment.get("body") or "") and user.get("type") == "Bot":
                return comment
        return None

    async def upsert_comment(
        self, number: int, marker: str, body: str, known_id: int | None = None
    ) -> int:
        """Edit hangar's comment carrying `marker`, or post it once."""
        comment_id = known_id
        if comment_id is None:
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
        created = await self.gh.post(f"{self.base}/issues/{number}/comments", data={"body": body})
        return created["id"]

    async def permission(self, login: str) -> str:
        data = await get_or_none(self.gh, f"{self.base}/collaborators/{login}/permission")
        return (data or {}).get("permission", "none")

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
            }
            for f in data.get("files") or []
        ]
        commits = [
            {
                "sha": c["sha"],
                "message": (c.get("commit") or {}).get("message", ""),
                "author": ((c.get("commit") or {}).get("author") or {}).get("name"),
            }
            for c in data.get("commits") or []
        ]
        return {
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
        if not data or data.get("type") != "file":
            return None
        return base64.b64decode(data.get("content") or "").decode("utf-8", "replace")

    # -- pull requests --------------------------------------------------------------

    async def find_pr(self, branch: str) -> dict | None:
        url = f"{self.base}/pulls?head={self.owner}:{branch}&state=all"
        async for pr in self.gh.getiter(url):
            if pr["head"]["ref"] == branch:
                return pr
        return None

    async def create_pr(self, *, title: str, body: str, head: str, base: str) -> dict:
        return await self.gh.post(
            f"{self.base}/pulls", data={"title": title, "body": body, "head": head, "base": base}
        )

    async def update_pr(self, number: int, **fields: Any) -> dict:
        return await self.gh.patch(f"{self.base}/pulls/{number}", data=fields)

    async def get_pr(self, number: int) -> dict:
        return await self.gh.getitem(f"{self.base}/pulls/{number}")

    # -- check runs -----------------------------------------------------------------

    async def find_check_run(self, name: str, head_sha: str, external_id: str) -> dict | None:
        url = f"{self.base}/commits/{head_sha}/check-runs?check_name={name}&filter=all"
        data = await self.gh.getitem(url)
        for run in data.get("check_runs", []):
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
    ) -> int:
        fields: dict[str, Any] = {"status": status}
        if conclusion:
            fields["conclusion"] = conclusion
        if output:
            fields["output"] = output
        if actions is not None:
            fields["actions"] = actions
        if details_url:
            fields["details_url"] = details_url
        check_id = known_id
        if check_id is None:
            found = await self.find_check_run(name, head_sha, external_id)
            check_id = found["id"] if found else None
        if check_id is not None:
            await self.gh.patch(f"{self.base}/check-runs/{check_id}", data=fields)
            return check_id
        created = await self.gh.post(
            f"{self.base}/check-runs",
            data={"name": name, "head_sha": head_sha, "external_id": external_id, **fields},
        )
        return created["id"]
