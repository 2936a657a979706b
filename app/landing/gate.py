"""GitHub's merge decision, computed before hangar asks for the merge: what every rule that
applies to the base branch (all its rulesets' rules, and classic protection) asks of this
pull request, and what is still missing. Pure: the step reads the facts, this decides.

What is missing is either something a person can do (an approval, a code owner's approval,
resolving a conversation, a deployment, a check) — the land request waits for it — or
something hangar cannot satisfy at all (a merge method no rule allows, a branch only bypass
actors may update, a locked branch) — said once, with the rule's name.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from app.github import ci
from app.render.reasons import Why
from app.repoconfig import CODEOWNERS_PATHS as CODEOWNERS_PATHS  # landing reads them

MERGE_METHODS = ("squash", "merge", "rebase")


class Needs(StrEnum):
    """What a person must still do before GitHub takes the merge (worded by render)."""

    APPROVALS = "gate_approvals"
    CHANGES_REQUESTED = "gate_changes_requested"
    CODE_OWNER = "gate_code_owner"
    THREADS = "gate_threads"
    DEPLOYMENTS = "gate_deployments"


class Cannot(StrEnum):
    """What hangar cannot satisfy on this branch, whatever a person does on the PR."""

    NO_METHOD = "gate_no_method"
    UPDATE_RESTRICTED = "gate_update_restricted"
    LOCKED = "gate_locked"
    PUSH_RESTRICTED = "gate_push_restricted"
    CHECK_FROM_OTHER_APP = "gate_check_from_other_app"


@dataclass(frozen=True)
class RequiredCheck:
    context: str
    integration_id: int | None  # None: any App, and commit statuses, may report it
    source: str  # the ruleset's name, or "classic branch protection"


@dataclass(frozen=True)
class Gate:
    """What the base branch asks of a merge: the strictest of every rule that applies."""

    approvals: int = 0
    approvals_source: str = ""
    dismiss_stale: bool = False
    code_owners: str | None = None  # the rule asking for code owners' review, by name
    last_push: bool = False
    threads: str | None = None  # the rule asking for resolved conversations
    checks: tuple[RequiredCheck, ...] = ()
    strict: bool = False
    methods: tuple[str, ...] | None = None  # a ruleset's allowed_merge_methods (narrowed)
    methods_source: str = ""
    linear: str | None = None
    signatures: str | None = None
    deployments: tuple[str, ...] = ()
    deployments_source: str = ""
    merge_queue: dict | None = None
    merge_queue_source: str = ""
    update_restricted: str | None = None
    locked: str | None = None
    push_restricted: str | None = None  # classic protection's push restrictions
    pull_request: bool = False


CLASSIC = "classic branch protection"


def ruleset_name(rule: dict, names: Mapping[int, str]) -> str:
    ruleset_id = rule.get("ruleset_id")
    named = names.get(ruleset_id) if isinstance(ruleset_id, int) else None
    return named or (f"ruleset {ruleset_id}" if ruleset_id else "a ruleset")


def branch_gate(rules: list[dict], classic: dict | None = None,
              names: Mapping[int, str] | None = None, *, app_slug: str | None = None) -> Gate:
    """The gate from every active rule (every page of `GET /rules/branches/{b}`, repository
    and organization rulesets) and the branch's classic protection, if any. `names`: the
    rulesets' names by id, to name a rule."""
    names = names or {}
    found: dict[str, Any] = {"checks": []}

    def first(key: str, source: str) -> None:
        found.setdefault(key, source)

    for rule in rules:
        kind, params = rule.get("type"), rule.get("parameters") or {}
        source = ruleset_name(rule, names)
        if kind == "pull_request":
            found["pull_request"] = True
            count = int(params.get("required_approving_review_count") or 0)
            if count > found.get("approvals", 0):
                found["approvals"], found["approvals_source"] = count, source
            if params.get("dismiss_stale_reviews_on_push"):
                found["dismiss_stale"] = True
            if params.get("require_code_owner_review"):
                first("code_owners", source)
            if params.get("require_last_push_approval"):
                found["last_push"] = True
            if params.get("required_review_thread_resolution"):
                first("threads", source)
            allowed = params.get("allowed_merge_methods")
            if allowed:
                before = found.get("methods")
                found["methods"] = tuple(m for m in (before or MERGE_METHODS) if m in allowed)
                found["methods_source"] = source
        elif kind == "required_status_checks":
            for check in params.get("required_status_checks") or []:
                found["checks"].append(RequiredCheck(check["context"],
                                                     check.get("integration_id"), source))
            if params.get("strict_required_status_checks_policy"):
                found["strict"] = True
        elif kind == "required_linear_history":
            first("linear", source)
        elif kind == "required_signatures":
            first("signatures", source)
        elif kind == "required_deployments":
            envs = params.get("required_deployment_environments") or []
            found["deployments"] = tuple(dict.fromkeys([*found.get("deployments", ()), *envs]))
            found.setdefault("deployments_source", source)
        elif kind == "merge_queue":
            found.setdefault("merge_queue", params)
            first("merge_queue_source", source)
        elif kind == "update":
            first("update_restricted", source)
    if classic:
        reviews = classic.get("required_pull_request_reviews") or {}
        if reviews:
            found["pull_request"] = True
            count = int(reviews.get("required_approving_review_count") or 0)
            if count > found.get("approvals", 0):
                found["approvals"], found["approvals_source"] = count, CLASSIC
            found["dismiss_stale"] = found.get("dismiss_stale") or bool(
                reviews.get("dismiss_stale_reviews"))
            if reviews.get("require_code_owner_reviews"):
                first("code_owners", CLASSIC)
            found["last_push"] = found.get("last_push") or bool(
                reviews.get("require_last_push_approval"))
        status = classic.get("required_status_checks") or {}
        listed = {(c.get("context"), c.get("app_id")) for c in status.get("checks") or []}
        contexts = {c for c, _ in listed}
        listed |= {(c, None) for c in status.get("contexts") or [] if c not in contexts}
        for context, app_id in sorted(listed, key=lambda c: c[0] or ""):
            if context:
                found["checks"].append(RequiredCheck(
                    context, None if app_id in (None, -1) else app_id, CLASSIC))
        if status.get("strict"):
            found["strict"] = True
        if _enabled(classic, "required_linear_history"):
            first("linear", CLASSIC)
        if _enabled(classic, "required_signatures"):
            first("signatures", CLASSIC)
        if _enabled(classic, "required_conversation_resolution"):
            first("threads", CLASSIC)
        if _enabled(classic, "lock_branch"):
            first("locked", CLASSIC)
        restrictions = classic.get("restrictions")
        if restrictions and app_slug is not None and app_slug not in {
                a.get("slug") for a in restrictions.get("apps") or []}:
            first("push_restricted", CLASSIC)
    return Gate(**{k: v for k, v in found.items() if k != "checks"},
                checks=tuple(found["checks"]))


