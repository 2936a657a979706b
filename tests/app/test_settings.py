"""Settings come from the environment and a YAML file; serving refuses unsafe ones."""

from __future__ import annotations

import os

import pytest

from app.settings import Settings, SettingsError, git_base_url


def test_environment_beats_yaml_file_beats_defaults(tmp_path, monkeypatch):
    config = tmp_path / "hangar.yml"
    config.write_text("port: 9000\nhost: 0.0.0.0\napp_id: 5\n")
    monkeypatch.setenv("HANGAR_CONFIG", str(config))
    monkeypatch.setenv("HANGAR_PORT", "9100")
    settings = Settings()
    assert (settings.port, settings.host, settings.app_id) == (9100, "0.0.0.0", 5)
    assert settings.github_url == "https://api.github.com"


def test_bad_yaml_file_is_named(tmp_path, monkeypatch):
    config = tmp_path / "hangar.yml"
    config.write_text("port: [\n")
    monkeypatch.setenv("HANGAR_CONFIG", str(config))
    with pytest.raises(SettingsError, match="is not valid YAML"):
        Settings()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "HANGAR_WEBHOOK_SECRET is not set"),
        ({"webhook_secret": "s"}, "HANGAR_APP_ID is not set"),
        ({"webhook_secret": "s", "app_id": 1}, "HANGAR_PRIVATE_KEY_FILE is not set"),
        ({"webhook_secret": "s", "app_id": 1, "private_key_file": "/nonexistent/key.pem"},
         "cannot be read"),
    ],
)
def test_serving_refuses_missing_or_unreadable_settings(fields, message):
    with pytest.raises(SettingsError, match=message):
        Settings(**fields).check_for_serving()


def test_hangar_serve_says_which_setting_is_missing(tmp_path, monkeypatch, capsys):
    """The CLI in this process, as `hangar serve` runs it: a refusal starts nothing."""
    from app.cli import main

    for name in [n for n in os.environ if n.startswith("HANGAR_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("HANGAR_APP_ID", "1")  # part of an App (none at all offers /setup)
    monkeypatch.chdir(tmp_path)
    assert main(["serve"]) == 2
    assert "HANGAR_WEBHOOK_SECRET is not set" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("api", "git"),
    [
        ("https://api.github.com", "https://github.com"),
        ("https://api.octocorp.ghe.com", "https://octocorp.ghe.com"),
        ("https://ghe.example.com/api/v3", "https://ghe.example.com"),
        ("http://127.0.0.1:8080/api/v3/", "http://127.0.0.1:8080"),
    ],
)
def test_git_lives_beside_the_rest_api(api, git):
    assert git_base_url(api) == git
