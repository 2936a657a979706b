"""Fixtures for the service's own tests: settings with a fresh App key, signed posts."""

from __future__ import annotations

import functools
import gc
import hashlib
import hmac
import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from app.settings import Settings

# Collection parses and rewrites every test module and imports hangar: the collector's
# walks over those trees and the objects kept for the run cost ~1.3 s of CPU for nothing
# (they are garbage only once dropped whole). Off while the modules are read; the tests
# run with it on.
gc.disable()


def pytest_collection_finish(session: pytest.Session) -> None:
    gc.enable()


SECRET = "It's a Secret to Everybody"
REFERENCE = Path(__file__).resolve().parents[1] / "reference" / "node_modules" / "@octokit"


def private_key_pem() -> bytes:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


@pytest.fixture(scope="session")
def app_key_pem() -> bytes:
    return private_key_pem()


@pytest.fixture
def settings(tmp_path: Path, app_key_pem: bytes) -> Settings:
    key = tmp_path / "app.pem"
    key.write_bytes(app_key_pem)
    # Port 9 on loopback refuses connections: nothing here may reach a real GitHub.
    return Settings(
        app_id=1, private_key_file=key, webhook_secret=SECRET,
        data_dir=tmp_path / "data", github_url="http://127.0.0.1:9/api/v3",
        shutdown_grace_seconds=0.5,
    )


def sign(body: bytes, secret: str = SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def webhook_headers(event: str, body: bytes, *, delivery: str | None = None,
                    secret: str = SECRET) -> dict[str, str]:
    return {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
        "X-Hub-Signature-256": sign(body, secret),
        "Content-Type": "application/json",
    }


@functools.cache
def webhook_examples() -> list[tuple[str, str, dict]]:
    """(event, action, payload) for every example GitHub publishes, read once (4 MB of
    JSON): callers only read them, and copy a payload before they change it."""
    index = REFERENCE / "webhooks-examples" / "api.github.com" / "index.json"
    found = []
    for entry in json.loads(index.read_text()):
        for i, example in enumerate(entry["examples"]):
            found.append((entry["name"], example.get("action") or f"#{i}", example))
    return found


@pytest.fixture
def step_engine(settings: Settings):
    """An engine whose steps talk to a recording GitHub (tests/recording_github.py), with
    its own store and push tokens, and no loop: a test runs one step and reads the rows."""
    from app.engine import Engine
    from app.github.ops import RepoOps
    from app.metrics import Metrics
    from app.store import Store
    from proxy.tokens import TokenRegistry

    def make(gh, *, provider=None, **overrides) -> Engine:
        """gh: the recording GitHub; provider: every sandbox's; overrides: settings."""
        changed = settings.model_copy(update=overrides)
        engine = Engine(settings=changed, store=Store(changed.db_path), auth=None,
                        metrics=Metrics(), tokens=TokenRegistry(changed.db_path),
                        providers=None if provider is None else lambda name: provider)

        async def repo_ops(thread) -> RepoOps:
            return RepoOps(gh, thread.repo)

        engine.github.repo_ops = repo_ops
        return engine

    return make


@dataclass
class Ran:
    """What `hangar …` answered: its exit code and what it printed."""

    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def hangar_cli(monkeypatch, capsys):
    """`hangar ARGS` run in this process (`app.cli.main`) with only the HANGAR_ settings a
    test gives: what a subprocess would print and return, without starting a Python and
    importing hangar again. `hangar serve` is refused before it could listen: a check that
    let it through fails the test instead of serving."""
    from aiohttp import web

    from app import cli

    def refuse(*_args, **_kwargs):
        raise AssertionError("hangar serve went on to serve")

    monkeypatch.setattr(web, "run_app", refuse)
    monkeypatch.setattr(cli, "register_app", refuse)

    def run(*argv: str, env: dict[str, str] | None = None) -> Ran:
        for name in [name for name in os.environ if name.startswith("HANGAR_")]:
            monkeypatch.delenv(name)
        for name, value in (env or {}).items():
            monkeypatch.setenv(name, value)
        capsys.readouterr()
        try:
            code = cli.main(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        out, err = capsys.readouterr()
        return Ran(code, out, err)

    return run
