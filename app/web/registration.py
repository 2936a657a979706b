"""Registering hangar's GitHub App from its manifest (GitHub's App manifest flow).

The pure parts live here: the manifest with hangar's address filled in, where on GitHub
to post it, the state that ties GitHub's redirect to the page that started it, and the
files `hangar serve` reads afterwards. The pages are in `app/web/setup.py`.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import yaml

MANIFEST_PATH = Path(__file__).resolve().parents[2] / "manifests" / "github-app.json"
# Written into the data directory; Settings read it (below HANGAR_* and HANGAR_CONFIG).
REGISTRATION_FILE = "github-app.yaml"
KEY_FILE = "github-app.private-key.pem"
# GitHub accepts a manifest code for one hour; a state is good for as long.
STATE_TTL_SECONDS = 3600
MAX_PENDING = 200


def load_app_manifest() -> dict[str, Any]:
    """hangar's App manifest: the source of truth for its permissions and events."""
    return json.loads(MANIFEST_PATH.read_text())


def manifest_for(public_url: str, name: str | None = None) -> dict[str, Any]:
    """The manifest with hangar's own address as homepage, webhook and redirect."""
    base = public_url.rstrip("/")
    manifest = load_app_manifest()
    manifest["url"] = base
    manifest["hook_attributes"] = {"url": f"{base}/webhook", "active": True}
    manifest["redirect_url"] = f"{base}/setup"
    manifest["callback_urls"] = [f"{base}/login/github/callback"]  # sign-in to hangar's pages
    if name:
        manifest["name"] = name
    return manifest


def web_and_api_urls(github: str) -> tuple[str, str]:
    """(web URL, REST base) for github.com, a GitHub Enterprise Server or fakehub URL."""
    given = github.strip() or "https://github.com"
    parts = urlsplit(given if "://" in given else f"https://{given}")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{github!r} is not a GitHub address: give https://github.com or "
                         "your GitHub Enterprise Server's URL, e.g. https://github.example.com")
    if parts.netloc in ("github.com", "api.github.com"):
        return "https://github.com", "https://api.github.com"
    web = f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/').removesuffix('/api/v3')}"
    return web, f"{web}/api/v3"


def checked_public_url(url: str) -> str:
    """hangar's address as GitHub will call it: http(s), a host, no query."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query:
        raise ValueError(f"{url!r} is not where GitHub can reach hangar: give its public "
                         "address, e.g. https://hangar.example.com")
    return url.strip().rstrip("/")


def new_app_url(web_url: str, organization: str | None, state: str) -> str:
    """Where the manifest form is posted: the person's or the organization's new-App page."""
    owner = f"/organizations/{quote(organization, safe='')}" if organization else ""
    return f"{web_url}{owner}/settings/apps/new?state={quote(state, safe='')}"


def install_url(html_url: str) -> str:
    return f"{html_url.rstrip('/')}/installations/new"


@dataclass
class PendingRegistration:
    web_url: str
    api_url: str
    public_url: str | None = None  # hangar's address the manifest named
    created_at: float = field(default_factory=time.monotonic)


class States:
    """One-time states for registrations in flight; a redirect must bring one back."""

    def __init__(self, ttl: float = STATE_TTL_SECONDS):
        self.ttl = ttl
        self._pending: dict[str, PendingRegistration] = {}

    def issue(self, web_url: str, api_url: str, public_url: str | None = None) -> str:
        self._expire()
        while len(self._pending) >= MAX_PENDING:  # a page reloaded many times
            self._pending.pop(next(iter(self._pending)))
        state = secrets.token_urlsafe(24)
        self._pending[state] = PendingRegistration(web_url, api_url, public_url)
        return state

    def take(self, state: str) -> PendingRegistration | None:
        """The registration a state was issued for, once; None if unknown or expired."""
        self._expire()
        return self._pending.pop(state, None)

    def _expire(self) -> None:
        cutoff = time.monotonic() - self.ttl
        for key in [k for k, v in self._pending.items() if v.created_at < cutoff]:
            del self._pending[key]


def write_registration(data_dir: Path, conversion: dict[str, Any], api_url: str,
                       public_url: str | None = None) -> Path:
    """Store what GitHub's conversion answered where Settings read it; secrets are 0600."""
    data_dir.mkdir(parents=True, exist_ok=True)
    key_path = data_dir / KEY_FILE
    _write_private(key_path, conversion["pem"])
    config = {
        "app_id": int(conversion["id"]),
        "private_key_file": str(key_path.resolve()),
        "webhook_secret": conversion["webhook_secret"],
        "github_url": api_url,
        # The OAuth client people sign in to hangar's pages with, and where GitHub sends
        # them back (the manifest's callback URL is under it).
        **({"public_url": public_url} if public_url else {}),
        "client_id": conversion.get("client_id"),
        "client_secret": conversion.get("client_secret"),
        # For people reading the file; Settings ignore these.
        "app_slug": conversion.get("slug"),
        "app_html_url": conversion.get("html_url"),
    }
    path = data_dir / REGISTRATION_FILE
    _write_private(path, "# Written by hangar setup from GitHub's answer; keep it secret.\n"
                   + yaml.safe_dump(config, sort_keys=False))
    return path


def _write_private(path: Path, text: str) -> None:
    """Write a secret so that it is never readable by others, not even for a moment."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    with open(fd, "w") as handle:
        handle.write(text)
    tmp.replace(path)
