"""Environment specs load, and bad ones are rejected with the file, the field and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox.envspec import (
    EnvSpec,
    EnvSpecError,
    Resources,
    VerifySpec,
    default_envs_dir,
    load_env_file,
    load_envs,
    select_environment,
)


def write(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(text)
    return path


def test_shipped_envs_load():
    envs = load_envs(default_envs_dir())
    assert default_envs_dir().name == "envs"
    default = envs["default"]
    assert (default.provider, default.harness, default.isolation) == ("local", "script", "bwrap")
    assert default.network == "loopback"
    assert default.verify is not None and default.verify.command == "python3 -m unittest -q"
    assert default.agent_script and "demo agent" in default.agent_script
    claude = envs["claude-python"]
    assert (claude.provider, claude.harness) == ("docker", "claude")
    assert claude.image_recipe.base == "hangar-base:1"
    assert claude.image_recipe.agent_clis == ["claude"]  # the image carries its agent
    assert claude.model_credential_env == "ANTHROPIC_API_KEY"
    codex = envs["codex"]
    assert (codex.harness, codex.image_recipe.agent_clis) == ("codex", ["codex"])
    assert codex.model_credential_env == "OPENAI_API_KEY"


def test_defaults_fill_in(tmp_path):
    spec = load_env_file(write(tmp_path / "envs", "mini.yaml", "verify: {command: make test}\n"))
    assert spec.name == "mini"  # from the file name
    assert spec.max_minutes == 60 and spec.max_seconds == 3600
    assert spec.verify.timeout_minutes == 10 and spec.verify.retries == 1
    assert spec.verify.restore_paths == []
    assert spec.network == "loopback"
    docker = EnvSpec(name="d", provider="docker", image="hangar-base:1")
    assert docker.network == "loopback"
    codex = EnvSpec(name="c", harness="codex")
    assert codex.model_credential_env == "OPENAI_API_KEY"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "verify: {command: make, timeout_minutes: -1}\n",
            "envs/x.yaml: verify.timeout_minutes: Input should be greater than 0; "
            "must be a positive number of minutes, e.g. 10",
        ),
        ("provider: podman\n", "envs/x.yaml: provider: Input should be 'local', 'docker'"),
        ("harness: gemini\n", "one of script, claude, codex"),
        ("provider: docker\n", "envs/x.yaml: image: the docker provider needs an image"),
        ("provider: docker\nimage: i\nnetwork: bridge\n", "not allowed for docker"),
        ("network: internet\n", "not available to the local provider; use loopback, host or none"),
        ("verfy: {command: make}\n", "envs/x.yaml: verfy: not a known field; check its spelling"),
        ("verify: {command: make, timeout: 3}\n", "envs/x.yaml: verify.timeout: not a known field"),
        ("resources: {pids: 2}\n", "resources.pids: Input should be greater than or equal to 16"),
        ("max_minutes: soon\n", "max_minutes: Input should be a valid number"),
        ("model_credential_env: 'MY KEY'\n", "is not an environment variable name"),
        ("- a list\n", "envs/x.yaml: must be a mapping of fields"),
        ("verify: [unclosed\n", "envs/x.yaml: is not valid YAML at line"),
        ("verify: {command: make, restore_paths: [../etc/passwd]}\n",
         "envs/x.yaml: verify.restore_paths: '../etc/passwd' is not a path inside the "
         "repository; a list of repository paths without wildcards"),
        ("verify: {command: make, restore_paths: [/abs]}\n", "'/abs' is not a path inside"),
        ("verify: {command: make, restore_paths: ['tests/*.py']}\n",
         "'tests/*.py' is not a path inside"),
        ("verify: {command: make, restore_paths: tests}\n",
         "verify.restore_paths: Input should be a valid list"),
    ],
)
def test_bad_specs_are_rejected_with_file_field_and_fix(tmp_path, text, expected):
    path = write(tmp_path / "envs", "x.yaml", text)
    with pytest.raises(EnvSpecError) as raised:
        load_env_file(path)
    assert expected in str(raised.value)


def test_load_envs_reports_every_bad_file_and_duplicate_names(tmp_path):
    envs = tmp_path / "envs"
    write(envs, "a.yaml", "name: same\n")
    write(envs, "b.yml", "name: same\n")
    write(envs, "c.yaml", "max_minutes: 0\n")
    with pytest.raises(EnvSpecError) as raised:
        load_envs(envs)
    message = str(raised.value)
    assert "envs/b.yml: name: 'same' is already used by envs/a.yaml" in message
    assert "envs/c.yaml: max_minutes:" in message


def test_repo_overrides_merge_and_validate():
    base = load_envs(default_envs_dir())["default"]
    spec = base.with_overrides(
        {"verify": {"command": "pytest -q"}, "max_minutes": 30, "install": "pip install -e ."},
        source="octo/app/.github/hangar.yml",
    )
    assert spec.verify.command == "pytest -q"
    assert spec.verify.timeout_minutes == 10  # kept from the base
    restoring = base.with_overrides({"verify": {"restore_paths": ["tests/conftest.py"]}},
                                    source="octo/app/.github/hangar.yml")
    assert restoring.verify.restore_paths == ["tests/conftest.py"]
    assert spec.max_minutes == 30 and spec.install == "pip install -e ."
    assert base.max_minutes == 60  # the base is untouched
    with pytest.raises(EnvSpecError) as raised:
        base.with_overrides(
            {"verify": {"timeout_minutes": 0}}, source="octo/app/.github/hangar.yml"
        )
    assert str(raised.value).startswith(
        "octo/app/.github/hangar.yml: environment.verify.timeout_minutes:"
    )
    assert "e.g. 10" in str(raised.value)


def test_a_repository_may_lower_time_and_resources_never_raise_them():
    base = load_envs(default_envs_dir())["default"].model_copy(update={
        "max_minutes": 60, "resources": Resources(cpus=2, memory_mb=4096, pids=512),
        "verify": VerifySpec(command="make test", timeout_minutes=10)})
    told: list[str] = []
    asked = base.with_overrides({"max_minutes": 100000, "verify": {"timeout_minutes": 999},
                                 "resources": {"cpus": 64, "memory_mb": None, "pids": 100000}},
                                source=".github/hangar.yml", told=told)
    assert (asked.max_minutes, asked.verify.timeout_minutes) == (60, 10)
    assert (asked.resources.cpus, asked.resources.memory_mb, asked.resources.pids) == (
        2, 4096, 512)
    assert told == [
        ".github/hangar.yml: environment.max_minutes: 100000 is above this environment's "
        "ceiling of 60, which its operator sets (envs/default.yaml); hangar uses 60",
        ".github/hangar.yml: environment.resources.cpus: 64 is above this environment's "
        "ceiling of 2, which its operator sets (envs/default.yaml); hangar uses 2",
        ".github/hangar.yml: environment.resources.memory_mb: no limit is above this "
        "environment's ceiling of 4096, which its operator sets (envs/default.yaml); "
        "hangar uses 4096",
        ".github/hangar.yml: environment.resources.pids: 100000 is above this environment's "
        "ceiling of 512, which its operator sets (envs/default.yaml); hangar uses 512",
        ".github/hangar.yml: environment.verify.timeout_minutes: 999 is above this "
        "environment's ceiling of 10, which its operator sets (envs/default.yaml); "
        "hangar uses 10",
    ]
    told.clear()
    lower = base.with_overrides({"max_minutes": 5, "resources": {"cpus": 0.5, "pids": 64}},
                                told=told)
    assert (lower.max_minutes, lower.resources.cpus, lower.resources.pids) == (5, 0.5, 64)
    assert told == []
    # Through select_environment, as a run asks for its environment.
    chosen = select_environment({"default": base}, {"use": "default", "max_minutes": 999},
                                told=told)
    assert chosen.max_minutes == 60 and len(told) == 1


@pytest.mark.parametrize("field", ["isolation", "network", "provider", "model_credential_env"])
def test_repo_cannot_loosen_isolation_or_credentials(field):
    base = load_envs(default_envs_dir())["default"]
    with pytest.raises(EnvSpecError) as raised:
        base.with_overrides({field: "none"}, source=".github/hangar.yml")
    assert f".github/hangar.yml: environment.{field}: only the operator's" in str(raised.value)


def test_select_environment_by_name_or_mapping():
    envs = load_envs(default_envs_dir())
    assert select_environment(envs, None).name == "default"
    assert select_environment(envs, "claude-python").harness == "claude"
    chosen = select_environment(envs, {"use": "claude-python", "max_minutes": 5})
    assert chosen.name == "claude-python" and chosen.max_minutes == 5
    with pytest.raises(EnvSpecError, match="no environment named 'gpu'; known: claude-python"):
        select_environment(envs, "gpu")
    with pytest.raises(EnvSpecError, match="must be an environment name or a mapping"):
        select_environment(envs, 3)


def test_shipped_envs_recommend_the_package_registries():
    for spec in load_envs(default_envs_dir()).values():
        assert {"pypi.org", "files.pythonhosted.org", "registry.npmjs.org"} <= set(
            spec.egress.allow), spec.name
        assert spec.egress.hosts == {} and spec.egress.narrowed is None


def test_a_repository_narrows_egress_and_cannot_widen_or_pin():
    base = EnvSpec(name="x", egress={"allow": ["pypi.org", "*.npmjs.org"]})
    narrowed = base.with_overrides({"egress": {"allow": ["pypi.org", "example.org"]}})
    assert narrowed.egress.allow == ["pypi.org", "*.npmjs.org"]  # the operator's, kept
    assert narrowed.egress.narrowed == ["pypi.org", "example.org"]  # only takes away
    for block in ({"hosts": {"pypi.org": "10.0.0.1"}}, {"narrowed": ["x.org"]},
                  {"allow": "pypi.org"}, ["pypi.org"]):
        with pytest.raises(EnvSpecError, match="a repository may only narrow"):
            base.with_overrides({"egress": block})
    with pytest.raises(EnvSpecError, match=r"environment\.egress\.allow: .*e\.g\. pypi"):
        base.with_overrides({"egress": {"allow": ["http://pypi.org/simple"]}})


@pytest.mark.parametrize(("egress", "expected"), [
    ({"allow": ["pypi.org/simple"]}, "egress.allow: 'pypi.org/simple' is not an allowlist"),
    ({"hosts": {"*.internal": "10.0.0.5"}}, "egress.hosts: '*.internal': a pin names one"),
    ({"hosts": {"registry.internal": "nowhere"}}, "'nowhere' is not an IP address"),
    ({"allowed": ["pypi.org"]}, "egress.allowed: not a known field"),
])
def test_bad_egress_blocks_say_what_to_write(tmp_path, egress, expected):
    import yaml

    path = write(tmp_path / "envs", "e.yaml", yaml.safe_dump({"egress": egress}))
    with pytest.raises(EnvSpecError) as raised:
        load_env_file(path)
    assert expected in str(raised.value)
