"""Small clients for the fakehub tests: an App's JWT, REST calls, git in a temp dir."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt


def app_jwt(
    app_id: int, private_key_pem: str, *, iat_offset: int = -60, lifetime: int = 540
) -> str:
    issued = int(time.time()) + iat_offset
    return jwt.encode({"iat": issued, "exp": issued + lifetime, "iss": str(app_id)},
                      private_key_pem, algorithm="RS256")


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: Any


def call(
    base: str, method: str, path: str, token: str | None = None, body: Any = None,
    scheme: str = "token",
) -> Response:
    """One REST call with urllib (blocking; fakehub runs on its own loop)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(base + path, data=data, method=method)
    request.add_header("Accept", "application/vnd.github+json")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"{scheme} {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            raw = resp.read()
            return Response(resp.status, dict(resp.headers), json.loads(raw) if raw else None)
    except urllib.error.HTTPError as err:
        raw = err.read()
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = raw.decode(errors="replace")
        return Response(err.code, dict(err.headers), parsed)


def git_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update({
        "HOME": str(home),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_AUTHOR_NAME": "Test Person",
        "GIT_AUTHOR_EMAIL": "person@example.com",
        "GIT_COMMITTER_NAME": "Test Person",
        "GIT_COMMITTER_EMAIL": "person@example.com",
    })
    return env


def git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["git", *args], cwd=cwd, env=git_env(cwd), capture_output=True,
                          text=True, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def clone(url: str, dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    git(dest.parent, "clone", "--quiet", url, dest.name)
    return dest


def commit_file(work: Path, name: str, content: str, message: str) -> str:
    path = work / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)
    git(work, "add", name)
    git(work, "commit", "--quiet", "-m", message)
    return git(work, "rev-parse", "HEAD").stdout.strip()
