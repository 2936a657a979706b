"""The parts of GitHub's webhook payloads that hangar reads, validated at the edge.

Unknown fields are ignored. `read_delivery` runs before a delivery is answered: a
payload whose parts hangar reads have the wrong type or shape gets a 400 with the reason
and is stored as failed, alone, never in the way of the deliveries stored with it.

It validates the JSON text in one pass (pydantic's parser builds no Python object for the
fields hangar does not read) and leaves the payload itself unread: handlers read the parts,
and the few that want more get the whole payload parsed the first time they look.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Annotated, Any, TypeVar

import orjson
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


class _InstallationAccount(_Part):
    login: str | None = None  # an enterprise has a slug instead


class Installation(_Part):
    id: Int64
    # Only `installation` events name it: their handler's log line says whose it is.
    account: _InstallationAccount | None = None


class _RepositoryName(_Part):
    full_name: str | None = None


class Envelope(_Part):
    """What every delivery is filed under, whatever its event. Every event's model is one,
    with these fields typed as that event has them: validating it files the delivery too."""

    action: str | None = None
    repository: _RepositoryName | None = None
    installation: Installation | None = None


class Repository(_RepositoryName):
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


class IssueCommentEvent(Envelope):
    action: str
    issue: Issue
    comment: Comment
    repository: Repository
    installation: Installation | None = None
    sender: Account


class LabelPart(_Part):
    name: str


class IssuesEvent(Envelope):
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


class PullRequestEvent(Envelope):
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


class PullRequestReviewEvent(Envelope):
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


class ReviewCommentEvent(Envelope):
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


class CheckRunEvent(Envelope):
    action: str
    check_run: CheckRunPart
    repository: Repository
    installation: Installation | None = None
    requested_action: dict | None = None
    sender: Account


class CheckSuiteEvent(Envelope):
    action: str
    check_suite: dict
    repository: Repository
    installation: Installation | None = None
    sender: Account | None = None


class StatusEvent(Envelope):
    sha: str
    context: str
    state: str
    repository: Repository
    installation: Installation | None = None


class _Owner(_Part):
    login: str


class AuthorizationRevokedEvent(Envelope):
    """github_app_authorization revoked: a person revoked their authorization of the App."""

    action: str
    sender: Account


class AccessEvent(Envelope):
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


class RepositoryEvent(Envelope):
    """repository renamed or transferred: `repository` is as it is now."""

    action: str
    repository: Repository
    changes: dict = {}
    installation: Installation | None = None


class _RepositoryRef(_Part):
    full_name: str


class InstallationRepositoriesEvent(Envelope):
    action: str
    installation: Installation
    repositories_added: list[_RepositoryRef] = []
    repositories_removed: list[_RepositoryRef] = []


class InstallationEvent(Envelope):
    """installation: its permissions accepted, it suspended, unsuspended or deleted."""

    action: str
    installation: Installation


class _NameChange(_Part):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    from_: str = Field(alias="from")


class _AccountChanges(_Part):
    login: _NameChange | None = None
    slug: _NameChange | None = None


class _RenamedAccount(_Part):
    login: str | None = None
    slug: str | None = None


class AccountRenamedEvent(Envelope):
    """installation_target renamed: the account the App is installed on has a new login
    (GitHub's schema makes `login` and `slug` each optional)."""

    action: str
    account: _RenamedAccount
    changes: _AccountChanges
    installation: Installation

    @property
    def old_login(self) -> str | None:
        change = self.changes.login or self.changes.slug
        return change.from_ if change else None

    @property
    def new_login(self) -> str | None:
        return self.account.login or self.account.slug


class RulesChangedEvent(Envelope):
    """branch_protection_rule, repository_ruleset: a repository's gate changed."""

    action: str | None = None
    repository: _RepositoryName | None = None


class _PullNumber(_Part):
    number: Int64


class ReviewThreadEvent(Envelope):
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


class MergeGroupEvent(Envelope):
    """merge_group checks_requested / destroyed."""

    action: str
    merge_group: _MergeGroup
    reason: str | None = None  # destroyed: merged, invalidated, dequeued
    repository: Repository
    installation: Installation | None = None


class DeploymentStatusEvent(Envelope):
    deployment: _DeploymentPart
    repository: Repository
    installation: Installation | None = None


# The payload each handled (event, action) must parse as; None matches every action.
HANDLED: dict[tuple[str, str | None], type[Envelope]] = {
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
    ("installation_repositories", "added"): InstallationRepositoriesEvent,
    ("installation", "new_permissions_accepted"): InstallationEvent,
    ("installation", "deleted"): InstallationEvent,
    ("installation", "suspend"): InstallationEvent,
    ("installation", "unsuspend"): InstallationEvent,
    ("installation_target", "renamed"): AccountRenamedEvent,
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
    ("github_app_authorization", "revoked"): AuthorizationRevokedEvent,
    **{(event, None): AccessEvent
       for event in ("member", "membership", "organization", "team", "team_add")},
}


# The one model an event's handled actions share, or Envelope alone for an event no
# handler reads: validating it reads the action and the parts in one pass.
_EVENT_MODEL: dict[str, type[Envelope]] = {}
for (_event, _action), _model in HANDLED.items():
    _EVENT_MODEL[_event] = _model if _EVENT_MODEL.get(_event, _model) is _model else Envelope


def _handled(event: str, action: str | None) -> type[Envelope] | None:
    return HANDLED.get((event, action)) or HANDLED.get((event, None))


class UnreadablePayload(ValueError):
    """A signed body that is no payload: stored as failed, with what was sent."""


_UNKNOWN: Any = object()
_ABSENT: Any = object()


class Payload(Mapping[str, Any]):
    """A delivery's payload, parsed from its JSON text the first time someone looks past
    its action (which the routers read to choose handlers, and intake knows already)."""

    __slots__ = ("_action", "_data", "raw")

    def __init__(self, raw: str, data: dict[str, Any] | None = None, *,
                 action: Any = _UNKNOWN):
        self.raw = raw
        self._data = data
        self._action = action

    @classmethod
    def of(cls, raw: str, envelope: Envelope) -> Payload:
        return cls(raw, action=envelope.action if "action" in envelope.model_fields_set
                   else _ABSENT)

    @property
    def parsed(self) -> bool:
        """Whether someone has looked past the action."""
        return self._data is not None

    @property
    def data(self) -> dict[str, Any]:
        if self._data is None:
            self._data = parse_json(self.raw)
        return self._data

    def _knows_action(self, key: object) -> bool:
        return key == "action" and self._data is None and self._action is not _UNKNOWN

    def __getitem__(self, key: str) -> Any:
        if self._knows_action(key):
            if self._action is _ABSENT:
                raise KeyError(key)
            return self._action
        return self.data[key]

    def __contains__(self, key: object) -> bool:
        if self._knows_action(key):
            return self._action is not _ABSENT
        return key in self.data

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)

    def __repr__(self) -> str:
        return f"Payload({self.data!r})"


