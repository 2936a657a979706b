"""An environment's own image, built from its recipe with a real Docker engine."""

from __future__ import annotations

import pytest

from sandbox.envimage import IN_IMAGE_DIR, build_image, recipe_tag
from sandbox.envspec import EnvSpec, EnvSpecError, ImageRecipe
from sandbox.provider import SandboxError

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def docker_client():
    docker = pytest.importorskip("docker")
    try:
        client = docker.from_env()
        client.images.get("hangar-base:1")
    except Exception as exc:
        pytest.skip(f"no Docker engine with hangar-base:1 ({exc}); run scripts/setup.sh")
    return client


@pytest.fixture
def clis(tmp_path):
    directory = tmp_path / "clis"
    directory.mkdir()
    claude = directory / "claude"
    claude.write_text("#!/bin/sh\necho 'claude 9.9.9 (pinned)'\n")
    claude.chmod(0o755)
    return directory


def _spec(**recipe) -> EnvSpec:
    return EnvSpec(name="claude-python", provider="docker", harness="claude",
                   image_recipe=ImageRecipe(agent_clis=["claude"], **recipe))


def test_built_once_cached_by_digest_and_rebuilt_when_the_cli_changes(docker_client, clis):
    spec = _spec()
    tag, built = build_image(docker_client, spec, clis)
    try:
        assert built and tag.startswith("hangar-env-claude-python:")
        out = docker_client.containers.run(tag, ["claude"], remove=True, network_mode="none")
        assert out.decode().strip() == "claude 9.9.9 (pinned)"
        listing = docker_client.containers.run(tag, ["ls", "-l", f"{IN_IMAGE_DIR}/claude"],
                                               remove=True, network_mode="none").decode()
        assert listing.startswith("-rwxr-xr-x") and " root root " in listing
        assert build_image(docker_client, spec, clis) == (tag, False)  # cached

        (clis / "claude").write_text("#!/bin/sh\necho 'claude 10.0.0'\n")
        newer, built_again = build_image(docker_client, spec, clis)
        assert built_again and newer != tag
        docker_client.images.remove(newer, force=True)
    finally:
        docker_client.images.remove(tag, force=True)


def test_a_missing_cli_is_a_sentence_with_the_fix(docker_client, tmp_path):
    with pytest.raises(SandboxError, match=r"scripts/setup\.sh installs the pinned agent CLIs"):
        build_image(docker_client, _spec(), tmp_path)


def test_the_tag_follows_the_recipe(clis):
    files = [clis / "claude"]
    assert recipe_tag("x", ImageRecipe(agent_clis=["claude"]), files) != recipe_tag(
        "x", ImageRecipe(agent_clis=["claude"], packages=["nodejs"]), files)


def test_a_repository_cannot_change_the_recipe():
    with pytest.raises(EnvSpecError, match="only the operator's environment files may set"):
        _spec().with_overrides({"image_recipe": {"base": "attacker/image"}})
    with pytest.raises(ValueError, match="not a Debian package name"):
        ImageRecipe(packages=["nodejs; rm -rf /"])
