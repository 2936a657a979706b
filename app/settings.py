"""hangar's settings: one object, built by whoever starts the service, never at import time.

Sources, strongest first: keyword arguments, `HANGAR_*` environment variables, the YAML
file named by `HANGAR_CONFIG` (or passed as `config_file`), the App registration that
`hangar setup` wrote into the data directory (`github-app.yaml`), the defaults below.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

GITHUB_API = "https://api.github.com"


class SettingsError(Exception):
    """A setting is missing or unusable; the message says which and how to fix it."""


NotificationKind = Literal["approval.requested", "land.conflict", "land.landed", "run.lost",
                          "usage.high", "build.failed"]
NOTIFICATION_KINDS: tuple[str, ...] = NotificationKind.__args__  # type: ignore[attr-defined]


class NotifierSettings(BaseModel):
    """An operator's webhook notifier: where hangar POSTs, the secret it signs the body
    with (`X-Hangar-Signature: sha256=<HMAC-SHA256 hex>`), which events, and for which
    installations or repositories (empty: all)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,39}$")
    url: str = Field(pattern=r"^https?://")
    secret: SecretStr
    format: Literal["json", "slack"] = "json"  # slack: a Slack incoming webhook's body
    events: list[NotificationKind] = list(NOTIFICATION_KINDS)  # type: ignore[arg-type]
    installations: list[int] = []
    repositories: list[str] = []  # owner/name
    rate_limit: int | None = Field(None, ge=1)  # sends per window; None: notify_rate_limit


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HANGAR_", extra="ignore")

    app_id: int | None = None
    private_key_file: Path | None = None
    webhook_secret: SecretStr | None = None
    data_dir: Path = Path(".hangar")
    # hangar's database for several replicas: postgresql://user:password@host/dbname (or
    # ?host=/run/postgresql for a unix socket). Without it, the SQLite file hangar.db in
    # the data directory, for one process.
    database_url: SecretStr | None = None
    # This replica's name among those sharing the database: whose leases are whose, and
    # which host a run's local or docker sandbox lives on. The default is the machine's
    # name and a hash of the data directory, stable across restarts.
    replica_id: str | None = None
    # How long a row stepped by a replica stays its own without a renewal: the longest a
    # replica that died keeps its rows from the others.
    lease_seconds: float = Field(15.0, ge=2)
    github_url: str = GITHUB_API
    public_url: str | None = None
    # The App's OAuth client (the manifest flow writes both): people sign in to hangar's
    # pages with GitHub when both are set and public_url says where GitHub sends them back.
    client_id: str | None = None
    client_secret: SecretStr | None = None
    host: str = "127.0.0.1"
    port: int = 8787
    # Where sandboxes reach hangar's /git/ proxy; defaults to http://127.0.0.1:<port>.
    git_proxy_url: str | None = None
    # The sandbox gate (sandbox routes only) also on host:sandbox_port, for sandboxes that
    # reach hangar over a network (kubernetes: its NetworkPolicy allows only this port).
    sandbox_port: int | None = None
    # The sandbox gate: a connection must send its request's headers within this long,
    # and one sandbox may hold at most this many connections at once.
    sandbox_gate_header_timeout_seconds: float = Field(10.0, gt=0)
    sandbox_gate_connections_per_sandbox: int = Field(64, ge=1)
    envs_dir: Path | None = None
    max_concurrent_agents: int = Field(3, ge=1)
    # Sandboxes hangar holds at once: agents, verifications and environment builds all
    # count; past it they wait (the seed's fleet cap).
    max_sandboxes: int = Field(50, ge=1)
    # Once every attempt of `/hangar try N` has ended, the ranking waits at most this long
    # for the repository's own CI on each attempt's head (the seed's grading state).
    grading_wait_seconds: float = Field(1800.0, ge=0)
    run_watch_interval_seconds: float = Field(2.0, gt=0)
    poll_interval_seconds: float = Field(60.0, gt=0)
    # A PR that waits for a person (its land request for an approval, its CI green for
    # auto-fix) is read whole on every event and at least this often; the slow poll
    # in between reads only its reviews.
    idle_pr_look_seconds: float = Field(21600.0, gt=0)
    # The engine sleeps until the next due time or a wake; at most this long, so that a
    # row written without a wake (another process on the same database) is seen.
    engine_safety_poll_seconds: float = Field(30.0, gt=0)
    # How often hangar asks GitHub for deliveries it missed, and how far back.
    redelivery_interval_seconds: float = Field(300.0, gt=0)
    redelivery_window_hours: float = Field(24.0, gt=0, le=72)
    # Deliveries handled (dispatched or failed) are forgotten after this many days: their
    # payloads are what fills the database. Never sooner than GitHub's own three days, in
    # which a delivery can be asked for again; one not yet handled is never forgotten.
    delivery_retention_days: float = Field(14.0, ge=3)
    # GitHub asks for about a second between content-creating calls of one installation.
    github_write_spacing_seconds: float = Field(1.0, ge=0)
    # GitHub's secondary limit of content-creating calls a minute per installation; a
    # GitHub Enterprise Server's site administrator sets its own.
    github_writes_per_minute: int = Field(80, ge=1)
    # A status comment is edited at most once in this many seconds; the edits between
    # are folded into the next one (each edit is a write GitHub counts).
    status_edit_interval_seconds: float = Field(10.0, ge=0)
    # A step that failed waits this long before its second try, twice as long before each
    # next one, up to five minutes; after five failures in a row its row ends.
    step_backoff_seconds: float = Field(2.0, gt=0)
    # Logins whose comments never trigger hangar besides every Bot account.
    ignored_logins: list[str] = []
    log_level: str = "INFO"
    api_token: SecretStr | None = None
    # Origins (scheme://host[:port]) whose browser pages may use the MCP server, besides
    # loopback and public_url; a request with another Origin is refused (DNS rebinding).
    mcp_allowed_origins: list[str] = []
    # The largest bundle of unpushed commits kept in the data directory; past it the
    # sandbox itself is kept instead.
    max_held_bundle_mb: float = Field(512.0, gt=0)
    # Where each model credential's requests go, by the credential's variable name, e.g.
    # {ANTHROPIC_API_KEY: {base_url: https://llm-proxy.example.com, auth: x-api-key}};
    # the default is the vendor's API for the name (OPENAI_* to OpenAI, else Anthropic).
    model_endpoints: dict[str, dict[str, str]] = {}
    # No new agent starts on a model credential while any usage window the model reports
    # is at this percentage (app/runs/pause.py); `/hangar resume` lifts it.
    pause_at_pct: float = Field(90.0, gt=0, le=100)
    # HANGAR_LAND=off freezes landing in every repository: approved pull requests wait,
    # saying why, and land once hangar serves with it on again.
    land: bool = True
    # How long a stopping hangar waits for in-flight steps (they are idempotent if cut).
    shutdown_grace_seconds: float = Field(20.0, ge=0)
    # Environment builds: a repository's checkout after `install`, kept for its sandboxes.
    env_builds_concurrency: int = Field(2, ge=1)
    env_build_timeout_minutes: float = Field(30.0, gt=0)
    env_builds_keep: int = Field(5, ge=1)
    snapshot_max_mb: int = Field(512, ge=1)
    # Kubernetes builds: the repository they are pushed to (registry.example.com/hangar/
    # builds), the Docker config file hangar pushes with (a mounted dockerconfigjson
    # Secret), and the Secret in the sandboxes' namespace their pods pull with.
    build_registry: str | None = None
    build_registry_auth: Path | None = None
    build_pull_secret: str | None = "hangar-build-registry"
    # Operators' webhook notifiers (app/notify.py); a delivery that fails is tried again
    # after this many seconds, doubling, at most NOTIFY_RETRIES times.
    notifiers: list[NotifierSettings] = []
    notify_retry_seconds: float = Field(30.0, gt=0)
    # Each notifier sends at most this many POSTs (retries count) per window; the rest wait.
    notify_rate_limit: int = Field(20, ge=1)
    notify_rate_window_seconds: float = Field(60.0, gt=0)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        given = init_settings.init_kwargs if isinstance(init_settings, InitSettingsSource) else {}
        data_dir = (given.get("data_dir")
                    or os.environ.get("HANGAR_DATA_DIR")
                    or _read_yaml(os.environ.get("HANGAR_CONFIG")).get("data_dir")
                    or cls.model_fields["data_dir"].default)
        registration = Path(data_dir) / "github-app.yaml"
        return (init_settings, env_settings, _YamlSource(settings_cls),
                _YamlSource(settings_cls, str(registration) if registration.is_file() else ""))

    @field_validator("github_url")
    @classmethod
    def _strip_slash(cls, value: str) -> str:
        return value.rstrip("/")

    @property
    def db_path(self) -> Path:
        return self.data_dir / "hangar.db"

    @property
    def database(self) -> Path | str:
        """Where hangar's rows live: the PostgreSQL URL, or the SQLite file."""
        if self.database_url is not None and self.database_url.get_secret_value():
            return self.database_url.get_secret_value()
        return self.db_path

    @property
    def replica_name(self) -> str:
        if self.replica_id:
            return self.replica_id
        import hashlib
        import socket

        where = hashlib.sha256(str(self.data_dir.resolve()).encode()).hexdigest()[:8]
        return f"{socket.gethostname()}-{where}"

    @field_validator("database_url")
    @classmethod
    def _postgresql_only(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and value.get_secret_value() and not value.get_secret_value(
                ).startswith(("postgresql://", "postgres://")):
            raise ValueError("HANGAR_DATABASE_URL takes a postgresql://user:password@host/"
                             "dbname URL; leave it unset for the SQLite file in the data "
                             "directory")
        return value

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
        self.check_for_github()

    def check_for_github(self) -> None:
        """Refuse what cannot call GitHub as the App: its id and a readable key."""
        self.github_app_id()
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

    @property
    def app_configured(self) -> bool:
        """Whether any part of a GitHub App is set; with none, hangar offers /setup."""
        return any(v is not None for v in (self.app_id, self.private_key_file,
                                           self.webhook_secret))

    def github_app_id(self) -> int:
        """The App's id, refused when unset."""
        if self.app_id is None:
            raise SettingsError(
                "HANGAR_APP_ID is not set: set it to your GitHub App's id "
                "(shown on the App's settings page)."
            )
        return self.app_id

    def private_key(self) -> str:
        assert self.private_key_file is not None
        return self.private_key_file.read_text()


def git_base_url(api_url: str) -> str:
    """Where git lives for a REST base: github.com for its API, SUBDOMAIN.ghe.com for
    api.SUBDOMAIN.ghe.com (Enterprise Cloud with data residency), the host itself for
    a GitHub Enterprise Server's /api/v3."""
    api_url = api_url.rstrip("/")
    parts = urlsplit(api_url)
    if parts.netloc == "api.github.com":
        return "https://github.com"
    if parts.netloc.startswith("api.") and parts.netloc.endswith(".ghe.com"):
        return f"{parts.scheme}://{parts.netloc.removeprefix('api.')}"
    path = parts.path
    if path.endswith("/api/v3"):
        path = path[: -len("/api/v3")]
    return f"{parts.scheme}://{parts.netloc}{path}"


class _YamlSource(PydanticBaseSettingsSource):
    """Values from the YAML file named by HANGAR_CONFIG, if any."""

    def __init__(self, settings_cls: type[BaseSettings], path: str | None = None):
        super().__init__(settings_cls)
        self._data = _read_yaml(path if path is not None else os.environ.get("HANGAR_CONFIG"))

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
