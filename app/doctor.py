"""`hangar doctor OWNER/REPO`: what protects the default branch, and what is missing."""

from __future__ import annotations

import asyncio
import sys

import aiohttp
from gidgethub import GitHubException

from app.github.client import AppAuth, get_or_none
from app.github.ops import RepoOps
from app.landing import (
    CODEOWNERS_PATHS,
    blockers,
    branch_gate,
    read_gate,
    read_protection,
    read_rules,
    usable_methods,
)
from app.render import landing as land_words
from app.settings import Settings, SettingsError

# What the installation must grant for hangar to push, open PRs, report checks and merge.
LANDING_PERMISSIONS = {"contents": "write", "pull_requests": "write", "checks": "write"}


def doctor_command(repo: str) -> int:
    if repo.count("/") != 1:
        print("hangar doctor: give the repository as OWNER/REPO", file=sys.stderr)
        return 2
    try:
        settings = Settings()
        settings.check_for_github()  # the doctor reads GitHub; it takes no webhooks
    except SettingsError as exc:
        print(f"hangar doctor: {exc}", file=sys.stderr)
        return 2
    try:
        lines = asyncio.run(inspect(settings, repo))
    except (aiohttp.ClientError, GitHubException, OSError) as exc:
        print(f"hangar doctor: could not read {repo} from {settings.github_url} "
              f"({type(exc).__name__}: {exc}); check HANGAR_GITHUB_URL, the App id and its "
              "private key", file=sys.stderr)
        return 2
    for ok, line in lines:
        print(f"{'ok     ' if ok else 'missing'}  {line}")
    return 0 if all(ok for ok, _ in lines) else 1


def permission_report(granted: dict[str, str]) -> tuple[bool, str]:
    """Whether the installation grants what landing needs, and what to grant if not."""
    lacking = [f"{name}: {level}" for name, level in LANDING_PERMISSIONS.items()
               if granted.get(name) not in (level, "admin")]
    if not lacking:
        return True, ("the App may push branches, open pull requests, write check runs "
                      "and merge (contents, pull_requests, checks: write)")
    return False, (f"the installation lacks {', '.join(lacking)}: grant it in the App's "
                   "settings, then accept the new permissions on the installation")


LEVELS = {"none": 0, "read": 1, "write": 2, "admin": 3}


def app_permission_report(granted: dict[str, str],
                          wanted: dict[str, str] | None = None) -> tuple[bool, str]:
    """Whether the App itself asks for every permission of hangar's App manifest."""
    from app.web.registration import load_app_manifest

    wanted = wanted if wanted is not None else load_app_manifest()["default_permissions"]
    lacking = [f"{name}: {level}" for name, level in sorted(wanted.items())
               if LEVELS.get(granted.get(name, "none"), 0) < LEVELS[level]]
    if not lacking:
        return True, ("the App's permissions cover hangar's manifest "
                      f"({', '.join(f'{k}: {v}' for k, v in sorted(wanted.items()))})")
    return False, (f"the App lacks {', '.join(lacking)} (manifests/github-app.json): add them "
                   "under the App's settings > Permissions, then accept them on each "
                   "installation")


async def inspect(settings: Settings, repo: str) -> list[tuple[bool, str]]:
    async with aiohttp.ClientSession() as session:
        auth = AppAuth(settings.github_app_id(), settings.private_key(),
                       api_url=settings.github_url, session=session)
        app_client = await auth.client_for_app()
        installation = await get_or_none(app_client, f"/repos/{repo}/installation",
                                         jwt=auth.jwt())
        if installation is None:
            return [(False, f"the App is not installed on {repo}: install it from the App's "
                            "public page and grant it this repository")]
        app_info = await app_client.getitem("/app", jwt=auth.jwt())
        gh = await auth.client(installation["id"])
        info = await gh.getitem(f"/repos/{repo}")
        branch = info["default_branch"]
        ops = RepoOps(gh, repo)
        gate = await read_gate(ops, branch, settings.app_id, classic=True)
        rules, rulesets = await read_rules(ops, branch)  # every page
        hangar_rules, _ = await read_rules(ops, HANGAR_PROBE)
        classic = await read_protection(ops, branch)
        codeowners = False
        for path in CODEOWNERS_PATHS:
            codeowners = codeowners or await ops.get_text(path, ref=branch) is not None
        header = (True, f"{repo}: default branch {branch}, installation {installation['id']}")
        names = {rs["id"]: rs.get("name") or str(rs["id"]) for rs in rulesets if rs.get("id")}
        return [header, app_permission_report(app_info.get("permissions") or {}),
                permission_report(installation.get("permissions") or {}), *gate,
                *merging_report(branch, info, rules, classic), pushes_report(hangar_rules),
                *gate_report(rules, classic, names, app_id=settings.app_id,
                             app_slug=app_info.get("slug"), repo=info,
                             codeowners_found=codeowners)]