def _enabled(classic: dict, key: str) -> bool:
    value = classic.get(key)
    return bool(value.get("enabled")) if isinstance(value, dict) else bool(value)


# -- the methods GitHub will take ------------------------------------------------------


def usable_methods(gate: Gate, repo_allows: Collection[str], *,
                   commits_verified: bool = False, merge_commits_in_pr: bool = False
                   ) -> tuple[list[str], list[Why]]:
    """The merge methods that meet every rule, in hangar's order of liking, and why each
    other is out. A squash or merge commit GitHub makes is signed by GitHub; a rebase
    merge's commits are not, and a merge brings the PR's own (unsigned) commits along."""
    out: list[Why] = []
    usable = []
    for method in MERGE_METHODS:
        if method not in repo_allows:
            out.append(Why("repo_settings", method=method))
        elif gate.methods is not None and method not in gate.methods:
            out.append(Why("allowed_merge_methods", method=method, rule=gate.methods_source))
        elif gate.linear and method == "merge":
            out.append(Why("required_linear_history", method=method, rule=gate.linear))
        elif gate.linear and method == "rebase" and merge_commits_in_pr:
            out.append(Why("required_linear_history", method=method, rule=gate.linear))
        elif gate.signatures and (method == "rebase"
                                  or (method == "merge" and not commits_verified)):
            out.append(Why("required_signatures", method=method, rule=gate.signatures))
        else:
            usable.append(method)
    return usable, out


def pick_method(wished: str, usable: list[str]) -> str | None:
    if wished in usable:
        return wished
    return usable[0] if usable else None


# -- CODEOWNERS ------------------------------------------------------------------------


@dataclass(frozen=True)
class OwnerRule:
    pattern: str
    owners: tuple[str, ...]  # "@user", "@org/team" or an email; empty: nobody owns it


def parse_codeowners(text: str) -> list[OwnerRule]:
    """CODEOWNERS lines in order (the last match wins); comments and blank lines skipped."""
    parsed = []
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        parsed.append(OwnerRule(parts[0].replace("\\#", "#"), tuple(parts[1:])))
    return parsed


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """A CODEOWNERS pattern (gitignore's rules, without `!` and `[]`) as a regex on a path."""
    anchored = pattern.startswith("/") or "/" in pattern.rstrip("/")
    body = pattern.strip("/")
    directory = pattern.endswith("/")
    out, i = [], 0
    while i < len(body):
        if body.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if body.startswith("/**", i) and i + 3 == len(body):
            out.append("/.*")
            i += 3
            continue
        if body.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        char = body[i]
        out.append("[^/]*" if char == "*" else "[^/]" if char == "?" else re.escape(char))
        i += 1
    core = "".join(out)
    prefix = "" if anchored else "(?:.*/)?"
    suffix = "/.*" if directory else "(?:/.*)?"
    return re.compile(f"^{prefix}{core}{suffix}$")


