"""The parts of GitHub's webhook payloads that hangar reads, validated at the edge.

Unknown fields are ignored; a payload missing a field hangar needs fails validation
in the handler, which marks the delivery failed with the reason.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Part(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Account(_Part):
    login: str
    id: int | None = None
    type: str = "User"

    @property
    def is_bot(self) -> bool:
        return self.type == "Bot" or self.login.endswith("[bot]")


class Installation(_Part):
    id: int


class Repository(_Part):
    full_name: str
    name: str
    owner: Account
    clone_url: str | None = None
    default_branch: str = "main"
    private: bool = False


class Issue(_Part):
    number: int
    title: str = ""
    body: str | None = None
    user: Account
    pull_request: dict | None = None
    state: str = "open"


class Comment(_Part):
    id: int
    body: str | None = None
    user: Account
    author_association: str | None = None


class IssueCommentEvent(_Part):
    action: str
    issue: Issue
    comment: Comment
    repository: Repository
    installation: Installation | None = None
    sender: Account


class Ref(_Part):
    ref: str
    sha: str


class PullRequest(_Part):
    number: int
    title: str = ""
    body: str | None = None
    state: str = "open"
    merged: bool | None = None
    user: Account
    head: Ref
    base: Ref


class PullRequestEvent(_Part):
    action: str
    number: int
    pull_request: PullRequest
    repository: Repository
    installation: Installation | None = None
    sender: Account


class Review(_Part):
    id: int
    user: Account
    state: str
    commit_id: str | None = None
    body: str | None = None


class PullRequestReviewEvent(_Part):
    action: str
    review: Review
    pull_request: PullRequest
    repository: Repository
    installation: Installation | None = None
    sender: Account


class CheckRunPart(_Part):
    id: int
    name: str
    head_sha: str
    status: str
    conclusion: str | None = None
    external_id: str | None = None
    app: dict | None = None


class CheckRunEvent(_Part):
    action: str
    check_run: CheckRunPart
    repository: Repository
    installation: Installation | None = None
    requested_action: dict | None = None
    sender: Account


class CheckSuiteEvent(_Part):
    action: str
    check_suite: dict
    repository: Repository
    installation: Installation | None = None


class StatusEvent(_Part):
    sha: str
    context: str
    state: str
    repository: Repository
    installation: Installation | None = None
