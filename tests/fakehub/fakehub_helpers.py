"""Helpers for the fakehub tests: App JWTs, REST calls, git in a temp dir, a small world."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import jwt

from fakehub.driver import AppInfo, DeliveryInfo, Driver, UserInfo
from fakehub.webhooks import signature


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
    scheme: str = "token", headers: dict[str, str] | None = None,
) -> Response:
    """One REST call with urllib (blocking; fakehub runs on its own loop)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(base + path, data=data, method=method,
                                     headers=headers or {})
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


# -- a small world: an App with a webhook receiver, people, a repository --------------

REPO = "acme/widgets"
FILES = {
    "README.md": "# widgets\n",
    "widgets.py": "def answer():\n    return 42\n",
    "test_widgets.py": "from widgets import answer\n\n\ndef test_answer():\n"
                       "    assert answer() == 42\n",
}


@dataclass
class Receiver:
    """A webhook endpoint that checks each signature and keeps what it got."""

    secret: str = ""
    received: list[dict] = field(default_factory=list)
    bad_signatures: int = 0
    url: str = ""


@contextmanager
def serving_receiver() -> Iterator[Receiver]:
    got = Receiver()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.headers.get("X-Hub-Signature-256") != signature(got.secret, body):
                got.bad_signatures += 1
            got.received.append({"headers": dict(self.headers), "payload": json.loads(body)})
            self.send_response(202)
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    got.url = f"http://127.0.0.1:{server.server_address[1]}/webhook"
    try:
        yield got
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class World:
    hub: Driver
    app: AppInfo
    installation_id: int
    owner: UserInfo
    dev: UserInfo
    reviewer: UserInfo
    outsider: UserInfo
    repo: str = REPO


def build_world(fakehub: Driver, receiver: Receiver) -> World:
    app = fakehub.create_app("hangar", webhook_url=receiver.url)
    receiver.secret = app.webhook_secret
    owner = fakehub.create_user("acme")
    dev = fakehub.create_user("dev")
    reviewer = fakehub.create_user("reviewer")
    outsider = fakehub.create_user("outsider")
    fakehub.create_repo("acme", "widgets", FILES)
    fakehub.grant(REPO, "dev", "write")
    fakehub.grant(REPO, "reviewer", "write")
    installation_id = fakehub.install(app.id, "acme", ["widgets"])
    return World(fakehub, app, installation_id, owner, dev, reviewer, outsider)




def oauth_authorize(web: str, client_id: str, login: str, redirect_uri: str,
                    state: str = "st") -> str:
    """Authorize as `login` on the consent page; the address GitHub sends the browser to."""
    import urllib.parse

    class Keep(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    query = urllib.parse.urlencode({"client_id": client_id, "redirect_uri": redirect_uri,
                                    "state": state})
    with urllib.request.urlopen(f"{web}/login/oauth/authorize?{query}") as page:
        assert b"Authorize" in page.read()
    form = urllib.parse.urlencode({"client_id": client_id, "redirect_uri": redirect_uri,
                                   "state": state, "login": login}).encode()
    try:
        urllib.request.build_opener(Keep).open(f"{web}/login/oauth/authorize", data=form)
    except urllib.error.HTTPError as exc:
        assert exc.code == 302, exc.code
        return exc.headers["Location"]
    raise AssertionError("authorizing did not redirect")


def oauth_exchange(web: str, fields: dict[str, str], accept: str = "application/json") -> Any:
    import urllib.parse

    request = urllib.request.Request(f"{web}/login/oauth/access_token",
                                     data=urllib.parse.urlencode(fields).encode(),
                                     headers={"Accept": accept})
    with urllib.request.urlopen(request) as answer:
        text = answer.read().decode()
    return json.loads(text) if accept == "application/json" else dict(
        urllib.parse.parse_qsl(text))


def oauth_sign_in(web: str, client_id: str, client_secret: str, login: str,
                  redirect_uri: str) -> str:
    """The whole web application flow: a user access token for `login`."""
    import urllib.parse

    back = urllib.parse.urlsplit(oauth_authorize(web, client_id, login, redirect_uri))
    code = dict(urllib.parse.parse_qsl(back.query))["code"]
    answer = oauth_exchange(web, {"client_id": client_id, "client_secret": client_secret,
                                  "code": code, "redirect_uri": redirect_uri})
    return answer["access_token"]


def shape_problems(delivery: DeliveryInfo, definitions: dict[str, Any]) -> list[str]:
    """Where a delivery's payload strays from @octokit/webhooks-schemas' `event$action`."""
    name = f"{delivery.event}${delivery.action}"
    validator = jsonschema.Draft7Validator({"$ref": f"#/definitions/{name}",
                                            "definitions": definitions})
    return [f"{name}: {'/'.join(map(str, e.absolute_path))}: {e.message[:200]}"
            for e in validator.iter_errors(delivery.payload)]
