"""Environment specs: what a sandbox is made of and how its work is checked.

Operators keep them in `envs/*.yaml`; a repository may pick one and override a few parts
in `.github/hangar.yml` under `environment:`. Every error names the file, the field and
the fix, because the person reading it is editing YAML, not Python.
"""

from __future__ import annotations

import copy
import functools
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

LOCAL_NETWORKS = ("loopback", "host", "none")
# Fields only the operator's envs/ files may set: they decide how strongly a sandbox is
# isolated and which credential it receives, so a repository cannot loosen them.
OPERATOR_ONLY_FIELDS = (
    "name", "provider", "isolation", "network", "harness", "agent_command",
    "model_credential_env", "image_recipe", "instructions",
)
_ENV_VAR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# How to fix each field, shown after the validation message.
_FIXES: dict[str, str] = {
    "name": "a short name such as python-3.11",
    "provider": "one of local, docker, kubernetes",
    "image": "an image reference, e.g. hangar-base:1",
    "image_recipe": "a mapping with base, packages and agent_clis",
    "image_recipe.base": "an image reference, e.g. hangar-base:1",
    "image_recipe.packages": "a list of Debian package names, e.g. [nodejs]",
    "image_recipe.agent_clis": "a list of claude and codex",
    "isolation": "bwrap (default) or none",
    "harness": "one of script, claude, codex",
    "agent_script": "a shell script as a string (use a YAML block: `agent_script: |`)",
    "install": "a shell command as a string, e.g. pip install -e .",
    "lockfiles": "a list of repository paths or globs, e.g. [deps/*.cfg]",
    "build_secrets": "a list of environment variable names the operator maps, e.g. [NPM_TOKEN]",
    "verify": "a mapping with command, timeout_minutes, retries and restore_paths",
    "verify.command": "a shell command as a string, e.g. python3 -m unittest -q",
    "verify.timeout_minutes": "must be a positive number of minutes, e.g. 10",
    "verify.retries": "a whole number from 0 to 5, e.g. 1",
    "verify.restore_paths": "a list of repository paths without wildcards, e.g. "
    "[tests/conftest.py, tests/data]",
    "resources": "a mapping with cpus, memory_mb and pids",
    "resources.cpus": "a positive number of CPUs, e.g. 2",
    "resources.memory_mb": "a positive whole number of MiB, e.g. 4096",
    "resources.pids": "a whole number of processes of at least 16, e.g. 512",
    "network": "loopback, host or none for local; loopback, none, host or a network name "
    "for docker",
    "max_minutes": "must be a positive number of minutes, e.g. 60",
    "model_credential_env": "the name of an environment variable, e.g. ANTHROPIC_API_KEY",
    "egress": "a mapping with allow (a list of hosts) and hosts (name: address pins)",
    "egress.allow": "a list of host names, e.g. [pypi.org, \"*.npmjs.org\", example.com:8443]",
    "egress.hosts": "a mapping of exact host names to IP addresses, e.g. {registry.internal: "
    "10.0.0.5}",
}


