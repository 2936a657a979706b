"""What `hangar serve` checks before it says it is ready.

A mistake in the settings is found here, once, and said in one sentence that names the
setting and the fix — not found later as a traceback logged on every webhook. Only what
a person must change stops the start: an answer GitHub may give differently in a minute
(a 5xx, a timeout) is said as a warning, and hangar starts and waits for GitHub as it
does while it runs.
"""

from __future__ import annotations

import asyncio
import errno
import socket
import time
from dataclasses import dataclass

import aiohttp
import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from app.settings import Settings

APP_CHECK_TIMEOUT_S = 15


@dataclass(frozen=True)
class Finding:
    fatal: bool  # True: hangar does not start
    sentence: str


def check_port(host: str, port: int) -> Finding | None:
    """Whether hangar can listen where it is told to."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return Finding(True, f"HANGAR_PORT={port} is in use on {host}: stop what "
                                     "listens there, or set HANGAR_PORT to a free port.")
            if exc.errno in (errno.EACCES, errno.EPERM):
                return Finding(True, f"HANGAR_PORT={port} needs privileges hangar's user has "
                                     "not: set HANGAR_PORT to a port above 1023.")
            return Finding(True, f"HANGAR_HOST={host} cannot be listened on "
                                 f"({exc.strerror}): set it to an address of this machine, "
                                 "or 0.0.0.0 for all of them.")
    return None


def check_key(pem: bytes, setting: str = "HANGAR_PRIVATE_KEY_FILE") -> Finding | None:
    """Whether the file holds the RSA private key a GitHub App signs its JWTs with."""
    fix = ("download a private key from the App's settings page (Private keys → Generate) "
           f"and point {setting} at the .pem file")
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except TypeError:
        return Finding(True, f"{setting} holds a key protected by a password: {fix}, as "
                             "GitHub gives it.")
    except ValueError:
        return Finding(True, f"{setting} does not hold a PEM private key: {fix}.")
    if not isinstance(key, rsa.RSAPrivateKey):
        return Finding(True, f"{setting} holds a key that is not RSA, and GitHub Apps sign "
                             f"with RSA: {fix}.")
    return None


async def check_app(settings: Settings, pem: str) -> Finding | None:
    """GET /app with the App's JWT: the URL is GitHub's API, and the key is the App's."""
    url = settings.github_url
    issued = int(time.time())
    token = jwt.encode({"iat": issued - 60, "exp": issued + 540, "iss": str(settings.app_id)},
                       pem, algorithm="RS256")
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json",
               "X-GitHub-Api-Version": "2022-11-28", "User-Agent": "hangar"}
    try:
        async with aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=APP_CHECK_TIMEOUT_S)) as session:
            async with session.get(f"{url}/app", headers=headers, allow_redirects=False) as resp:
                status = resp.status
                body = await resp.json(content_type=None) if status == 200 else None
    except (aiohttp.InvalidURL, ValueError):
        return Finding(True, f"HANGAR_GITHUB_URL={url} is not a URL: set it to "
                             "https://api.github.com, or https://HOST/api/v3 for GitHub "
                             "Enterprise Server.")
    except aiohttp.ClientConnectorError as exc:
        return Finding(True, f"HANGAR_GITHUB_URL={url} could not be reached "
                             f"({exc.os_error.strerror or type(exc.os_error).__name__}): check "
                             "the address and that this machine may connect to it.")
    except (TimeoutError, aiohttp.ClientError) as exc:
        return Finding(False, f"HANGAR_GITHUB_URL={url} did not answer GET /app "
                              f"({type(exc).__name__}); hangar starts and tries GitHub again "
                              "as it works.")
    if status == 200:
        found = (body or {}).get("id") if isinstance(body, dict) else None
        if found != settings.app_id:
            return Finding(True, f"HANGAR_APP_ID={settings.app_id}, but the key in "
                                 f"HANGAR_PRIVATE_KEY_FILE is App {found}'s: set HANGAR_APP_ID "
                                 "to the id on that App's settings page, or use this App's key.")
        return None
    if status in (401, 403):
        return Finding(True, f"{url} refused the App's token ({status}): HANGAR_APP_ID="
                             f"{settings.app_id} and the key in HANGAR_PRIVATE_KEY_FILE do not "
                             "belong to one App of this GitHub (check the id on the App's "
                             "settings page and generate a new key there), or this machine's "
                             "clock is off by more than a minute.")
    if status == 404 or (300 <= status < 400):
        return Finding(True, f"HANGAR_GITHUB_URL={url} answered {status} for GET /app: it is "
                             "not GitHub's REST API. Set it to https://api.github.com, or "
                             "https://HOST/api/v3 for GitHub Enterprise Server.")
    return Finding(False, f"HANGAR_GITHUB_URL={url} answered {status} for GET /app; hangar "
                          "starts and tries GitHub again as it works.")


def check_before_serving(settings: Settings) -> list[Finding]:
    """Every finding, in the order a person would fix them; the GitHub check only runs
    with a usable key."""
    findings = [f for f in (check_port(settings.host, settings.port),) if f]
    assert settings.private_key_file is not None
    pem = settings.private_key_file.read_bytes()
    bad_key = check_key(pem)
    if bad_key:
        return [*findings, bad_key]
    app = asyncio.run(check_app(settings, pem.decode()))
    return [*findings, *([app] if app else [])]
