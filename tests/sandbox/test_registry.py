"""Pushing a kubernetes environment build to a real OCI distribution registry (Debian's
docker-registry, started on loopback with a password): the image is the environment's
image plus one layer holding the checkout at /workspace/repo, made with no RUN step,
recorded by digest, deleted when the build is dropped."""

from __future__ import annotations

import asyncio
import base64
import gzip
import hashlib
import io
import json
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from sandbox_helpers import REGISTRY_PASSWORD as PASSWORD
from sandbox_helpers import REGISTRY_USER as USER
from sandbox_helpers import seed_base_image, tar_bytes

from sandbox import registry as oci


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _credentials(host: str) -> dict[str, tuple[str, str]]:
    return {host: (USER, PASSWORD)}


def _checkout_archive(path: Path) -> None:
    """What `tar -c repo` in a build pod might hand back, hostile entries included."""
    def add(tar, name, data=b"", **fields):
        info = tarfile.TarInfo(name)
        info.size = len(data) if fields.get("type", tarfile.REGTYPE) == tarfile.REGTYPE else 0
        for key, value in fields.items():
            setattr(info, key, value)
        tar.addfile(info, io.BytesIO(data) if info.size else None)

    with tarfile.open(path, "w") as tar:
        add(tar, "repo", type=tarfile.DIRTYPE, mode=0o755)
        add(tar, "repo/.deps/lib.py", b"installed\n", mode=0o644)
        add(tar, "repo/run.sh", b"#!/bin/sh\n", mode=0o4755)  # set-uid: dropped
        add(tar, "repo/same.py", type=tarfile.LNKTYPE, linkname="repo/.deps/lib.py")
        add(tar, "repo/hosts", type=tarfile.SYMTYPE, linkname="/etc/hosts")
        add(tar, "repo/pipe", type=tarfile.FIFOTYPE)
        add(tar, "repo/null", type=tarfile.CHRTYPE, devmajor=1, devminor=3)
        add(tar, "repo/../escape", b"out\n")
        add(tar, "/etc/cron.d/evil", b"* * * * * root sh\n")
        add(tar, "home/.git-credentials", b"token\n")
        add(tar, "repo/passwd", type=tarfile.LNKTYPE, linkname="etc/passwd")


async def test_a_build_is_the_environment_image_plus_the_checkout_pushed_by_digest(
        registry_host, tmp_path):
    base = oci.ImageRef.parse(f"{registry_host}/envs/python:1")
    target = oci.ImageRef.parse(f"{registry_host}/hangar/builds")
    async with aiohttp.ClientSession() as session:
        client = oci.Registry(session, _credentials(registry_host))
        base_manifest = await seed_base_image(client, base)
        _checkout_archive(tmp_path / "checkout.tar")
        layer = await asyncio.to_thread(oci.checkout_layer, tmp_path / "checkout.tar",
                                        tmp_path / "layer.tar.gz", max_bytes=1 << 20)
        ref = await oci.push_build(client, base=base, target=target, layer=layer,
                                   build_id="bld-1a2b3c4d")

        # Read back through a client of its own, as a kubelet would pull it.
        reader = oci.Registry(session, _credentials(registry_host))
        pushed = oci.ImageRef.parse(ref)
        assert ref.startswith(f"{registry_host}/hangar/builds@sha256:")
        manifest, media_type, digest = await reader.manifest(pushed)
        assert digest == pushed.reference and media_type == oci.OCI_MANIFEST
        by_tag = await reader.manifest(target.with_reference("bld-1a2b3c4d"))
        assert by_tag[2] == digest
        assert manifest["layers"][:-1] == base_manifest["layers"]
        assert manifest["layers"][-1]["digest"] == layer.digest
        for descriptor in manifest["layers"]:  # every layer is in the build's repository
            assert await reader.has_blob(target, descriptor["digest"])
        config = json.loads(await reader.blob(target, manifest["config"]["digest"]))
        base_config = json.loads(await reader.blob(base, base_manifest["config"]["digest"]))
        assert config["rootfs"]["diff_ids"] == [*base_config["rootfs"]["diff_ids"],
                                                layer.diff_id]
        assert config["config"] == {"User": "1000"}
        *kept_history, added = config["history"]
        assert kept_history == base_config["history"]
        assert "bld-1a2b3c4d" in added["created_by"] and "RUN" not in added["created_by"]

        blob = await reader.blob(target, layer.digest)
        plain = gzip.decompress(blob)
        assert "sha256:" + hashlib.sha256(plain).hexdigest() == layer.diff_id
        with tarfile.open(fileobj=io.BytesIO(plain)) as tar:
            members = {m.name: m for m in tar.getmembers()}
            lib = tar.extractfile("workspace/repo/.deps/lib.py").read()
        assert sorted(members) == ["workspace/repo", "workspace/repo/.deps/lib.py",
                                   "workspace/repo/hosts", "workspace/repo/run.sh",
                                   "workspace/repo/same.py"]
        assert lib == b"installed\n"
        assert members["workspace/repo/same.py"].linkname == "workspace/repo/.deps/lib.py"
        assert members["workspace/repo/hosts"].linkname == "/etc/hosts"
        assert members["workspace/repo/run.sh"].mode == 0o755
        assert {(m.uid, m.gid) for m in members.values()} == {(1000, 1000)}

        # A dropped build's manifest is deleted.
        await client.delete_manifest(pushed)
        with pytest.raises(oci.RegistryError, match="HTTP 404"):
            await reader.manifest(pushed)


