"""Pushing an environment build to an OCI registry, with the distribution API alone.

A kubernetes build is the environment's image plus one layer, the checkout at
/workspace/repo, and no RUN step: what `crane append` does. The base image's manifest and
config are read, its layers are made present in the target repository (they are there
already, or mounted from the base's repository on the same registry, or copied blob by
blob from another registry), the new layer and config are uploaded, and a manifest listing
the base's layers plus the new one is PUT under the build's id. A build is recorded by
digest, so every pod runs exactly that image.

Credentials come from a Docker config file (`{"auths": {host: {"auth": base64(user:pw)}}}`,
the `kubernetes.io/dockerconfigjson` Secret mounted in hangar's pod). A registry that
answers 401 with a Basic challenge gets them as Basic; one with a Bearer challenge gets a
token from its realm, asked with them. Plain HTTP is used for loopback registries only.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import re
import tarfile
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

import aiohttp

from sandbox.provider import SandboxError

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"
ACCEPT = ", ".join((OCI_MANIFEST, DOCKER_MANIFEST, OCI_INDEX, DOCKER_LIST))
DOCKER_HUB = "registry-1.docker.io"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
CHUNK = 1 << 20
SANDBOX_UID = 1000


class RegistryError(SandboxError):
    """A registry refused or failed a step; the message says which and what to do."""


@dataclass(frozen=True)
class ImageRef:
    """`registry/repository:tag` or `registry/repository@sha256:…`, as Docker reads them."""

    registry: str
    repository: str
    reference: str = "latest"

    @classmethod
    def parse(cls, text: str) -> ImageRef:
        name, at, digest = text.strip().partition("@")
        first, slash, rest = name.partition("/")
        if slash and ("." in first or ":" in first or first == "localhost"):
            registry, path = first, rest
        else:
            registry, path = DOCKER_HUB, name if slash else f"library/{name}"
        tag = "latest"
        if ":" in PurePosixPath(path).name:
            path, _, tag = path.rpartition(":")
        if not path or not re.fullmatch(r"[a-z0-9]+([._/-][a-z0-9]+)*", path):
            raise RegistryError(f"{text!r} is not an image reference like "
                                "registry.example.com/team/image:tag")
        return cls(registry, path, digest if at else tag)

    def with_reference(self, reference: str) -> ImageRef:
        return ImageRef(self.registry, self.repository, reference)

    def __str__(self) -> str:
        sep = "@" if self.reference.startswith("sha256:") else ":"
        return f"{self.registry}/{self.repository}{sep}{self.reference}"


def load_credentials(path: Path | str | None) -> dict[str, tuple[str, str]]:
    """Host → (user, password) from a Docker config file; {} without one."""
    if not path:
        return {}
    try:
        auths = json.loads(Path(path).read_text()).get("auths", {})
    except (OSError, ValueError) as exc:
        raise RegistryError(f"the registry credentials file {path} could not be read ({exc}); "
                            "mount a kubernetes.io/dockerconfigjson Secret there") from None
    found = {}
    for host, entry in auths.items():
        host = re.sub(r"^https?://", "", host).split("/", 1)[0]
        if entry.get("auth"):
            user, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
        else:
            user, password = entry.get("username", ""), entry.get("password", "")
        found[host] = (user, password)
    return found


class Registry:
    """A client of the OCI distribution API for the few calls a build push needs."""

    def __init__(self, session: aiohttp.ClientSession,
                 credentials: dict[str, tuple[str, str]] | None = None) -> None:
        self.session = session
        self.credentials = credentials or {}
        self._auth: dict[tuple[str, str], str] = {}  # (host, scope) → Authorization

    @staticmethod
    def base_url(host: str) -> str:
        hostname = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        return f"{'http' if hostname in LOOPBACK_HOSTS else 'https'}://{host}"

    async def _request(self, method: str, image: ImageRef, path: str, *, push: bool = False,
                       url: str | None = None, headers: dict[str, str] | None = None,
                       body: Callable[[], Any] | None = None, ok: tuple[int, ...] = (200,),
                       what: str) -> aiohttp.ClientResponse:
        """One call, authorised as the registry asks; the response is the caller's to read
        and release. `body` makes the request body (again, after a challenge)."""
        scope = f"repository:{image.repository}:{'pull,push' if push else 'pull'}"
        target = url or f"{self.base_url(image.registry)}/v2/{image.repository}/{path}"
        for attempt in range(2):
            sent = dict(headers or {})
            if auth := self._auth.get((image.registry, scope)):
                sent["Authorization"] = auth
            response = await self.session.request(method, target, headers=sent,
                                                  data=body() if body else None)
            if response.status == 401 and attempt == 0:
                challenge = response.headers.get("WWW-Authenticate", "")
                response.release()
                self._auth[(image.registry, scope)] = await self._authorise(
                    image.registry, challenge, scope)
                continue
            if response.status not in ok:
                detail = (await response.text())[:300]
                response.release()
                raise RegistryError(self._refusal(image, what, response.status, detail))
            return response
        raise AssertionError("unreachable")

    def _refusal(self, image: ImageRef, what: str, status: int, detail: str) -> str:
        fix = {401: "check the credentials in HANGAR_BUILD_REGISTRY_AUTH",
               403: "give the credential push access to that repository",
               404: "check the image name"}.get(status, "see the registry's answer")
        return (f"{what} at {image.registry}/{image.repository} was refused with HTTP "
                f"{status} ({detail.strip()}); {fix}")

    async def _authorise(self, host: str, challenge: str, scope: str) -> str:
        scheme, _, params = challenge.partition(" ")
        user_password = self.credentials.get(host)
        basic = ("Basic " + base64.b64encode(":".join(user_password).encode()).decode()
                 if user_password else None)
        if scheme.lower() == "basic":
            if not basic:
                raise RegistryError(f"{host} asks for a login and HANGAR_BUILD_REGISTRY_AUTH "
                                    "has none for it")
            return basic
        if scheme.lower() != "bearer":
            raise RegistryError(f"{host} asks for {scheme or 'an unknown'} authentication, "
                                "which hangar does not speak (Basic and Bearer tokens only)")
        fields = dict(re.findall(r'(\w+)="([^"]*)"', params))
        if "realm" not in fields:
            raise RegistryError(f"{host} asked for a token without saying where to get one")
        # A challenge may name several scopes (a mount: the target's and the source's).
        query = [("service", fields.get("service", host)),
                 *(("scope", each) for each in fields.get("scope", scope).split())]
        async with self.session.get(fields["realm"], params=query,
                                    headers={"Authorization": basic} if basic else {}) as response:
            if response.status != 200:
                raise RegistryError(f"{host}'s token service refused a token for {scope} "
                                    f"(HTTP {response.status}); check HANGAR_BUILD_REGISTRY_AUTH")
            answer = await response.json(content_type=None)
        token = answer.get("token") or answer.get("access_token")
        if not token:
            raise RegistryError(f"{host}'s token service answered without a token")
        return f"Bearer {token}"

    # ---- reading -------------------------------------------------------------------

    async def manifest(self, image: ImageRef) -> tuple[dict[str, Any], str, str]:
        """(manifest, its media type, its digest) of an image; an index resolves to its
        linux/amd64 image."""
        response = await self._request("GET", image, f"manifests/{image.reference}",
                                       headers={"Accept": ACCEPT}, what="reading the manifest")
        async with response:
            raw = await response.read()
            media_type = response.headers.get("Content-Type", "").split(";")[0]
        document = json.loads(raw)
        media_type = document.get("mediaType") or media_type
        if media_type in (OCI_INDEX, DOCKER_LIST):
            for entry in document.get("manifests", []):
                platform = entry.get("platform", {})
                if platform.get("os") == "linux" and platform.get("architecture") == "amd64":
                    return await self.manifest(image.with_reference(entry["digest"]))
            raise RegistryError(f"{image} has no linux/amd64 image")
        return document, media_type, "sha256:" + hashlib.sha256(raw).hexdigest()

    async def blob(self, image: ImageRef, digest: str) -> bytes:
        response = await self._request("GET", image, f"blobs/{digest}", what="reading a blob")
        async with response:
            return await response.read()

    async def has_blob(self, image: ImageRef, digest: str) -> bool:
        response = await self._request("HEAD", image, f"blobs/{digest}", push=True,
                                       ok=(200, 404), what="looking for a blob")
        response.release()
        return response.status == 200

    # ---- writing -------------------------------------------------------------------

    async def upload(self, image: ImageRef, digest: str,
                     body: Callable[[], Any], *, mount_from: str | None = None) -> None:
        """Upload a blob (monolithic), or mount it from another repository of the same
        registry when `mount_from` is given and the registry agrees."""
        path = "blobs/uploads/"
        if mount_from:
            path += f"?mount={digest}&from={mount_from}"
        started = await self._request("POST", image, path, push=True, ok=(201, 202),
                                      what="starting a blob upload")
        started.release()
        if started.status == 201:
            return  # mounted
        location = started.headers.get("Location", "")
        if location.startswith("/"):
            location = self.base_url(image.registry) + location
        sep = "&" if "?" in location else "?"
        done = await self._request(
            "PUT", image, "", push=True, url=f"{location}{sep}digest={digest}",
            headers={"Content-Type": "application/octet-stream"}, body=body, ok=(201,),
            what="uploading a blob")
        done.release()

    async def put_manifest(self, image: ImageRef, manifest: bytes, media_type: str) -> str:
        digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
        response = await self._request(
            "PUT", image, f"manifests/{image.reference}", push=True,
            headers={"Content-Type": media_type}, body=lambda: manifest, ok=(201,),
            what="pushing the build's manifest")
        response.release()
        said = response.headers.get("Docker-Content-Digest")
        if said and said != digest:
            raise RegistryError(f"{image.registry} stored the manifest as {said}, not {digest}")
        return digest

    async def delete_manifest(self, image: ImageRef) -> None:
        response = await self._request("DELETE", image, f"manifests/{image.reference}",
                                       push=True, ok=(202, 404), what="deleting a build")
        response.release()

    async def copy_blob(self, source: ImageRef, target: ImageRef, digest: str) -> None:
        """Make a base layer present in the target repository, moving as little as can be."""
        if await self.has_blob(target, digest):
            return
        if source.registry == target.registry:
            await self.upload(target, digest, lambda: self._stream(source, digest),
                              mount_from=source.repository)
            return
        await self.upload(target, digest, lambda: self._stream(source, digest))

    async def _stream(self, image: ImageRef, digest: str) -> AsyncIterator[bytes]:
        response = await self._request("GET", image, f"blobs/{digest}", what="reading a layer")
        async with response:
            async for chunk in response.content.iter_chunked(CHUNK):
                yield chunk


# ---- the build's layer and image -------------------------------------------------------


@dataclass(frozen=True)
class Layer:
    path: Path
    digest: str  # of the gzipped tar, as the registry stores it
    diff_id: str  # of the tar, as the image config lists it
    size: int


class _Hashing:
    """A write-only file that hashes and counts what passes through it."""

    def __init__(self, out: Any = None) -> None:
        self.out, self.hash, self.size = out, hashlib.sha256(), 0

    def write(self, data: bytes) -> int:
        self.hash.update(data)
        self.size += len(data)
        if self.out is not None:
            self.out.write(data)
        return len(data)

    def flush(self) -> None:
        if self.out is not None:
            self.out.flush()


def checkout_layer(archive: Path, layer_path: Path, *, max_bytes: int) -> Layer:
    """The checkout archived in a build sandbox (entries under `repo/`) as an image layer
    at /workspace/repo. The archive was written by install's sandbox: only directories,
    regular files, links and hard links inside `repo/` are kept (no devices, FIFOs, paths
    that leave it, set-id bits), owned by the sandbox user, at most `max_bytes`."""
    total = 0
    with open(layer_path, "wb") as raw:
        compressed = _Hashing(raw)
        with gzip.GzipFile(fileobj=compressed, mode="wb", mtime=0) as zipped:  # type: ignore[arg-type]
            plain = _Hashing(zipped)
            with tarfile.open(archive, "r|*") as source, \
                    tarfile.open(fileobj=plain, mode="w|", format=tarfile.PAX_FORMAT) as out:  # type: ignore[call-overload]
                for member in source:
                    name = _inside_repo(member.name)
                    if name is None or not (member.isreg() or member.isdir() or member.issym()
                                            or member.islnk()):
                        continue
                    if member.islnk():
                        target = _inside_repo(member.linkname)
                        if target is None:
                            continue
                        member.linkname = f"workspace/{target}"
                    total += member.size if member.isreg() else 0
                    if total > max_bytes:
                        raise SandboxError(
                            f"the checkout after install is over the {max_bytes / 2**20:.0f} "
                            "MiB cap (HANGAR_SNAPSHOT_MAX_MB); keep caches out of the "
                            "repository directory or raise the cap")
                    member.name = f"workspace/{name}"
                    member.mode &= 0o1777
                    member.uid = member.gid = SANDBOX_UID
                    member.uname = member.gname = ""
                    out.addfile(member, source.extractfile(member) if member.isreg() else None)
    return Layer(layer_path, "sha256:" + compressed.hash.hexdigest(),
                 "sha256:" + plain.hash.hexdigest(), compressed.size)


def _inside_repo(name: str) -> str | None:
    """`repo/…` normalised, or None for a path that is not inside the checkout."""
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if name.startswith("/") or not parts or parts[0] != "repo" or ".." in parts:
        return None
    return "/".join(parts)


async def push_build(registry: Registry, *, base: ImageRef, target: ImageRef, layer: Layer,
                     build_id: str) -> str:
    """Push base + layer as `target` (tagged with the build's id); the image by digest."""
    manifest, media_type, _ = await registry.manifest(base)
    docker = media_type == DOCKER_MANIFEST
    config = json.loads(await registry.blob(base, manifest["config"]["digest"]))
    for descriptor in manifest["layers"]:
        await registry.copy_blob(base, target, descriptor["digest"])

    def layer_body() -> Any:
        return open(layer.path, "rb")  # aiohttp streams it and closes it

    await registry.upload(target, layer.digest, layer_body)
    config.setdefault("rootfs", {"type": "layers", "diff_ids": []})["diff_ids"].append(
        layer.diff_id)
    config.setdefault("history", []).append({
        "created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "created_by": f"hangar environment build {build_id}: /workspace/repo after install",
        "comment": "the checkout added as one layer; nothing was run to make this image",
    })
    config_bytes = json.dumps(config, separators=(",", ":")).encode()
    config_digest = "sha256:" + hashlib.sha256(config_bytes).hexdigest()
    await registry.upload(target, config_digest, lambda: config_bytes)
    new = {
        "schemaVersion": 2,
        "mediaType": DOCKER_MANIFEST if docker else OCI_MANIFEST,
        "config": {"mediaType": DOCKER_CONFIG if docker else OCI_CONFIG,
                   "digest": config_digest, "size": len(config_bytes)},
        "layers": [*manifest["layers"],
                   {"mediaType": DOCKER_LAYER if docker else OCI_LAYER,
                    "digest": layer.digest, "size": layer.size}],
    }
    body = json.dumps(new, separators=(",", ":")).encode()
    digest = await registry.put_manifest(target.with_reference(build_id), body, new["mediaType"])
    return str(target.with_reference(digest))
