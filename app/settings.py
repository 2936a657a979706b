"""hangar's settings: one object, built by whoever starts the service, never at import time.

Sources, strongest first: keyword arguments, `HANGAR_*` environment variables, the YAML
file named by `HANGAR_CONFIG` (or passed as `config_file`), the defaults below.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml
from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

GITHUB_API = "https://api.github.com"


class SettingsError(Exception):
    """A setting is missing or unusable; the message says which and how to fix it."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HANGAR_", extra="ignore")

    app_id: int | None = None
    private_key_file: Path | None = None
    webhook_secret: SecretStr | None = None
    data_dir: Path = Path(".hangar")
    github_url: str = GITHUB_API
    public_url: str | None = None
    host: str = "127.0.0.1"
    port: int = 8787
    # Where sandboxes reach hangar's /git/ proxy; defaults to http://127.0.0.1:<port>.
    git_proxy_url: str | None = None
    envs_dir: Path | None = None
    max_concurrent_agents: int = Field(3, ge=1)
    run_watch_interval_seconds: float = Field(2.0, gt=0)
    poll_interval_seconds: float = Field(60.0, gt=0)
    # How often hangar asks GitHub for deliveries it missed, and how far back.
    redelivery_interval_seconds: float = Field(300.0, gt=0)
    redelivery_window_hours: float = Field(24.0, gt=0, le=72)
    # Logins whose comments never trigger hangar besides every Bot account.
    ignored_logins: list[str] = []
    log_level: str = "INFO"
    api_token: SecretStr | None = None
    # How long a stopping hangar waits for in-flight steps (they are idempotent if cut).
    shutdown_grace_seconds: float = Field(20.0, ge=0)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, _YamlSource(settings_cls))

    @field_validator("github_url")
    @classmethod
    def _strip_slash(cls, value: str) -> str:
        return value.rstrip("/")

    @property
    def db_path(self) -> Path:
        return self.data_dir / "hangar.db"

    @property
    def proxy_base_url(self) -> str:
        return (self.git_proxy_url or f"http://127.0.0.1:{self.port}").rstrip("/")

    @property
    def git_base_url(self) -> str:
        return git_base_url(self.github_url)

    def secret(self) -> str:
        return self.webhook_secret.get_secret_value() if self.webhook_secret else ""

    def check_for_serving(self) -> None:
        """Refuse to serve with settings that would make hangar unsafe or useless."""
        if not self.webhook_secret or not self.secret():
            raise SettingsError(
                "HANGAR_WEBHOOK_SECRET is not set. hangar refuses to accept unsigned webhooks: "
                "set it to the webhook secret of your GitHub App "
                "(export HANGAR_WEBHOOK_SECRET=… or webhook_secret: in the config file)."
            )
        if self.app_id is None:
            raise SettingsError(
                "HANGAR_APP_ID is not set: set it to your GitHub App's id "
                "(shown on the App's settings page)."
            )
        if self.private_key_file is None:
            raise SettingsError(
                "HANGAR_PRIVATE_KEY_FILE is not set: download a private key from the App's "
                "settings page and point HANGAR_PRIVATE_KEY_FILE at the .pem file."
            )
        try:
            self.private_key_file.read_bytes()
        except OSError as exc:
            raise SettingsError(
                f"HANGAR_PRIVATE_KEY_FILE={self.private_key_file} cannot be read ({exc.strerror}): "
                "check the path and that hangar's user may read it."
            ) from None

    def private_key(self) -> str:
        assert self.private_key_file is not None
        return self.private_key_file.read_text()


def git_base_url(api_url: str) -> str:
    """Where git lives for a REST base: github.com for the API, the host itself otherwise."""
    api_url = api_url.rstrip("/")
    parts = urlsplit(api_url)
    if parts.netloc == "api.github.com":
        return "https://github.com"
    path = parts.path
    if path.endswith("/api/v3"):
        path = path[: -len("/api/v3")]
    return f"{parts.scheme}://{parts.netloc}{path}"


class _YamlSource(PydanticBaseSettingsSource):
    """Values from the YAML file named by HANGAR_CONFIG, if any."""

    def __init__(self, settings_cls: type[BaseSettings]):
        super().__init__(settings_cls)
        self._data = _read_yaml(os.environ.get("HANGAR_CONFIG"))

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return self._data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return {k: v for k, v in self._data.items() if k in self.settings_cls.model_fields}


def _read_yaml(path: str | None) -> dict[str, Any]:
    if not path:
        return {}
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as exc:
        raise SettingsError(f"HANGAR_CONFIG={path} cannot be read ({exc.strerror}).") from None
    except yaml.YAMLError as exc:
        raise SettingsError(f"HANGAR_CONFIG={path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise SettingsError(f"HANGAR_CONFIG={path} must hold a mapping of setting: value.")
    return data