class EnvSpecError(ValueError):
    """An environment spec could not be loaded; str() is a list of sentences with fixes."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class VerifySpec(_Strict):
    command: str = Field(min_length=1)
    timeout_minutes: float = Field(default=10, gt=0)
    retries: int = Field(default=1, ge=0, le=5)
    # Files or directories restored from the base before the command runs, so a change
    # to them (a test's fixture, its data) cannot make the verification pass.
    restore_paths: list[str] = Field(default_factory=list, max_length=50)

    @field_validator("restore_paths")
    @classmethod
    def _inside_the_repository(cls, value: list[str]) -> list[str]:
        for path in value:
            parts = path.strip("/").split("/")
            if (not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts)
                    or any(c in path for c in "*?[\n")):
                raise ValueError(f"{path!r} is not a path inside the repository")
        return value


class ImageRecipe(_Strict):
    """How an environment's own image is made (`hangar env build-image NAME`).

    `packages` are Debian packages added to a fresh rootfs (debootstrap, as
    scripts/base-image.sh does); `agent_clis` are copied in from hangar's own pinned install.
    """

    base: str = "hangar-base:1"
    packages: list[str] = Field(default_factory=list)
    agent_clis: list[Literal["claude", "codex"]] = Field(default_factory=list)

    @field_validator("packages")
    @classmethod
    def _package_names(cls, value: list[str]) -> list[str]:
        bad = [name for name in value if not re.fullmatch(r"[a-z0-9][a-z0-9+.-]+", name)]
        if bad:
            raise ValueError(f"{bad[0]!r} is not a Debian package name")
        return value


class EgressSpec(_Strict):
    """What a sandbox may reach through hangar's egress proxy (proxy/egress.py).

    `allow` is the operator's allowlist; `hosts` pins exact names to addresses (the only
    way to reach a private address); `narrowed` is a repository's own list, which can only
    take away from `allow` (set from `.github/hangar.yml`'s `environment.egress.allow`).
    """

    allow: list[str] = Field(default_factory=list)
    hosts: dict[str, str] = Field(default_factory=dict)
    narrowed: list[str] | None = None

    @field_validator("allow", "narrowed")
    @classmethod
    def _rules(cls, value: list[str] | None) -> list[str] | None:
        from proxy.egress import parse_rule

        for entry in value or []:
            parse_rule(entry)
        return value

    @field_validator("hosts")
    @classmethod
    def _pins(cls, value: dict[str, str]) -> dict[str, str]:
        import ipaddress

        for name, address in value.items():
            if "*" in name:
                raise ValueError(f"{name!r}: a pin names one exact host, not a wildcard")
            try:
                ipaddress.ip_address(address)
            except ValueError:
                raise ValueError(f"{name}: {address!r} is not an IP address") from None
        return value


class Resources(_Strict):
    cpus: float | None = Field(default=2, gt=0)
    memory_mb: int | None = Field(default=4096, gt=0)
    pids: int | None = Field(default=512, ge=16)


class EnvSpec(_Strict):
    name: str = Field(min_length=1)
    provider: Literal["local", "docker", "kubernetes"] = "local"
    image: str | None = None
    image_recipe: ImageRecipe | None = None
    isolation: Literal["bwrap", "none"] = "bwrap"
    harness: Literal["script", "claude", "codex"] = "script"
    agent_script: str | None = None
    install: str | None = None
    # Build fields: with `install`, they make the environment build's key (sandbox.envbuild).
    lockfiles: list[str] = Field(default_factory=list)
    build_secrets: list[str] = Field(default_factory=list)
    verify: VerifySpec | None = None
    resources: Resources = Field(default_factory=Resources)
    network: str = ""  # filled in: loopback (hangar's sandbox gate, nothing else)
    max_minutes: float = Field(default=60, gt=0)
    model_credential_env: str | None = None
    # The agent CLI to run (default: claude or codex on the sandbox's PATH).
    agent_command: str | None = None
    egress: EgressSpec = Field(default_factory=EgressSpec)
    # The operator's own instructions, added to every prompt in this environment.
    instructions: str | None = Field(default=None, max_length=4000)

    @field_validator("model_credential_env")
    @classmethod
    def _env_var_name(cls, value: str | None) -> str | None:
        if value is not None and not _ENV_VAR_NAME.match(value):
            raise ValueError(f"{value!r} is not an environment variable name")
        return value

    @field_validator("build_secrets")
    @classmethod
    def _env_var_names(cls, value: list[str]) -> list[str]:
        bad = [name for name in value if not _ENV_VAR_NAME.match(name)]
        if bad:
            raise ValueError(f"{bad[0]!r} is not an environment variable name")
        return value

    @model_validator(mode="after")
    def _fits_provider(self) -> EnvSpec:
        network = self.network or "loopback"
        self.network = network
        if self.provider == "local" and network not in LOCAL_NETWORKS:
            raise ValueError(
                f"network: {network!r} is not available to the local provider; "
                "use loopback, host or none"
            )
        if self.provider == "docker":
            if network in ("bridge", "default"):
                raise ValueError(
                    f"network: {network!r} is not allowed for docker; use loopback (hangar's "
                    "push proxy and nothing else), none, or the name of a network you created"
                )
        if self.provider in ("docker", "kubernetes") and not (self.image or self.image_recipe):
            raise ValueError(
                f"image: the {self.provider} provider needs an image, e.g. image: hangar-base:1, "
                "or an image_recipe hangar builds"
            )
        if (
            self.harness == "script"
            and self.agent_script is not None
            and not self.agent_script.strip()
        ):
            raise ValueError("agent_script: is empty; give a script or leave the field out")
        if self.harness in ("claude", "codex") and not self.model_credential_env:
            default = "ANTHROPIC_API_KEY" if self.harness == "claude" else "OPENAI_API_KEY"
            self.model_credential_env = default
        return self

    @property
    def max_seconds(self) -> float:
        return self.max_minutes * 60

    def with_overrides(
        self, mapping: dict[str, Any] | None, source: str = ".github/hangar.yml",
        told: list[str] | None = None,
    ) -> EnvSpec:
        """This spec with a repository's `environment:` block applied on top.

        Nested mappings (verify, resources) merge field by field. Fields that set isolation
        or credentials stay the operator's. Time and resources may be lowered, never
        raised: what the operator's spec sets is the ceiling, and each value asked above
        it is held to it and said in `told`.
        """
        if not mapping:
            return self
        if not isinstance(mapping, dict):
            raise EnvSpecError(
                f"{source}: environment: must be a mapping of fields to override, "
                "e.g. environment: {verify: {command: pytest -q}}"
            )
        refused = [key for key in mapping if key in OPERATOR_ONLY_FIELDS]
        if refused:
            raise EnvSpecError(
                "\n".join(
                    f"{source}: environment.{key}: only the operator's environment files may "
                    f"set {key}; remove it here or ask an operator for an environment that has it"
                    for key in refused
                )
            )
        secrets = mapping.get("build_secrets")
        if isinstance(secrets, list):
            unmapped = [name for name in secrets if name not in self.build_secrets]
            if unmapped:
                raise EnvSpecError(
                    f"{source}: environment.build_secrets: {unmapped[0]!r} is not a build "
                    f"secret of environment {self.name!r}; name only those its operator mapped "
                    f"({', '.join(self.build_secrets) or 'none'})"
                )
        mapping = dict(mapping)
        if "egress" in mapping:
            mapping["egress"] = _narrowing(mapping["egress"], source)
        merged = _deep_merge(self.model_dump(), mapping)
        spec = _validate(merged, source, prefix="environment.")
        return self._held_to_ceilings(spec, source, told if told is not None else [])

    def _held_to_ceilings(self, spec: EnvSpec, source: str, told: list[str]) -> EnvSpec:
        for path in CEILINGS:
            ceiling, asked = _field(self, path), _field(spec, path)
            if ceiling is None or (asked is not None and asked <= ceiling):
                continue
            spec = _with_field(spec, path, ceiling)
            told.append(f"{source}: environment.{'.'.join(path)}: "
                        f"{'no limit' if asked is None else f'{asked:g}'} is above this "
                        f"environment's ceiling of {ceiling:g}, which its operator sets "
                        f"(envs/{self.name}.yaml); hangar uses {ceiling:g}")
        return spec


# Time and resources: the operator's spec is the ceiling, a repository may only lower them.
CEILINGS: tuple[tuple[str, ...], ...] = (
    ("max_minutes",), ("resources", "cpus"), ("resources", "memory_mb"), ("resources", "pids"),
    ("verify", "timeout_minutes"),
)


def _field(spec: BaseModel, path: tuple[str, ...]) -> Any:
    value: Any = spec
    for name in path:
        value = getattr(value, name, None)
        if value is None:
            return None
    return value


def _with_field(spec: BaseModel, path: tuple[str, ...], value: Any) -> Any:
    if len(path) == 1:
        return spec.model_copy(update={path[0]: value})
    inner = getattr(spec, path[0])
    return spec.model_copy(update={path[0]: _with_field(inner, path[1:], value)})


def _narrowing(block: Any, source: str) -> dict[str, Any]:
    """A repository's `egress:` block as a narrowing of the operator's allowlist: it may
    list hosts (kept only where the operator allows them too), nothing else."""
    if not isinstance(block, dict) or set(block) - {"allow"} or not isinstance(
            block.get("allow"), list):
        raise EnvSpecError(
            f"{source}: environment.egress: a repository may only narrow the egress "
            "allowlist, as egress: {allow: [pypi.org]}; the hosts it may reach and any "
            "pins are the operator's (envs/)")
    from proxy.egress import parse_rule

    for entry in block["allow"]:
        try:
            parse_rule(entry)
        except ValueError as exc:
            raise EnvSpecError(f"{source}: environment.egress.allow: {exc}") from None
    return {"narrowed": [str(entry) for entry in block["allow"]]}


def _deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _validate(data: Any, source: str, *, prefix: str = "") -> EnvSpec:
    if not isinstance(data, dict):
        raise EnvSpecError(
            f"{source}: must be a mapping of fields (name, provider, harness, verify, ...), "
            f"not {type(data).__name__}"
        )
    try:
        return EnvSpec.model_validate(data)
    except ValidationError as exc:
        raise EnvSpecError(_explain(exc, source, prefix)) from None


def _explain(exc: ValidationError, source: str, prefix: str) -> str:
    lines = []
    for error in exc.errors():
        loc = ".".join(str(part) for part in error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            known = ", ".join(sorted(_FIXES)) if "." not in loc else ""
            hint = f"not a known field; check its spelling{f' (known: {known})' if known else ''}"
            lines.append(f"{source}: {prefix}{loc}: {hint}")
            continue
        if error["type"] == "missing":
            message = "is required"
        if not loc:
            # A whole-spec rule: its message already starts with the field name and a fix.
            lines.append(f"{source}: {prefix}{message}")
            continue
        fix = _FIXES.get(loc)
        lines.append(f"{source}: {prefix}{loc}: {message}" + (f"; {fix}" if fix else ""))
    return "\n".join(lines)


@functools.lru_cache(maxsize=64)
def _parsed_yaml(text: str) -> Any:
    """A spec file's YAML, parsed once per text: every engine loads the same few files
    (pure-Python YAML, ~4 ms each), and tests build hundreds of engines. Callers copy it."""
    return yaml.safe_load(text)


def load_env_file(path: str | Path) -> EnvSpec:
    path = Path(path)
    source = _display(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise EnvSpecError(f"{source}: cannot be read ({exc.strerror})") from None
    try:
        data = copy.deepcopy(_parsed_yaml(text))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise EnvSpecError(f"{source}: is not valid YAML{where}: {exc}") from None
    if isinstance(data, dict):
        data.setdefault("name", path.stem)
    return _validate(data, source)


def load_envs(directory: str | Path) -> dict[str, EnvSpec]:
    """Every *.yaml / *.yml in directory by name. All errors are reported together."""
    directory = Path(directory)
    specs: dict[str, EnvSpec] = {}
    seen: dict[str, str] = {}
    problems: list[str] = []
    files = sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")])
    for path in files:
        try:
            spec = load_env_file(path)
        except EnvSpecError as exc:
            problems.append(str(exc))
            continue
        if spec.name in specs:
            problems.append(
                f"{_display(path)}: name: {spec.name!r} is already used by {seen[spec.name]}; "
                "give each environment its own name"
            )
            continue
        specs[spec.name] = spec
        seen[spec.name] = _display(path)
    if problems:
        raise EnvSpecError("\n".join(problems))
    return specs


def select_environment(
    envs: dict[str, EnvSpec],
    block: str | dict[str, Any] | None,
    *,
    default: str = "default",
    source: str = ".github/hangar.yml",
    told: list[str] | None = None,
) -> EnvSpec:
    """The spec a repository asks for: `environment: name` or `environment: {use: name, ...}`.

    Other keys of the mapping override the chosen spec; what they ask above the operator's
    ceilings is held to them and said in `told`.
    """
    overrides: dict[str, Any] = {}
    name = default
    if isinstance(block, str):
        name = block
    elif isinstance(block, dict):
        overrides = dict(block)
        name = str(overrides.pop("use", default))
    elif block is not None:
        raise EnvSpecError(
            f"{source}: environment: must be an environment name or a mapping, "
            "e.g. environment: {use: default, verify: {command: pytest -q}}"
        )
    if name not in envs:
        known = ", ".join(sorted(envs)) or "none"
        raise EnvSpecError(
            f"{source}: environment.use: no environment named {name!r}; known: {known}"
        )
    return envs[name].with_overrides(overrides, source, told)


def default_envs_dir() -> Path:
    """The `envs/` directory beside the `sandbox` package."""
    return Path(__file__).resolve().parent.parent / "envs"


def _display(path: Path) -> str:
    # envs/x.yaml rather than a machine-specific absolute path.
    parts = path.parts
    return str(Path(*parts[-2:])) if len(parts) >= 2 else str(path)