HANGAR_PROBE = "hangar/doctor"  # a branch name like those hangar pushes, for its rules
# Rules that do not stand in the way of a push that creates or moves a branch.
HARMLESS_TO_PUSHES = {"deletion", "merge_queue"}


def merging_report(branch: str, repo: dict, rules: list[dict],
                   classic: dict | None) -> list[tuple[bool, str]]:
    """Merge queue, the merge methods GitHub will take, and signature rules on `branch`."""
    kinds = {r.get("type") for r in rules}
    lines: list[tuple[bool, str]] = []
    lines.append((True, f"{branch} takes changes through a merge queue: hangar adds approved "
                        "pull requests to it and reports hangar / verify on their merge "
                        "groups (the App needs merge_queues: write)")
                 if "merge_queue" in kinds else (True, f"no merge queue on {branch}"))
    flags = {"squash": "allow_squash_merge", "merge": "allow_merge_commit",
             "rebase": "allow_rebase_merge"}
    allowed = [m for m in flags if repo.get(flags[m], True)]
    for rule in rules:  # a ruleset's pull_request rule may narrow them further
        narrowed = (rule.get("parameters") or {}).get("allowed_merge_methods")
        if rule.get("type") == "pull_request" and narrowed:
            allowed = [m for m in allowed if m in narrowed]
    lines.append((True, f"merge methods allowed: {', '.join(allowed)} (set land.method in "
                        ".github/hangar.yml to one of them)") if allowed else
                 (False, "no merge method is allowed on this branch: allow squash, merge or "
                         "rebase in the repository settings and the ruleset"))
    signed = "required_signatures" in kinds or bool(
        ((classic or {}).get("required_signatures") or {}).get("enabled"))
    if signed:
        lines.append((True, f"commits on {branch} must be signed: GitHub signs the squash and "
                            "merge commits it makes, not a rebase merge, so keep land.method "
                            "at squash or merge"))
    return lines


def pushes_report(hangar_rules: list[dict]) -> tuple[bool, str]:
    """Whether rulesets would refuse hangar's pushes to its own `hangar/*` branches."""
    refusing = sorted({r.get("type", "?") for r in hangar_rules} - HARMLESS_TO_PUSHES)
    if not refusing:
        return True, "no rule refuses pushes to hangar/* branches"
    return False, (f"rules on hangar/* branches would refuse hangar's pushes "
                   f"({', '.join(refusing)}): exclude refs/heads/hangar/** from those "
                   "rulesets' conditions")


VERIFY = "hangar / verify"


def gate_report(rules: list[dict], classic: dict | None, names: dict[int, str], *,
                app_id: int | None, app_slug: str | None, repo: dict,
                codeowners_found: bool) -> list[tuple[bool, str]]:
    """What of the branch's gate hangar's App relies on, or cannot meet: a required
    `hangar / verify` bound to hangar's App, CODEOWNERS where code owners must review, and
    every rule hangar cannot satisfy (each named)."""
    gate = branch_gate(rules, classic, names, app_slug=app_slug)
    lines: list[tuple[bool, str]] = []
    verify = [c for c in gate.checks if c.context == VERIFY]
    unbound = [c for c in verify if c.integration_id is None]
    if unbound:
        lines.append((False, f"{VERIFY} is required by {unbound[0].source} without an "
                             "integration_id, so anyone who can post a commit status named "
                             f"{VERIFY} satisfies GitHub's gate for a person's merge: set its "
                             f"integration_id to hangar's App id ({app_id})"))
    elif verify:
        lines.append((True, f"{VERIFY} is required from hangar's App only (integration_id)"))
    if gate.code_owners and not codeowners_found:
        lines.append((False, f"{gate.code_owners} asks for code owners' review, but the "
                             "branch has no CODEOWNERS file (.github/CODEOWNERS, CODEOWNERS "
                             "or docs/CODEOWNERS): add one, or the rule asks nothing"))
    flags = {"squash": "allow_squash_merge", "merge": "allow_merge_commit",
             "rebase": "allow_rebase_merge"}
    usable, out = usable_methods(gate, [m for m, flag in flags.items() if repo.get(flag, True)])
    for why in blockers(gate, own_app_id=app_id, usable=usable, methods_out=out):
        lines.append((False, "hangar cannot land here: " + land_words.gate_needs([why])))
    return lines
