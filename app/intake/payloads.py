"""The parts of GitHub's webhook payloads that hangar reads, validated at the edge.

Unknown fields are ignored. `check_delivery` runs before a delivery is answered: a
payload whose parts hangar reads have the wrong type or shape gets a 400 with the reason
and is stored as failed, alone, never in the way of the deliveries stored with it.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

# GitHub's ids fit in 64 bits, and so must everything hangar hands to SQLite.
Int64 = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]


class _Part(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Account(_Part):
    login: str
    id: Int64 | None = None
    type: str = "User"

    @property
    def is_bot(self) -> bool:
        return self.type == "Bot" or self.login.endswith("[bot]")


class Installation(_Part):
    id: Int64


class Repository(_Part):
    full_name: str
    name: str
    owner: Account
    clone_url: str | None = None
    default_branch: str = "main"
    private: bool = False


class Issue(_Part):
    number: Int64
    title: str = ""
    body: str | None = None
    user: Account
    pull_request: dict | None = None
    state: str = "open"
    comments: int | None = None  # in `issue_comment` created: those before this one


class Comment(_Part):
    id: Int64
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


class LabelPart(_Part):
    name: str


class IssuesEvent(_Part):
    action: str
    issue: Issue
    label: LabelPart | None = None
    repository: Repository
    installation: Installation | None = None
    sender: Account


class Ref(_Part):
    ref: str
    sha: str


class PullRequest(_Part):
    number: Int64
    title: str = ""
    body: str | None = None
    state: str = "open"
    merged: bool | None = None
    user: Account
    head: Ref
    base: Ref


class PullRequestEvent(_Part):
    action: str
    number: Int64
    pull_request: PullRequest
    repository: Repository
    installation: Installation | None = None
    sender: Account
    reason: str | None = None  # dequeued: why the merge queue removed it


class Review(_Part):
    id: Int64
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


class ReviewComment(_Part):
    id: int
    body: str | None = None
    user: Account
    in_reply_to_id: int | None = None  # a reply: the id of its thread's first comment


class ReviewCommentEvent(_Part):
    action: str
    comment: ReviewComment
    pull_request: PullRequest
    repository: Repository
    installation: Installation | None = None
    sender: Account


class CheckRunPart(_Part):
    id: Int64
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
    sender: Account | None = None


class StatusEvent(_Part):
    sha: str
    context: str
    state: str
    repository: Repository
    installation: Installation | None = None


class _Owner(_Part):
    login: str


class AccessEvent(_Part):
    """member, membership, organization, team, team_add: someone's access changed."""

    action: str | None = None  # team_add has none
    repository: Repository | None = None
    organization: _Owner | None = None

    @property
    def owner(self) -> str | None:
        """The account whose repositories it touches."""
        if self.repository is not None:
            return self.repository.full_name.split("/")[0]
        return self.organization.login if self.organization else None


class _RepositoryName(_Part):
    full_name: str | None = None


class Envelope(_Part):
    """What every delivery is filed under, whatever its event."""

    action: str | None = None
    repository: _RepositoryName | None = None
    installation: Installation | None = None


class RepositoryEvent(_Part):
    """repository renamed or transferred: `repository` is as it is now."""

    action: str
    repository: Repository
    changes: dict = {}
    installation: Installation | None = None


class _RepositoryRef(_Part):
    full_name: str


class InstallationRepositoriesEvent(_Part):
    action: str
    installation: Installation
    repositories_removed: list[_RepositoryRef] = []


class InstallationEvent(_Part):
    action: str
    installation: Installation


class RulesChangedEvent(_Part):
    """branch_protection_rule, repository_ruleset: a repository's gate changed."""

    action: str | None = None
    repository: _RepositoryName | None = None


class _PullNumber(_Part):
    number: Int64


class ReviewThreadEvent(_Part):
    """pull_request_review_thread resolved or unresolved."""

    action: str
    pull_request: _PullNumber
    repository: Repository
    installation: Installation | None = None


class _DeploymentPart(_Part):
    sha: str


class _MergeGroup(_Part):
    head_sha: str
    head_ref: str
    base_sha: str
    base_ref: str


class MergeGroupEvent(_Part):
    """merge_group checks_requested / destroyed."""

    action: str
    merge_group: _MergeGroup
    reason: str | None = None  # destroyed: merged, invalidated, dequeued
    repository: Repository
    installation: Installation | None = None


class DeploymentStatusEvent(_Part):
    deployment: _DeploymentPart
    repository: Repository
    installation: Installation | None = None


# The payload each handled (event, action) must parse as; None matches every action.
HANDLED: dict[tuple[str, str | None], type[_Part]] = {
    ("issue_comment", "created"): IssueCommentEvent,
    ("issues", "labeled"): IssuesEvent,
    ("pull_request", "synchronize"): PullRequestEvent,
    ("pull_request", "closed"): PullRequestEvent,
    ("pull_request", "reopened"): PullRequestEvent,
    ("pull_request", "ready_for_review"): PullRequestEvent,
    ("check_suite", "rerequested"): CheckSuiteEvent,
    ("repository", "renamed"): RepositoryEvent,
    ("repository", "transferred"): RepositoryEvent,
    ("installation_repositories", "removed"): InstallationRepositoriesEvent,
    ("installation", "new_permissions_accepted"): InstallationEvent,
    ("branch_protection_rule", None): RulesChangedEvent,
    ("repository_ruleset", None): RulesChangedEvent,
    ("pull_request_review_thread", None): ReviewThreadEvent,
    ("deployment_status", None): DeploymentStatusEvent,
    ("merge_group", None): MergeGroupEvent,
    ("pull_request", "dequeued"): PullRequestEvent,
    ("pull_request_review", "submitted"): PullRequestReviewEvent,
    ("pull_request_review", "dismissed"): PullRequestReviewEvent,
    ("pull_request_review_comment", "created"): ReviewCommentEvent,
    ("check_run", "completed"): CheckRunEvent,
    ("check_run", "requested_action"): CheckRunEvent,
    ("check_run", "rerequested"): CheckRunEvent,
    ("check_suite", "completed"): CheckSuiteEvent,
    ("status", None): StatusEvent,
    **{(event, None): AccessEvent
       for event in ("member", "membership", "organization", "team", "team_add")},
}


def check_delivery(event: str, payload: dict[str, Any]) -> tuple[Envelope, _Part | None]:
    """The delivery's envelope and the parts its handlers read (None for an event no handler
    reads); ValueError with the reason when hangar cannot read it."""
    try:
        envelope = Envelope.model_validate(payload)
        model = HANDLED.get((event, envelope.action)) or HANDLED.get((event, None))
        parts = model.model_validate(payload) if model is not None else None
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'payload'}: {e['msg']}" for e in exc.errors()[:3])
        raise ValueError(
            f"this {event} payload does not have the shape GitHub sends ({problems})") from None
    return envelope, parts


P = TypeVar("P", bound=_Part)


def parts_as(model: type[P], payload: dict[str, Any], parts: _Part | None) -> P:
    """The payload as `model`: the parts intake checked when it has them (a handler need not
    validate the payload again), else validated now (a delivery read back from the store)."""
    if type(parts) is model:
        return parts
    return model.model_validate(payload)
