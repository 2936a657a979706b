"""A recording GitHub of one repository and one pull request, for step tests.

gidgethub's tests fake GitHub by overriding one method, `_request`; so does this. It
answers what hangar's steps read from a small model of the repository (the PR, how far
its head is behind the base, reviews, permissions, checks, rules), answers each write as
GitHub would unless a case scripts another answer, and records every call, so a table
row can name its input and the writes it expects. It is no substitute for fakehub: the
end-to-end tests cross real HTTP and real git; this answers in microseconds.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from gidgethub.abc import GitHubAPI

HEAD = "a" * 40
BASE_SHA = "b" * 40
MERGED = "c" * 40
REPO = "acme/widgets"
PR_NUMBER = 7
OWN_APP = 1  # the settings fixture's app_id
CI_APP = 2


@dataclass
class Call:
    method: str
    path: str
    body: Any = None


def check(name: str, conclusion: str | None, *, app_id: int = CI_APP, run_id: int = 500,
          head_sha: str = HEAD, external_id: str = "", text: str | None = None) -> dict:
    """A check run as GitHub lists it (status completed unless conclusion is None)."""
    return {"id": run_id, "name": name, "head_sha": head_sha, "external_id": external_id,
            "status": "completed" if conclusion else "in_progress", "conclusion": conclusion,
            "app": {"id": app_id, "slug": "ci" if app_id == CI_APP else "hangar"},
            "output": {"title": f"{name}: {conclusion}", "summary": "", "text": text,
                       "annotations_count": 0}}


@dataclass
class RecordingGitHub(GitHubAPI):
    """One repository's GitHub: a model to read from, scripted answers for writes."""

    repo: str = REPO
    head: str = HEAD
    behind_by: int = 0
    ahead_by: int = 1
    pr_open: bool = True  # whether the PR exists yet (a first turn's collect opens it)
    pr_body: str = ""
    opened: int = 0  # PRs GitHub opened (a refused second one is not counted)
    merged: bool = False
    state: str = "open"
    draft: bool = False
    base_ref: str = "main"  # the PR's base branch as GitHub has it now
    reviews: list[dict] = field(default_factory=list)
    permissions: dict[str, str] = field(default_factory=dict)
    check_runs: list[dict] = field(default_factory=list)
    statuses: list[dict] = field(default_factory=list)
    rules: list[dict] = field(default_factory=list)
    rulesets: dict[int, dict] = field(default_factory=dict)
    files: list[dict] = field(default_factory=list)  # the PR's changed files
    base_files: list[dict] = field(default_factory=list)  # changed on the base since the fork
    contents: dict[str, str] = field(default_factory=dict)
    repo_settings: dict[str, Any] = field(default_factory=dict)
    # (method, path suffix) → answers (status, body), given in order; the last repeats
    script: dict[tuple[str, str], list[tuple[int, Any]]] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    comments: dict[int, dict] = field(default_factory=dict)
    own_checks: dict[int, dict] = field(default_factory=dict)
    threads: list[dict] = field(default_factory=list)  # the PR's review threads (GraphQL)
    queue_entry: dict | None = None  # the PR's merge queue entry (GraphQL)

    def __post_init__(self) -> None:
        super().__init__("hangar-tests")

    # -- what a test reads back ---------------------------------------------------

    def writes(self, *methods: str) -> list[Call]:
        wanted = methods or ("POST", "PATCH", "PUT", "DELETE")
        return [c for c in self.calls if c.method in wanted]

    def puts(self) -> list[tuple[str, dict]]:
        """The update-branch and merge calls: (path after the PR, body)."""
        prefix = f"/repos/{self.repo}/pulls/{PR_NUMBER}/"
        return [(c.path.removeprefix(prefix), c.body) for c in self.writes("PUT")]

    def land_check(self) -> dict | None:
        found = [c for c in self.own_checks.values() if c["name"] == "hangar / land"]
        return found[-1] if found else None

    # -- gidgethub's one I/O method ----------------------------------------------

    async def _request(self, method, url, headers, body=b""):
        path = url.removeprefix("https://api.github.com")
        data = json.loads(body) if body else None
        self.calls.append(Call(method, path, data))
        if path == "/graphql":  # hangar's GraphQL: threads, the merge queue
            query = data["query"]
            if "enqueuePullRequest" in query:
                self.queue_entry = {"position": 1, "state": "QUEUED"}
                answer = {"data": {"enqueuePullRequest": {"mergeQueueEntry": self.queue_entry}}}
            elif "markPullRequestReadyForReview" in query:
                self.draft = False
                answer = {"data": {"markPullRequestReadyForReview": {
                    "pullRequest": {"isDraft": False}}}}
            elif "mergeQueueEntry" in query:
                answer = {"data": {"repository": {"pullRequest": {
                    "mergeQueueEntry": self.queue_entry}}}}
            else:
                answer = {"data": {"repository": {"pullRequest": {"reviewThreads": {
                    "nodes": self.threads,
                    "pageInfo": {"hasNextPage": False, "endCursor": None}}}}}}
            return 200, {"content-type": "application/json"}, json.dumps(answer).encode()
        status, answer = self._scripted(method, path) or self._answer(method, path, data)
        raw = answer.encode() if isinstance(answer, str) else json.dumps(answer).encode()
        content_type = "text/plain" if isinstance(answer, str) else "application/json"
        return status, {"content-type": content_type}, raw

    async def sleep(self, seconds):  # pragma: no cover - gidgethub never retries here
        pass

    def _scripted(self, method: str, path: str) -> tuple[int, Any] | None:
        for (m, suffix), answers in self.script.items():
            if m == method and path.split("?")[0].endswith(suffix):
                return answers.pop(0) if len(answers) > 1 else answers[0]
        return None

    def _answer(self, method: str, path: str, data: Any) -> tuple[int, Any]:
        base = f"/repos/{self.repo}"
        if path.startswith("/orgs/") and "/teams/" in path:
            return 404, {"message": "Not Found"}  # nobody is on a team here
        assert path.startswith(base), path
        route, _, query = path.removeprefix(base).partition("?")
        for pattern, want, answer in self._routes():
            found = re.fullmatch(pattern, route)
            if found and want == method:
                return answer(*found.groups(), data=data, query=query)
        raise AssertionError(f"the recording GitHub has no answer for {method} {path}")

    def _routes(self):
        pr = rf"/pulls/{PR_NUMBER}"
        return [
            ("", "GET", self._repository),
            ("/pulls", "GET", lambda data, query: (
                200, [self._pull(data=None, query="")[1]] if self.pr_open else [])),
            ("/pulls", "POST", self._open_pull),
            (pr, "GET", self._pull),
            (pr, "PATCH", self._edit_pull),
            (rf"{pr}/reviews", "GET", lambda **_: (200, self.reviews)),
            (rf"{pr}/commits", "GET", lambda **_: (200, [])),
            (rf"{pr}/files", "GET", lambda **_: (200, self.files)),
            (rf"{pr}/update-branch", "PUT", lambda **_: (202, {"message": "Updating"})),
            (rf"{pr}/merge", "PUT", lambda **_: (200, {"sha": MERGED, "merged": True})),
            (r"/compare/([^.]+)\.\.\.(.+)", "GET", self._compare),
            (r"/contents/(.+)", "GET", self._content),
            (r"/collaborators/([^/]+)/permission", "GET",
             lambda login, **_: (200, {"permission": self.permissions.get(login, "none")})),
            (r"/rules/branches/(.+)", "GET", lambda _branch, **_: (200, self.rules)),
            (r"/rulesets/(\d+)", "GET", self._ruleset),
            (r"/branches/(.+)/protection", "GET",
             lambda _branch, **_: (404, {"message": "Branch not protected"})),
            (r"/git/ref/heads/(.+)", "GET",
             lambda _branch, **_: (200, {"object": {"sha": self.head}})),
            (r"/commits/([0-9a-f]+)/check-runs", "GET", self._list_checks),
            (r"/commits/([0-9a-f]+)/check-suites", "GET",
             lambda _sha, **_: (200, {"total_count": 0, "check_suites": []})),
            (r"/commits/([0-9a-f]+)/status", "GET",
             lambda _sha, **_: (200, {"state": "success", "statuses": self.statuses})),
            (r"/check-runs", "POST", self._create_check),
            (r"/check-runs/(\d+)", "PATCH", self._update_check),
            (r"/issues/(\d+)/comments", "GET", self._list_comments),
            (r"/issues/(\d+)/comments", "POST", self._create_comment),
            (r"/issues/comments/(\d+)", "PATCH", self._edit_comment),
        ]

    # -- reads ------------------------------------------------------------------

    def _repository(self, data, query):
        return 200, {"full_name": self.repo, "default_branch": "main", **self.repo_settings}

    def _pull(self, data, query):
        same = {"id": 100, "full_name": self.repo}
        return 200, {
            "number": PR_NUMBER, "node_id": "PR_node7", "title": "Fix add()",
            "body": self.pr_body, "state": self.state, "draft": self.draft,
            "merged": self.merged, "merge_commit_sha": MERGED if self.merged else None,
            "changed_files": len(self.files),
            "head": {"sha": self.head, "ref": "hangar/1-abc", "repo": same},
            "base": {"sha": BASE_SHA, "ref": self.base_ref, "repo": same},
        }

    def _compare(self, base, head, data, query):
        if base == self.head:  # head...base: what the base changed
            return 200, {"behind_by": 0, "ahead_by": self.behind_by, "files": self.base_files,
                         "commits": [], "total_commits": self.behind_by,
                         "base_commit": {"sha": self.head}}
        return 200, {"behind_by": self.behind_by, "ahead_by": self.ahead_by,
                     "files": self.files, "commits": [], "total_commits": 0,
                     "base_commit": {"sha": BASE_SHA}}

    def _content(self, path, data, query):
        import base64

        if path not in self.contents:
            return 404, {"message": "Not Found"}
        text = base64.b64encode(self.contents[path].encode()).decode()
        return 200, {"type": "file", "content": text, "encoding": "base64"}

    def _ruleset(self, ruleset_id, data, query):
        found = self.rulesets.get(int(ruleset_id))
        return (200, found) if found else (404, {"message": "Not Found"})

    def _list_checks(self, sha, data, query):
        runs = [c for c in [*self.check_runs, *self.own_checks.values()]
                if c["head_sha"] == sha]
        name = re.search(r"check_name=([^&]+)", query)
        if name:
            runs = [c for c in runs if c["name"] == name.group(1).replace("%20", " ")]
        return 200, {"total_count": len(runs), "check_runs": runs}

    def _list_comments(self, number, data, query):
        return 200, [c for c in self.comments.values() if c["number"] == int(number)]

    # -- writes GitHub would accept ---------------------------------------------

    def _open_pull(self, data, query):
        if self.pr_open:  # GitHub's answer to a second PR for the same branch
            return 422, {"message": "Validation Failed", "errors": [{
                "resource": "PullRequest", "code": "custom",
                "message": f"A pull request already exists for acme:{data['head']}."}]}
        self.pr_open, self.pr_body = True, data["body"]
        self.draft = bool(data.get("draft"))
        self.opened += 1
        return 201, self._pull(data=None, query="")[1]

    def _edit_pull(self, data, query):
        self.pr_body = data.get("body", self.pr_body)
        return 200, self._pull(data=None, query="")[1]

    def _create_check(self, data, query):
        run = {**check(data["name"], data.get("conclusion"), app_id=OWN_APP,
                       run_id=900 + len(self.own_checks), head_sha=data["head_sha"],
                       external_id=data.get("external_id", "")), **data}
        self.own_checks[run["id"]] = run
        return 201, run

    def _update_check(self, check_id, data, query):
        self.own_checks[int(check_id)].update(data)
        return 200, self.own_checks[int(check_id)]

    def _create_comment(self, number, data, query):
        comment = {"id": 3000 + len(self.comments), "number": int(number), "body": data["body"],
                   "user": {"login": "hangar[bot]", "type": "Bot"},
                   "performed_via_github_app": {"id": OWN_APP, "slug": "hangar"}}
        self.comments[comment["id"]] = comment
        return 201, comment

    def _edit_comment(self, comment_id, data, query):
        self.comments[int(comment_id)]["body"] = data["body"]
        return 200, self.comments[int(comment_id)]
