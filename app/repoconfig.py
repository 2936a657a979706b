"""A repository's `.github/hangar.yml`: which environment, and the land and auto-fix policy.

A malformed file never stops work: the defaults apply and each problem is reported with
the file, the line and the fix.
"""

from __future__ import annotations

from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

CONFIG_PATH = ".github/hangar.yml"
# Where GitHub looks for CODEOWNERS, in its order: the first one found is the one it uses.
CODEOWNERS_PATHS = (".github/CODEOWNERS", "CODEOWNERS", "docs/CODEOWNERS")

DEFAULT_SENSITIVE = [".github/**", "Dockerfile*", "deploy/**", "*.pem"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AutoLandWhen(_Strict):
    """The one class of change auto-land may land without a person: all of it holds."""

    verification: Literal["pass"] = "pass"  # hangar / verify passed on the head
    checks: Literal["pass", "ignore"] = "pass"  # every check on the head passed
    max_diff_lines: int = Field(150, ge=1)  # lines added plus deleted
    only_paths: list[str] = Field(default_factory=lambda: ["docs/**", "tests/**"])


class AutoLand(_Strict):
    enabled: bool = False
    when: AutoLandWhen = AutoLandWhen()


class LandPolicy(_Strict):
    # False: nothing merges (read from the base at each look, not kept with a request).
    enabled: bool = True
    method: Literal["merge", "squash", "rebase"] = "squash"
    update: Literal["merge", "rebase"] = "merge"  # how a branch behind its base is updated
    draft_pr: bool = True  # open PRs as drafts; ready for review once verification passed
    required_checks: list[str] = []
    forbid_self_approval: bool = True
    required_approvals: int = Field(1, ge=1, le=10)
    # An approval of the head before hangar's own clean update still counts after it.
    approval_survives_clean_update: bool = False
    ci_timeout_minutes: float = Field(45, gt=0)
    sensitive_paths: list[str] = Field(default_factory=lambda: list(DEFAULT_SENSITIVE))
    sensitive_extra_approvals: int = Field(0, ge=0, le=10)
    # Above this many changed lines, landing also needs `/hangar land --ack-large`.
    max_diff_lines: int = Field(2000, ge=1)
    # An approved request that has not landed this long after its approval expires.
    approval_ttl_minutes: float = Field(240, gt=0)
    require_verification: bool = True
    # Asked for a review (besides the changed files' code owners) once a PR is verified:
    # people (`login`) or teams (`org/team`).
    reviewers: list[str] = []
    auto_land: AutoLand = AutoLand()


class AutofixPolicy(_Strict):
    enabled: bool = True
    max_turns: int = Field(2, ge=0, le=10)
    quiet_minutes: float = Field(10, ge=0)  # no turn while a human pushed this recently


class TriggerPolicy(_Strict):
    # A label that, added to an issue by a person with write access, starts a job.
    label: str | None = Field(None, min_length=1, max_length=50)


class RankWeights(_Strict):
    """The seed's weights, its alternative to the fixed order: each eligible attempt
    scores the sum of weight times value, and the higher score ranks first."""

    ci: float = 0  # value 1 when the repository's CI passed on the head, else 0
    verification: float = 0  # 1 when hangar's verification passed, 0.5 on a retry, else 0
    diff_lines: float = 0  # lines added plus deleted (a negative weight prefers fewer)
    files: float = 0  # files changed
    duration: float = 0  # the run's minutes


class FanoutPolicy(_Strict):
    # Which attempts of `/hangar try N` auto-fix may work on: only the picked one, or also
    # the one ranked first once the ranking is final.
    autofix: Literal["picked", "ranked_first"] = "picked"
    # Rank the eligible attempts by a weighted score instead of the fixed order.
    weights: RankWeights | None = None
    # Once every attempt has ended, wait at most this long for the repository's own CI on
    # their heads before ranking (the seed's ci_wait_minutes); 0 ranks at once. The
    # operator's HANGAR_GRADING_WAIT_SECONDS bounds it: a repository may only shorten it.
    ci_wait_minutes: int | None = Field(None, ge=0, le=1440)


class ReviewPolicy(_Strict):
    # Resolve a review thread once hangar's reply says the turn asked there was verified.
    resolve_threads: bool = False
    # A writer's "changes requested" review on a hangar PR starts one turn for its comments.
    act_on_changes_requested: bool = False


class RepoConfig(_Strict):
    environment: str | dict[str, Any] | None = None
    # Added to every prompt for this repository: a short text, or the path of a file in it
    # (one line ending in .md or .txt).
    instructions: str | None = Field(None, max_length=4000)
    land: LandPolicy = LandPolicy()
    autofix: AutofixPolicy = AutofixPolicy()
    trigger: TriggerPolicy = TriggerPolicy()
    fanout: FanoutPolicy = FanoutPolicy()
    review: ReviewPolicy = ReviewPolicy()


_FIXES = {
    "literal_error": "use one of the allowed values",
    "extra_forbidden": "remove it, or check its spelling against the docs",
    "bool_type": "write true or false",
    "bool_parsing": "write true or false",
    "int_parsing": "write a whole number",
    "float_parsing": "write a number",
    "greater_than": "use a larger number",
    "greater_than_equal": "use a larger number",
    "less_than_equal": "use a smaller number",
    "list_type": "write a list, e.g. [test, lint]",
    "model_type": "write a mapping of its keys, e.g. {enabled: true}",
    "model_attributes_type": "write a mapping of its keys, e.g. {enabled: true}",
    "string_type": "write text, e.g. docs/**",
}


def parse_repo_config(text: str | None, path: str = CONFIG_PATH) -> tuple[RepoConfig, list[str]]:
    """The effective config and the problems found; defaults stand in for what is wrong."""
    if not text or not text.strip():
        return RepoConfig(), []
    try:
        root = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        return RepoConfig(), [f"{path}{line}: this is not valid YAML ({problem}); "
                              "hangar uses its defaults until it is fixed"]
    if data is None:
        return RepoConfig(), []
    if not isinstance(data, dict):
        return RepoConfig(), [f"{path}:1: the file must be a mapping with keys "
                              "environment, land, autofix, fanout"]
    problems: list[str] = []
    for _ in range(10):
        try:
            return RepoConfig.model_validate(data), problems
        except ValidationError as exc:
            for error in exc.errors():
                loc = tuple(error["loc"])
                at = _line_of(root, loc)
                field = ".".join(str(p) for p in loc)
                fix = _FIXES.get(error["type"], "see the keys in docs/landing.md")
                problems.append(
                    f"{path}:{at}: {field}: {error['msg']} — {fix}; the default applies"
                )
                _drop(data, loc)
    return RepoConfig(), problems


def _drop(data: dict, loc: tuple) -> None:
    node: Any = data
    for part in loc[:-1]:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        else:
            return
    if isinstance(node, dict):
        node.pop(loc[-1], None)
    elif isinstance(node, list) and isinstance(loc[-1], int) and loc[-1] < len(node):
        node.pop(loc[-1])
    if len(loc) > 1 and isinstance(node, list):
        _drop(data, loc[:-1])


def _line_of(node: yaml.Node | None, loc: tuple) -> int:
    line = node.start_mark.line + 1 if node is not None else 1
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            match = next((v for k, v in node.value if k.value == part), None)
            if match is None:
                key = next((k for k, _ in node.value if k.value == part), None)
                return key.start_mark.line + 1 if key is not None else line
            node = match
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(
            node.value
        ):
            node = node.value[part]
        else:
            return line
        line = node.start_mark.line + 1
    return line
