"""The pure parts of registering hangar's App: addresses, the manifest, states, files."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest

from app.doctor import app_permission_report
from app.settings import Settings
from app.web import registration

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("given", "web", "api"), [
    ("https://github.com", "https://github.com", "https://api.github.com"),
    ("github.com/", "https://github.com", "https://api.github.com"),
    ("https://api.github.com", "https://github.com", "https://api.github.com"),
    ("https://ghe.example.com", "https://ghe.example.com", "https://ghe.example.com/api/v3"),
    ("https://ghe.example.com/api/v3", "https://ghe.example.com",
     "https://ghe.example.com/api/v3"),
    ("http://127.0.0.1:9000", "http://127.0.0.1:9000", "http://127.0.0.1:9000/api/v3"),
])
def test_web_and_api_urls(given, web, api):
    assert registration.web_and_api_urls(given) == (web, api)


@pytest.mark.parametrize("bad", ["ftp://github.com", "https://"])
def test_a_bad_github_address_is_refused_with_an_example(bad):
    with pytest.raises(ValueError, match=r"e\.g\. https://github\.example\.com"):
        registration.web_and_api_urls(bad)


@pytest.mark.parametrize(("org", "url"), [
    (None, "https://github.com/settings/apps/new?state=s%2F1"),
    ("acme", "https://github.com/organizations/acme/settings/apps/new?state=s%2F1"),
    ("a/b", "https://github.com/organizations/a%2Fb/settings/apps/new?state=s%2F1"),
])
def test_new_app_url_for_a_person_or_an_organization(org, url):
    assert registration.new_app_url("https://github.com", org, "s/1") == url


def test_the_manifest_points_github_at_this_hangar():
    manifest = registration.manifest_for("https://hangar.example.com/", "ops")
    assert manifest["url"] == "https://hangar.example.com"
    assert manifest["hook_attributes"] == {"url": "https://hangar.example.com/webhook",
                                           "active": True}
    assert manifest["redirect_url"] == "https://hangar.example.com/setup"
    assert manifest["name"] == "ops"
    assert manifest["default_permissions"] == (
        registration.load_app_manifest()["default_permissions"])


@pytest.mark.parametrize("bad", ["hangar.example.com", "https://h.example.com/?x=1", "ftp://h"])
def test_a_public_url_github_cannot_call_is_refused(bad):
    with pytest.raises(ValueError, match="where GitHub can reach hangar"):
        registration.checked_public_url(bad)


def test_a_state_is_good_once_and_not_after_it_expires():
    states = registration.States(ttl=3600)
    state = states.issue("https://github.com", "https://api.github.com")
    assert states.take("forged") is None
    assert states.take(state).api_url == "https://api.github.com"
    assert states.take(state) is None
    stale = registration.States(ttl=-1)
    assert stale.take(stale.issue("w", "a")) is None


def test_pending_states_are_bounded():
    states = registration.States()
    first = states.issue("w", "a")
    for _ in range(registration.MAX_PENDING):
        states.issue("w", "a")
    assert states.take(first) is None


def test_the_registration_is_written_private_and_settings_read_it(tmp_path, monkeypatch):
    for name in ("HANGAR_APP_ID", "HANGAR_PRIVATE_KEY_FILE", "HANGAR_WEBHOOK_SECRET",
                 "HANGAR_GITHUB_URL", "HANGAR_CONFIG", "HANGAR_DATA_DIR", "HANGAR_PUBLIC_URL",
                 "HANGAR_CLIENT_ID", "HANGAR_CLIENT_SECRET"):
        monkeypatch.delenv(name, raising=False)
    conversion = {"id": 42, "slug": "ops", "pem": "-----BEGIN KEY-----\n", "html_url":
                  "https://github.com/apps/ops", "webhook_secret": "s3cret",
                  "client_id": "Iv1.x", "client_secret": "cs"}
    path = registration.write_registration(tmp_path, conversion, "https://ghe.example/api/v3",
                                           "https://hangar.example.com")
    key = tmp_path / registration.KEY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    settings = Settings(data_dir=tmp_path)
    assert settings.app_id == 42
    assert settings.secret() == "s3cret"
    assert settings.private_key_file == key.resolve()
    assert settings.github_url == "https://ghe.example/api/v3"
    # Sign-in to hangar's pages works from what setup wrote.
    assert (settings.client_id, settings.public_url) == ("Iv1.x", "https://hangar.example.com")
    assert settings.client_secret.get_secret_value() == "cs"
    assert settings.app_configured
    assert not Settings(data_dir=tmp_path / "empty").app_configured
    monkeypatch.setenv("HANGAR_APP_ID", "7")  # the environment still wins
    assert Settings(data_dir=tmp_path).app_id == 7


@pytest.mark.parametrize(("granted", "ok", "named"), [
    ({"contents": "write", "checks": "write"}, True, ""),
    ({"contents": "admin", "checks": "write"}, True, ""),
    ({"contents": "read", "checks": "write"}, False, "contents: write"),
    ({"checks": "write"}, False, "contents: write"),
    ({}, False, "checks: write, contents: write"),
])
def test_app_permission_report(granted, ok, named):
    wanted = {"contents": "write", "checks": "write"}
    passed, line = app_permission_report(granted, wanted)
    assert passed is ok
    assert named in line


def test_hangar_fakehub_passes_its_options_through(hangar_cli):
    result = hangar_cli("fakehub", "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: hangar fakehub")
    assert "--port" in result.stdout and "--data-dir" in result.stdout


def test_hangar_fakehub_listens_on_the_port_given(tmp_path):
    from tests.e2e.conftest import free_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "fakehub", "--port", str(port),
                             "--data-dir", str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout.readline().strip() == f"fakehub serving at http://127.0.0.1:{port}"
        proc.terminate()
        # It stops on SIGTERM; a loaded machine can take its time about it.
        assert proc.wait(timeout=90) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