def owners_of(path: str, rules: list[OwnerRule]) -> OwnerRule | None:
    """The rule that decides who owns `path` (the last matching line), or None."""
    for rule in reversed(rules):
        if _pattern_regex(rule.pattern).match(path):
            return rule
    return None


# -- the decision ----------------------------------------------------------------------


@dataclass
class Facts:
    """What GitHub says about the pull request now, read by the step."""

    author: str
    head_sha: str
    reviews: list[dict] = field(default_factory=list)  # REST's, chronological
    permissions: Mapping[str, str] = field(default_factory=dict)  # reviewer -> permission
    last_pusher: str | None = None
    changed_files: list[str] = field(default_factory=list)
    codeowners: str | None = None  # the base's CODEOWNERS text; None: there is none
    teams: Mapping[str, Collection[str]] = field(default_factory=dict)  # "@org/t" -> logins
    unresolved_threads: int | None = 0  # None: not known
    deployed: Collection[str] = ()  # environments the head was deployed to successfully


WRITE = ("admin", "maintain", "write")


def latest_reviews(facts: Facts) -> dict[str, dict]:
    """Each reviewer's latest decisive review (a comment changes nothing), as GitHub takes
    them."""
    latest: dict[str, dict] = {}
    for review in facts.reviews:
        state = (review.get("state") or "").upper()
        login = ((review.get("user") or {}).get("login") or "").lower()
        if login and state in ("APPROVED", "CHANGES_REQUESTED", "DISMISSED"):
            latest[login] = review
    return latest


def counted_approvers(gate: Gate, facts: Facts) -> list[str]:
    """Who GitHub counts as approving: writers, not the author, not (under the last-push
    rule) whoever pushed last; with stale reviews dismissed, only approvals of the head
    (a push dismisses the others on GitHub)."""
    out = []
    for login, review in latest_reviews(facts).items():
        if (review.get("state") or "").upper() != "APPROVED":
            continue
        if login == facts.author.lower() or facts.permissions.get(login) not in WRITE:
            continue
        if gate.last_push and facts.last_pusher and login == facts.last_pusher.lower():
            continue
        if gate.dismiss_stale and review.get("commit_id") != facts.head_sha:
            continue
        out.append(login)
    return out


def missing_for_merge(gate: Gate, facts: Facts) -> list[Why]:
    """What a person must still do (`Needs` codes) for GitHub to take the merge, in the
    order GitHub lists its refusals. Checks are landing's wait for CI; the method, the
    merge queue and the rules hangar cannot meet are `blockers`."""
    missing: list[Why] = []
    approvers = counted_approvers(gate, facts)
    if gate.pull_request:
        blocking = sorted(
            login for login, r in latest_reviews(facts).items()
            if (r.get("state") or "").upper() == "CHANGES_REQUESTED"
            and facts.permissions.get(login) in WRITE and login != facts.author.lower())
        if blocking:
            missing.append(Why(Needs.CHANGES_REQUESTED, users=blocking))
        if len(approvers) < gate.approvals:
            missing.append(Why(Needs.APPROVALS, missing=gate.approvals - len(approvers),
                               required=gate.approvals, rule=gate.approvals_source,
                               not_pusher=facts.last_pusher if gate.last_push else None))
    if gate.code_owners and facts.codeowners is not None:
        missing.extend(code_owner_needs(facts, approvers))
    if gate.threads and facts.unresolved_threads:
        missing.append(Why(Needs.THREADS, count=facts.unresolved_threads, rule=gate.threads))
    waiting = [env for env in gate.deployments if env not in facts.deployed]
    if waiting:
        missing.append(Why(Needs.DEPLOYMENTS, environments=waiting,
                           rule=gate.deployments_source))
    return missing


def code_owner_needs(facts: Facts, approvers: list[str]) -> list[Why]:
    """For each group of changed files with the same owners, one approval from one of them
    (a team owner: from one of its members)."""
    rules = parse_codeowners(facts.codeowners or "")
    groups: dict[tuple[str, ...], list[str]] = {}
    patterns: dict[tuple[str, ...], list[str]] = {}
    for path in facts.changed_files:
        rule = owners_of(path, rules)
        if rule is None or not rule.owners:
            continue
        groups.setdefault(rule.owners, []).append(path)
        patterns.setdefault(rule.owners, [])
        if rule.pattern not in patterns[rule.owners]:
            patterns[rule.owners].append(rule.pattern)
    approving = {a.lower() for a in approvers}
    needs = []
    for owners, paths in groups.items():
        if any(owner_approved(owner, approving, facts.teams) for owner in owners):
            continue
        needs.append(Why(Needs.CODE_OWNER, owners=list(owners), patterns=patterns[owners],
                         paths=paths))
    return needs


