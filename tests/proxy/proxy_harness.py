"""Helpers for the proxy tests: fakehub as upstream, the proxy on its own thread and loop,
and sandboxes as git sees them (a module name no other test directory uses)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import jwt
from aiohttp import web

from proxy import Grant, TokenRegistry, sandbox_git_files, setup_proxy

BRANCH = "hangar/12-ab3f"


class FakehubUpstream:
    """hangar's side of the contract, for tests: an installation token minted over REST."""

    def __init__(self, git_base: str, api_url: str, app_id: int, private_key_pem: str):
        self.git_base = git_base
        self.api_url = api_url
        self.app_id = app_id
        self.private_key_pem = private_key_pem
        self._tokens: dict[int, tuple[str, float]] = {}

    async def credentials(self, grant: Grant) -> tuple[str, str]:
        assert grant.installation_id is not None
        cached = self._tokens.get(grant.installation_id)
        if cached and cached[1] > time.time() + 60:
            return self.git_base, cached[0]
        now = int(time.time())
        app_jwt = jwt.encode(
            {"iat": now - 60, "exp": now + 540, "iss": str(self.app_id)},
            self.private_key_pem,
            algorithm="RS256",
        )
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                f"{self.api_url}/app/installations/{grant.installation_id}/access_tokens",
                headers={"Authorization": f"Bearer {app_jwt}", "Accept": "application/json"},
            ) as resp,
        ):
            resp.raise_for_status()
            token = (await resp.json())["token"]
        self._tokens[grant.installation_id] = (token, time.time() + 3000)
        return self.git_base, token


class ProxyThread:
    """An aiohttp app with only the proxy mounted, on 127.0.0.1, on its own loop."""

    def __init__(self, registry: TokenRegistry, upstream, max_push_bytes: int):
        self.app = web.Application()
        setup_proxy(self.app, registry=registry, upstream=upstream, max_push_bytes=max_push_bytes)
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self._runner = web.AppRunner(self.app, access_log=None)
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> ProxyThread:
        self._thread.start()

        async def start() -> int:
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
            return site._server.sockets[0].getsockname()[1]

        self.port = asyncio.run_coroutine_threadsafe(start(), self.loop).result(30)
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


def git(
    cwd: Path, *args: str, home: Path, check: bool = True, timeout: float = 120
) -> subprocess.CompletedProcess:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "LC_ALL": "C",
        "GIT_AUTHOR_NAME": "agent",
        "GIT_AUTHOR_EMAIL": "agent@example.com",
        "GIT_COMMITTER_NAME": "agent",
        "GIT_COMMITTER_EMAIL": "agent@example.com",
    }
    result = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    if check and result.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed:\n{result.stderr}")
    return result


@dataclass
class FakeSandbox:
    """A sandbox as git sees it: a HOME with hangar's git files, and a work tree."""

    sandbox_id: str
    token: str
    home: Path
    repo_dir: Path

    def git(
        self, *args: str, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess:
        cwd = self.repo_dir if self.repo_dir.exists() else self.home
        return git(cwd, *args, home=self.home, check=check, timeout=timeout)

    def commit(self, name: str = "work.txt", content: bytes | None = None) -> str:
        path = self.repo_dir / name
        path.write_bytes(content if content is not None else os.urandom(16).hex().encode())
        self.git("add", name)
        self.git("commit", "-q", "-m", f"change {name}")
        return self.git("rev-parse", "HEAD").stdout.strip()


@dataclass
class World:
    hub: object  # fakehub Driver
    registry: TokenRegistry
    proxy: ProxyThread
    repo: str
    installation_id: int
    tmp: Path
    upstream: FakehubUpstream

    def sandbox(
        self,
        sandbox_id: str,
        *,
        branch: str = BRANCH,
        allow_force: bool = True,
        clone: bool = True,
        token: str | None = None,
        proxy: ProxyThread | None = None,
    ) -> FakeSandbox:
        if token is None:
            token = self.registry.issue(
                sandbox_id,
                repo=self.repo,
                branch=branch,
                installation_id=self.installation_id,
                allow_force=allow_force,
            )
        home = self.tmp / sandbox_id / "home"
        home.mkdir(parents=True)
        files = sandbox_git_files(
            (proxy or self.proxy).url,
            sandbox_id,
            token,
            self.hub.git_url(self.repo),
            home=str(home),
        )
        for path, data in files.items():
            Path(path).write_bytes(data)
        (home / ".git-credentials").chmod(0o600)
        repo_dir = self.tmp / sandbox_id / "repo"
        sandbox = FakeSandbox(sandbox_id, token, home, repo_dir)
        if clone:
            git(
                self.tmp / sandbox_id, "clone", "-q", self.hub.git_url(self.repo), "repo", home=home
            )
        return sandbox