def read_delivery(event: str, raw: str) -> tuple[Envelope, _Part | None, Payload]:
    """The delivery's envelope, the parts its handlers read (None for an event or action no
    handler reads) and its payload, from the payload's JSON text. UnreadablePayload when
    the text is no JSON object; ValueError with the reason when hangar cannot read it."""
    model = _EVENT_MODEL.get(event, Envelope)
    try:
        try:
            envelope = model.model_validate_json(raw)
        except ValidationError as exc:
            if any(e["type"] == "json_invalid" for e in exc.errors()):
                # Deeper than pydantic's parser goes, or a lone surrogate escape: the
                # verdict is json's, as for any payload.
                payload = parse_json(raw)
                return *check_delivery(event, payload), Payload(raw, payload)
            if model is Envelope:
                raise
            # The model of the event's handled actions: an action no handler reads
            # needs only its envelope to be sound.
            envelope = Envelope.model_validate_json(raw)
            if _handled(event, envelope.action) is not None:
                raise exc from None
            return envelope, None, Payload.of(raw, envelope)
        wanted = _handled(event, envelope.action)
        if wanted is None:
            return envelope, None, Payload.of(raw, envelope)
        parts = envelope if wanted is type(envelope) else wanted.model_validate_json(raw)
        return envelope, parts, Payload.of(raw, envelope)
    except ValidationError as exc:
        raise _shape_error(event, exc) from None


def kept(envelope: Envelope, parts: _Part | None, raw: str) -> str:
    """What hangar stores of a delivery it can read: the parts its handlers read (those
    GitHub sent), or the envelope alone for an event or action no handler reads, as JSON.

    That is what a delivery read back after a restart needs: `parts_as` checks it again
    and the handlers get the parts they would have got from the whole body. GitHub's body
    is 13 KB for a comment and more for a pull request; what hangar reads of it is a
    twentieth, and storing the rest was most of the cost of the write that must come
    before the 2xx. A text that does not survive the trip (a lone surrogate escape, which
    JSON allows and UTF-8 does not) is kept whole, as received."""
    try:
        return (parts or envelope).model_dump_json(by_alias=True, exclude_unset=True)
    except ValueError:  # pydantic_core.PydanticSerializationError
        return raw


def check_delivery(event: str, payload: Mapping[str, Any]) -> tuple[Envelope, _Part | None]:
    """The delivery's envelope and the parts its handlers read (None for an event no handler
    reads), from a parsed payload; ValueError with the reason when hangar cannot read it."""
    try:
        envelope = Envelope.model_validate(payload)
        model = _handled(event, envelope.action)
        parts = model.model_validate(payload) if model is not None else None
    except ValidationError as exc:
        raise _shape_error(event, exc) from None
    return envelope, parts


def _shape_error(event: str, exc: ValidationError) -> ValueError:
    errors = exc.errors()
    if errors[0]["loc"] == () and errors[0]["type"] == "model_type":
        return UnreadablePayload("the body must be a JSON object")
    problems = "; ".join(
        f"{'.'.join(map(str, e['loc'])) or 'payload'}: {e['msg']}" for e in errors[:3])
    return ValueError(
        f"this {event} payload does not have the shape GitHub sends ({problems})")


def parse_json(text: str) -> Any:
    """orjson reads a payload in a third of the time json takes. The few texts it refuses
    that json reads (NaN, a lone surrogate escape, 1e400) keep json's verdict, and a body
    both refuse gets json's words for why, as UnreadablePayload. An integer past 64 bits
    reads as a float: GitHub sends none, and the ids hangar reads are checked as 64-bit
    integers."""
    try:
        try:
            payload = orjson.loads(text)
        except orjson.JSONDecodeError:
            payload = json.loads(text)
    except ValueError as exc:  # also a 5,000-digit number
        raise UnreadablePayload(f"the body is not a webhook payload: {exc}") from None
    except RecursionError:
        raise UnreadablePayload("the body is nested too deeply to be a webhook payload") from None
    if not isinstance(payload, dict):
        raise UnreadablePayload("the body must be a JSON object")
    return payload


P = TypeVar("P", bound=_Part)


def parts_as(model: type[P], payload: Mapping[str, Any], parts: _Part | None) -> P:
    """The payload as `model`: the parts intake checked when it has them (a handler need not
    validate the payload again), else validated now (a delivery read back from the store)."""
    if type(parts) is model:
        return parts
    if isinstance(payload, Payload) and not payload.parsed:
        return model.model_validate_json(payload.raw)
    return model.model_validate(payload)