def owner_approved(owner: str, approving: set[str], teams: Mapping[str, Collection[str]]
                   ) -> bool:
    if "/" in owner:
        return bool(approving & {m.lower() for m in teams.get(owner, ())})
    return owner.lstrip("@").lower() in approving


def team_owners(codeowners: str | None, changed_files: list[str]) -> list[str]:
    """The teams (`@org/team`) that own a changed file: their members must be looked up."""
    rules = parse_codeowners(codeowners or "")
    found = []
    for path in changed_files:
        rule = owners_of(path, rules)
        for owner in rule.owners if rule else ():
            if owner.startswith("@") and "/" in owner and owner not in found:
                found.append(owner)
    return found


def blockers(gate: Gate, *, own_app_id: int | None, usable: list[str],
             methods_out: list[Why]) -> list[Why]:
    """What hangar cannot satisfy on this branch (each named with its rule)."""
    out = []
    if gate.update_restricted:
        out.append(Why(Cannot.UPDATE_RESTRICTED, rule=gate.update_restricted))
    if gate.locked:
        out.append(Why(Cannot.LOCKED, rule=gate.locked))
    if gate.push_restricted:
        out.append(Why(Cannot.PUSH_RESTRICTED, rule=gate.push_restricted))
    if not usable:
        out.append(Why(Cannot.NO_METHOD, reasons=[dict(w.facts, why=w.code)
                                                  for w in methods_out]))
    for check in gate.checks:
        if (ci.is_hangars_name(check.context) and check.integration_id is not None
                and check.integration_id != own_app_id):
            out.append(Why(Cannot.CHECK_FROM_OTHER_APP, check=check.context,
                           app_id=check.integration_id, rule=check.source))
    return out


# -- required checks, by their source ----------------------------------------------------


def required_results(gate: Gate, extra: list[str], check_runs: list[dict],
                     statuses: list[dict], *, own_app_id: int | None) -> ci.Results:
    """Each required check's outcome counting only the sources its rule allows: a check
    run from the rule's `integration_id` App (any App without one), a commit status only
    where the rule names no App. `extra`: names hangar's own policy adds (any source).
    Under hangar's names only hangar's own App counts, whatever the rule says."""
    wanted: dict[str, set[Any]] = {}
    for check in gate.checks:
        allowed = wanted.setdefault(check.context, {"any"})
        if check.integration_id is not None:
            # Two rules naming two Apps: each must be met; hangar waits for both.
            allowed.discard("any")
            allowed.add(check.integration_id)
    for name in extra:
        wanted.setdefault(name, {"any"})
    results = ci.read(check_runs, statuses, own_app_id=own_app_id)
    out = ci.Results(impostors=results.impostors)
    for name, allowed in wanted.items():
        if "any" in allowed:
            if name in results.outcomes:
                out.outcomes[name] = results.outcomes[name]
            continue
        per_app = []
        for app_id in allowed:
            runs = [r for r in check_runs if r.get("name") == name
                    and (r.get("app") or {}).get("id") == app_id]
            if not runs:
                break  # this App has not reported: the check is missing
            outcomes = [ci.of_check_run(r, strict=ci.is_hangars_name(name)) for r in runs]
            per_app.append(ci.Outcome.PASSED if ci.Outcome.PASSED in outcomes
                           else ci.worst(outcomes))
        else:
            found = ci.worst([o for o in per_app if o is not None])
            if found is not None:
                out.outcomes[name] = found
    return out


def required_names(gate: Gate, extra: list[str]) -> list[str]:
    return list(dict.fromkeys([*(c.context for c in gate.checks), *extra]))


def not_counted_sources(gate: Gate, check_runs: list[dict], statuses: list[dict]
                        ) -> list[tuple[str, str, Any, int]]:
    """Reports under a required name from a source its rule does not take (a person's
    commit status, another App's check run): (kind, name, who, the App the rule takes)."""
    found = []
    bound = {c.context: c.integration_id for c in gate.checks if c.integration_id is not None}
    for run in check_runs:
        app = (run.get("app") or {}).get("id")
        name = run.get("name")
        if name in bound and app != bound[name] and not ci.is_hangars_name(name):
            found.append(("check run", name, app, bound[name]))
    for status in statuses:
        name = status.get("context")
        if name in bound and not ci.is_hangars_name(name):
            found.append(("commit status", name, (status.get("creator") or {}).get("login"),
                          bound[name]))
    return list(dict.fromkeys(found))