async def test_the_registry_says_what_is_wrong_with_the_credential(registry_host, tmp_path):
    image = oci.ImageRef.parse(f"{registry_host}/hangar/builds:nothing")
    async with aiohttp.ClientSession() as session:
        with pytest.raises(oci.RegistryError, match="HANGAR_BUILD_REGISTRY_AUTH has none"):
            await oci.Registry(session).manifest(image)
        wrong = oci.Registry(session, {registry_host: (USER, "not-it")})
        with pytest.raises(oci.RegistryError, match=r"HTTP 401.*check the credentials"):
            await wrong.manifest(image)


def test_credentials_come_from_a_docker_config_file(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"auths": {
        "https://registry.example.com/v1/": {"auth": base64.b64encode(b"u:p:w").decode()},
        "127.0.0.1:5000": {"username": "a", "password": "b"},
    }}))
    assert oci.load_credentials(path) == {"registry.example.com": ("u", "p:w"),
                                          "127.0.0.1:5000": ("a", "b")}
    with pytest.raises(oci.RegistryError, match="dockerconfigjson"):
        oci.load_credentials(tmp_path / "missing.json")


@pytest.mark.parametrize(("text", "registry", "repository", "reference"), [
    ("python:3.12", oci.DOCKER_HUB, "library/python", "3.12"),
    ("ghcr.io/acme/env", "ghcr.io", "acme/env", "latest"),
    ("127.0.0.1:5000/hangar/builds@sha256:" + "a" * 64, "127.0.0.1:5000", "hangar/builds",
     "sha256:" + "a" * 64),
    ("localhost/x:1", "localhost", "x", "1"),
])
def test_image_references(text, registry, repository, reference):
    ref = oci.ImageRef.parse(text)
    assert (ref.registry, ref.repository, ref.reference) == (registry, repository, reference)


def test_a_broken_reference_is_refused():
    with pytest.raises(oci.RegistryError, match="not an image reference"):
        oci.ImageRef.parse("Registry.example.com/UPPER:1")


@pytest.mark.docker
@pytest.mark.slow
async def test_a_container_runtime_pulls_a_pushed_build_and_its_init_step_restores_it(
        registry_host, tmp_path):
    """What a kubelet would do, done by Docker: pull the build by digest with the
    credential, run the init container's copy (uid 1000, read-only root, the workspace
    volume at the restore path), and find the checkout there."""
    from sandbox_helpers import BASE_IMAGE, docker_reason

    from sandbox.envspec import EnvSpec
    from sandbox.provider import Sandbox
    from sandbox.providers.kubernetes import RESTORE_MOUNT, sandbox_pod

    if reason := docker_reason():
        pytest.skip(reason)
    config = tmp_path / "docker"
    config.mkdir()
    login = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    (config / "config.json").write_text(json.dumps({"auths": {registry_host: {"auth": login}}}))
    base = f"{registry_host}/envs/hangar-base:1"

    def docker(*args: str) -> str:
        done = subprocess.run(["docker", "--config", str(config), *args], capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-800:]
        return done.stdout

    pulled = None
    await asyncio.to_thread(docker, "tag", BASE_IMAGE, base)
    try:
        await asyncio.to_thread(docker, "push", "-q", base)
        archive = tmp_path / "checkout.tar"
        archive.write_bytes(tar_bytes({"repo/.deps/lib.py": b"installed\n"}))
        layer = await asyncio.to_thread(oci.checkout_layer, archive, tmp_path / "layer.tar.gz",
                                        max_bytes=1 << 20)
        async with aiohttp.ClientSession() as session:
            pulled = await oci.push_build(
                oci.Registry(session, oci.load_credentials(config / "config.json")),
                base=oci.ImageRef.parse(base),
                target=oci.ImageRef.parse(f"{registry_host}/hangar/builds"), layer=layer,
                build_id="bld-docker01")
        await asyncio.to_thread(docker, "pull", "-q", pulled)
        pod = sandbox_pod(Sandbox(id="sb-0123456789ab", provider="kubernetes"),
                          EnvSpec(name="k", provider="kubernetes", image=pulled), namespace="x",
                          from_build=True)
        [init] = pod["spec"]["initContainers"]
        volume = tmp_path / "workspace-volume"
        volume.mkdir(mode=0o777)
        volume.chmod(0o777)
        await asyncio.to_thread(
            docker, "run", "--rm", "--network", "none", "--read-only", "--user", "1000:1000",
            "--cap-drop", "ALL", "-v", f"{volume}:{RESTORE_MOUNT}", "--entrypoint",
            init["command"][0], pulled, *init["command"][1:])
        restored = volume / "repo" / ".deps" / "lib.py"
        assert restored.read_bytes() == b"installed\n"
        assert restored.stat().st_uid == 1000
        layers = json.loads(await asyncio.to_thread(
            docker, "image", "inspect", "--format", "{{json .RootFS.Layers}}", pulled))
        assert layers[-1] == layer.diff_id and len(layers) == 2  # the base's and the checkout's
    finally:
        await asyncio.to_thread(subprocess.run, ["docker", "image", "rm", "-f", base,
                                                 *([pulled] if pulled else [])],
                                capture_output=True)



