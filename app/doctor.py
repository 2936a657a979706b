"""`hangar doctor OWNER/REPO`: what protects the default branch, and what is missing."""

from __future__ import annotations

import asyncio
import sys

import aiohttp
from gidgethub import GitHubException

from app.ghops import RepoOps
from app.github import AppAuth, get_or_none
from app.landing import read_gate
from app.settings import Settings, SettingsError

# What the installation must grant for hangar to push, open PRs, report checks and merge.
LANDING_PERMISSIONS = {"contents": "write", "pull_requests": "write", "checks": "write"}


def doctor_command(repo: str) -> int:
    if repo.count("/") != 1:
        print("hangar doctor: give the repository as OWNER/REPO", file=sys.stderr)
        return 2
    try:
        settings = Settings()
        settings.check_for_serving()
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


async def inspect(settings: Settings, repo: str) -> list[tuple[bool, str]]:
    async with aiohttp.ClientSession() as session:
        auth = AppAuth(settings.app_id, settings.private_key(), api_url=settings.github_url,
                       session=session)
        app_client = await auth.client_for_app()
        installation = await get_or_none(app_client, f"/repos/{repo}/installation",
                                         jwt=auth.jwt())
        if installation is None:
            return [(False, f"the App is not installed on {repo}: install it from the App's "
                            "public page and grant it this repository")]
        gh = await auth.client(installation["id"])
        info = await gh.getitem(f"/repos/{repo}")
        branch = info["default_branch"]
        gate = await read_gate(RepoOps(gh, repo), branch, settings.app_id)
        header = (True, f"{repo}: default branch {branch}, installation {installation['id']}")
        return [header, permission_report(installation.get("permissions") or {}), *gate]
