"""A small world on fakehub for its own tests: an App with a webhook receiver, people,
a repository with a test suite, an installation."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from fakehub.driver import AppInfo, Driver, UserInfo
from fakehub.webhooks import signature

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


@pytest.fixture
def receiver() -> Iterator[Receiver]:
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
    yield got
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


@pytest.fixture
def world(fakehub: Driver, receiver: Receiver) -> World:
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