def _token_signer(root: Path) -> tuple[Any, str]:
    """A key and its self-signed certificate (written to root/token.pem for the registry)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "hangar-test-token-issuer")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .sign(key, hashes.SHA256()))
    (root / "token.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key, base64.b64encode(cert.public_bytes(serialization.Encoding.DER)).decode()


async def test_a_registry_that_hands_out_tokens_gets_one_asked_for_with_the_credential(
        tmp_path, registry_host):
    """Most hosted registries answer 401 with a Bearer challenge naming a token service:
    hangar asks that service, with the credential, for a token of the scope it needs."""
    import secrets
    import time

    import jwt
    from aiohttp import web
    from sandbox_helpers import running_registry

    key, cert = _token_signer(tmp_path)
    asked: list[dict[str, str]] = []

    async def token(request: web.Request) -> web.Response:
        login = request.headers.get("Authorization", "")
        asked.extend({"service": request.query.get("service", ""), "scope": scope}
                     for scope in request.query.getall("scope", []))
        if login != "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode():
            return web.json_response({"errors": [{"code": "DENIED"}]}, status=401)
        access = []
        for scope in request.query.getall("scope", []):
            kind, name, actions = scope.split(":")
            access.append({"type": kind, "name": name, "actions": actions.split(",")})
        now = int(time.time())
        claims = {"iss": "hangar-test-issuer", "sub": USER, "aud": "hangar-test-registry",
                  "iat": now, "nbf": now - 10, "exp": now + 300,
                  "jti": secrets.token_hex(8), "access": access}
        signed = jwt.encode(claims, key, algorithm="RS256", headers={"x5c": [cert]})
        return web.json_response({"token": signed})

    app = web.Application()
    app.router.add_get("/token", token)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    token_port = site._server.sockets[0].getsockname()[1]
    auth = (f"{{token: {{realm: 'http://127.0.0.1:{token_port}/token', "
            f"service: hangar-test-registry, issuer: hangar-test-issuer, "
            f"rootcertbundle: {tmp_path / 'token.pem'}}}}}")
    try:
        with running_registry(tmp_path, auth) as host:
            base = oci.ImageRef.parse(f"{host}/envs/python:1")
            target = oci.ImageRef.parse(f"{host}/hangar/builds")
            archive = tmp_path / "checkout.tar"
            archive.write_bytes(tar_bytes({"repo/.deps/lib.py": b"installed\n"}))
            layer = await asyncio.to_thread(oci.checkout_layer, archive,
                                            tmp_path / "layer.tar.gz", max_bytes=1 << 20)
            async with aiohttp.ClientSession() as session:
                client = oci.Registry(session, _credentials(host))
                await seed_base_image(client, base)
                ref = await oci.push_build(client, base=base, target=target, layer=layer,
                                           build_id="bld-token001")
                manifest, _, _ = await client.manifest(oci.ImageRef.parse(ref))
                assert manifest["layers"][-1]["digest"] == layer.digest
                # (type, name, actions): the registry lists actions in no fixed order.
                scopes = {(kind, name, frozenset(actions.split(",")))
                          for kind, name, actions in (a["scope"].split(":") for a in asked)}
                # The mount of the base's layers names both repositories in one challenge.
                assert {("repository", "hangar/builds", frozenset({"pull", "push"})),
                        ("repository", "envs/python", frozenset({"pull"}))} <= scopes
                assert {a["service"] for a in asked} == {"hangar-test-registry"}

                # An environment image on another registry: its layers are copied over.
                elsewhere = oci.ImageRef.parse(f"{registry_host}/envs/node:1")
                both = oci.Registry(session, {**_credentials(host),
                                              **_credentials(registry_host)})
                base_manifest = await seed_base_image(both, elsewhere, marker=b"node\n")
                ref = await oci.push_build(both, base=elsewhere,
                                           target=oci.ImageRef.parse(f"{host}/hangar/node"),
                                           layer=layer, build_id="bld-token002")
                manifest, _, _ = await both.manifest(oci.ImageRef.parse(ref))
                assert manifest["layers"][:-1] == base_manifest["layers"]
                for descriptor in manifest["layers"]:
                    blob = await both.blob(oci.ImageRef.parse(ref), descriptor["digest"])
                    assert _digest(blob) == descriptor["digest"]

                wrong = oci.Registry(session, {host: (USER, "not-it")})
                with pytest.raises(oci.RegistryError, match="token service refused"):
                    await wrong.manifest(oci.ImageRef.parse(ref))
    finally:
        await runner.cleanup()
