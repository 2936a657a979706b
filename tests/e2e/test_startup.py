"""`hangar serve` checks its settings before it says it is ready: each mistake is one
sentence naming the setting and the fix, with exit code 2 — never a traceback, never a
server that logs the same error on every webhook."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.e2e.conftest import ROOT, free_port


def serve(world, **overrides: str) -> subprocess.CompletedProcess:
    """`hangar serve` on world's App and fakehub, with some settings changed; it is
    expected to stop by itself."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANGAR_")}
    env.update({
        "HANGAR_APP_ID": str(world.app.id),
        "HANGAR_PRIVATE_KEY_FILE": str(world.app.private_key_path),
        "HANGAR_WEBHOOK_SECRET": world.app.webhook_secret,
        "HANGAR_GITHUB_URL": world.hub.api_url,
        "HANGAR_DATA_DIR": str(world.tmp / "data"),
        "HANGAR_PORT": str(free_port()),
        **overrides,
    })
    return subprocess.run([sys.executable, "-m", "app.cli", "serve"], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def said(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr and not result.stdout.strip()
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("hangar: ")
    return lines[0]


def test_a_port_in_use_is_named_with_its_fix(world):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = said(serve(world, HANGAR_PORT=str(port)))
    assert f"HANGAR_PORT={port} is in use" in line and "free port" in line


def test_a_key_file_that_holds_no_key_stops_the_start(world):
    garbage = world.tmp / "garbage.pem"
    garbage.write_text("-----BEGIN RSA PRIVATE KEY-----\nnot a key\n"
                       "-----END RSA PRIVATE KEY-----\n")
    line = said(serve(world, HANGAR_PRIVATE_KEY_FILE=str(garbage)))
    assert "HANGAR_PRIVATE_KEY_FILE does not hold a PEM private key" in line
    assert "Private keys" in line

    not_rsa = world.tmp / "ec.pem"
    not_rsa.write_bytes(ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    assert "not RSA" in said(serve(world, HANGAR_PRIVATE_KEY_FILE=str(not_rsa)))


def test_a_github_url_that_is_not_the_api_is_named(world):
    site = world.hub.api_url.removesuffix("/api/v3")  # GitHub Enterprise without /api/v3
    line = said(serve(world, HANGAR_GITHUB_URL=site))
    assert f"HANGAR_GITHUB_URL={site} answered 404 for GET /app" in line
    assert "/api/v3" in line

    nobody = f"http://127.0.0.1:{free_port()}/api/v3"
    assert "could not be reached" in said(serve(world, HANGAR_GITHUB_URL=nobody))


def test_a_key_of_another_app_or_a_wrong_id_is_named(world):
    other = world.hub.create_app(name="other")
    line = said(serve(world, HANGAR_PRIVATE_KEY_FILE=str(other.private_key_path)))
    assert "refused the App's token (401)" in line and f"HANGAR_APP_ID={world.app.id}" in line


def test_doctor_needs_no_webhook_secret(world):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANGAR_")}
    env.update({"HANGAR_APP_ID": str(world.app.id), "HANGAR_GITHUB_URL": world.hub.api_url,
                "HANGAR_PRIVATE_KEY_FILE": str(world.app.private_key_path)})
    result = subprocess.run([sys.executable, "-m", "app.cli", "doctor", world.repo], env=env,
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert "WEBHOOK_SECRET" not in result.stderr
    assert result.returncode in (0, 1) and result.stdout.strip(), result.stderr
