"""Keeping a build's checkout, and starting a sandbox from it, per provider.

A build keeps `/workspace/repo` only (nothing of `$HOME`). Docker: a new image, the
environment's image plus the archived checkout added with no RUN step; a new sandbox's
empty `/workspace` volume is filled from it by Docker. Local: the checkout as a directory
in hangar's data directory; a new sandbox gets a copy of it (a spare made beforehand, moved
into place, else one `cp -a` on the host): a copy, never a link, so nothing a sandbox does
reaches the kept build. Kubernetes: an image pushed to the operator's registry, the
environment's image plus the checkout as one layer (sandbox.registry). Everything in the
checkout was written by the repository's install step: links in it are copied as links,
never followed, and no sandbox ever sees the kept directory itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import secrets
import shutil
import stat
import tarfile
from pathlib import Path
from typing import Any

import aiohttp

from sandbox import registry, secretscan
from sandbox.provider import (
    BUILD_IMAGE_REPO,
    BUILD_LABEL,
    DROPPED_PREFIX,
    HANGAR_DIR,
    REPO_DIR,
    WORKSPACE,
    Sandbox,
    SandboxError,
)

log = logging.getLogger(__name__)

CHUNK = 1 << 20


class SnapshotTooLarge(SandboxError):
    pass


class SecretInCheckout(SandboxError):
    """install left a build secret in what the build would keep."""

    def __init__(self, hits: list[secretscan.Hit]):
        super().__init__(
            f"install left a build secret in the checkout ({secretscan.describe(hits)}), "
            "and every later sandbox would start from it, so hangar keeps no such build: "
            "make install use build secrets only in its own environment (a registry login "
            "in $HOME, not in the repository or .git)")
        self.hits = hits


def too_large(size: int, max_bytes: int) -> SnapshotTooLarge:
    return SnapshotTooLarge(
        f"the checkout after install is {size / 2**20:.0f} MiB, over the "
        f"{max_bytes / 2**20:.0f} MiB cap (HANGAR_SNAPSHOT_MAX_MB); keep caches out of the "
        "repository directory or raise the cap"
    )


async def checkout_size(provider: Any, sb: Sandbox) -> int:
    result = await provider.run(sb, ["du", "-sb", REPO_DIR], cwd=WORKSPACE, timeout=300)
    try:
        return int(result.output.split()[0])
    except (IndexError, ValueError):
        raise SandboxError(f"could not measure {REPO_DIR}: {result.output[-300:]!r}") from None


def unsupported(provider: Any) -> str | None:
    """Why builds cannot be kept on this provider, or None when they can."""
    if provider.name in ("local", "docker"):
        return None
    if provider.name == "kubernetes" and getattr(provider, "build_registry", None):
        return None
    if provider.name == "kubernetes":
        return ("environment builds on kubernetes are pushed to a registry, and none is set: "
                "set HANGAR_BUILD_REGISTRY to a repository (registry.example.com/hangar/builds) "
                "and HANGAR_BUILD_REGISTRY_AUTH to a Docker config file that may push there; "
                "until then sandboxes start from the environment's image, and the agent is "
                "told to run install")
    return (f"environment builds are not available on the {provider.name} provider; its "
            "sandboxes start from the environment's image, and the agent is told to run install")


async def save(provider: Any, sb: Sandbox, *, build_id: str, base_image: str | None,
               dest_dir: Path, max_bytes: int, secrets: dict[str, str] | None = None) -> str:
    """Keep the sandbox's checkout; the reference a later sandbox starts from.

    What is kept is read first for each of `secrets` (the build secrets, by name), in
    every encoding (sandbox.secretscan): a checkout that holds one raises
    SecretInCheckout and nothing is kept. Set-user-id and set-group-id bits are dropped."""
    if why := unsupported(provider):
        raise SandboxError(why)
    await asyncio.to_thread(dest_dir.mkdir, parents=True, exist_ok=True)
    secrets = secrets or {}
    if provider.name == "kubernetes":  # the cap is kept while the archive streams out
        return await _save_kubernetes(provider, sb, build_id, base_image, dest_dir, max_bytes,
                                      secrets)
    size = await checkout_size(provider, sb)
    if size > max_bytes:
        raise too_large(size, max_bytes)
    if provider.name == "local":
        return await _save_local(provider, sb, build_id, dest_dir, max_bytes, secrets)
    return await _save_docker(provider, sb, build_id, base_image, dest_dir, max_bytes, secrets)


async def _refuse_secrets(scan: Any, *args: Any, **kwargs: Any) -> None:
    hits = await asyncio.to_thread(scan, *args, **kwargs)
    if hits:
        raise SecretInCheckout(hits)


async def _save_kubernetes(provider: Any, sb: Sandbox, build_id: str, base_image: str | None,
                           dest_dir: Path, max_bytes: int, secrets: dict[str, str]) -> str:
    """Stream the checkout out of the build pod, make it a layer on the environment's
    image and push that to the build registry (sandbox.registry); the image by digest."""
    if not base_image:
        raise SandboxError("a kubernetes build needs the environment's image")
    archive = dest_dir / f"{build_id}.tar"
    layer_path = dest_dir / f"{build_id}.layer.tar.gz"
    try:
        await provider.export_checkout(sb, archive, max_bytes + (64 << 20))
        await _refuse_secrets(secretscan.scan_tar, archive, secrets, strip="repo/")
        # The layer drops set-id bits, devices and anything outside the checkout.
        layer = await asyncio.to_thread(registry.checkout_layer, archive, layer_path,
                                        max_bytes=max_bytes)
        credentials = await asyncio.to_thread(registry.load_credentials,
                                              provider.build_registry_auth)
        async with _registry_session() as session:
            return await registry.push_build(
                registry.Registry(session, credentials), base=registry.ImageRef.parse(base_image),
                target=registry.ImageRef.parse(provider.build_registry), layer=layer,
                build_id=build_id)
    finally:
        for path in (archive, layer_path):
            await asyncio.to_thread(path.unlink, missing_ok=True)


async def _save_local(provider: Any, sb: Sandbox, build_id: str, dest_dir: Path,
                      max_bytes: int, secrets: dict[str, str]) -> str:
    """Keep the build sandbox's checkout as `<dest_dir>/<build id>/repo`.

    Nothing runs in the build sandbox any more (`run` ends every process it started with
    it), so the tree copied is the one measured against the cap.
    """
    dest = dest_dir / build_id
    part = dest_dir / f"{build_id}.part"
    await asyncio.to_thread(shutil.rmtree, part, True)
    await asyncio.to_thread(part.mkdir, 0o700)
    source = provider.root / sb.id / "workspace" / "repo"
    try:
        await copy_tree(source, part / "repo")
        await _refuse_secrets(secretscan.scan_tree, part / "repo", secrets)
        await asyncio.to_thread(os.replace, part, dest)
        provider.spare_copies.refill(dest)  # the first sandbox from it starts without a copy
    except BaseException:
        await asyncio.to_thread(shutil.rmtree, part, True)
        raise
    return str(dest)


async def copy_tree(source: Path, dest: Path) -> None:
    """Copy a directory tree in one process: links as links (never followed), FIFOs and
    sockets made anew (never opened), hard links inside it kept, times and modes kept
    except set-user-id and set-group-id bits, which are dropped (a sandbox's file owned by
    hangar's user must not run as hangar's user). `--reflink=auto` shares blocks, copy on
    write, where the filesystem can."""
    await _run("copying the checkout", "cp", "-a", "--reflink=auto", "--no-target-directory",
               "--", str(source), str(dest))
    await drop_set_id_bits(dest)


async def drop_set_id_bits(root: Path) -> None:
    """Clear set-user-id and set-group-id on everything under root (links untouched)."""
    await _run("dropping set-id bits", "find", str(root), "-perm", "/6000", "!", "-type", "l",
               "-exec", "chmod", "ug-s", "--", "{}", "+")


async def _run(what: str, *argv: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE)
    try:
        _, err = await proc.communicate()
    except BaseException as exc:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        if not isinstance(exc, GeneratorExit):  # closed unfinished, its loop gone: no wait
            await proc.wait()
        raise
    if proc.returncode != 0:
        raise SandboxError(f"{what} failed: {err.decode(errors='replace')[-500:]}")


class SpareCopies:
    """One spare copy of each kept checkout that sandboxes start from, made while nobody
    waits: a sandbox takes it by a rename (no data copied while it starts), and the next
    spare is made in the background. Without one (two sandboxes at once, another
    filesystem), the sandbox's copy is made while it starts, as it is the first time."""

    def __init__(self) -> None:
        self._making: dict[Path, asyncio.Task[None]] = {}
        # Asked again while one was being made: that one may be taken the moment it is
        # ready, before its maker ends, so another is made once it has ended.
        self._again: set[Path] = set()

    async def take(self, kept: Path, dest: Path) -> bool:
        """Move a spare copy of `kept`'s checkout to `dest`; False when there is none."""
        def move() -> bool:
            for spare in sorted((kept / "spare").glob("copy-*")):
                try:
                    os.rename(spare, dest)
                except FileNotFoundError:  # another sandbox took it first
                    continue
                except OSError:  # another filesystem: copy instead
                    return False
                return True
            return False

        return await asyncio.to_thread(move)

    def refill(self, kept: Path) -> None:
        """Start making a spare copy of `kept`'s checkout, or once the one being made is
        (making none when a spare is there by then)."""
        if kept in self._making:
            self._again.add(kept)
            return
        task = asyncio.get_running_loop().create_task(self._make(kept))
        self._making[kept] = task
        task.add_done_callback(lambda done: self._made(kept, done))

    def _made(self, kept: Path, task: asyncio.Task[None]) -> None:
        self._making.pop(kept, None)
        again = kept in self._again
        self._again.discard(kept)
        if task.cancelled():
            return
        if task.exception() is not None:
            log.warning("could not make a spare copy of the build at %s: %s", kept,
                        task.exception())
        elif again:
            self.refill(kept)

    async def _make(self, kept: Path) -> None:
        spares = kept / "spare"
        await asyncio.to_thread(spares.mkdir, exist_ok=True)
        for stale in spares.glob("part-*"):  # cut short by a stop: this is the only maker
            await asyncio.to_thread(shutil.rmtree, stale, True)
        if any(spares.glob("copy-*")):
            # One was made while the sandbox that asked copied the checkout itself: one
            # spare is kept, not one per start.
            return
        name = secrets.token_hex(6)
        part = spares / f"part-{name}"
        try:
            await copy_tree(kept / "repo", part)
            await asyncio.to_thread(os.rename, part, spares / f"copy-{name}")
        except BaseException:
            await asyncio.to_thread(shutil.rmtree, part, True)
            raise

    def forget(self, kept: Path) -> None:
        """Stop making a spare of a build that is being removed."""
        self._again.discard(kept)
        if task := self._making.get(kept):
            task.cancel()

    async def settle(self) -> None:
        """Wait for the spares being made, and those asked for meanwhile (tests,
        benchmarks, shutdown)."""
        while self._making:
            # Each task's own callback (which may start the next) runs before gather's.
            await asyncio.gather(*self._making.values(), return_exceptions=True)


def copy_regular_file(source: Path, dest: Path, limit: int) -> None:
    """Copy a file that must be a regular file (not followed, never blocking), at most `limit`."""
    fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SandboxError(f"{source.name} is not a regular file; refusing to read it")
        if info.st_size > limit:
            raise too_large(info.st_size, limit)
        tmp = dest.with_suffix(".part")
        with open(tmp, "wb") as out:
            copied = 0
            while chunk := os.read(fd, CHUNK):
                copied += len(chunk)
                if copied > limit:
                    raise too_large(copied, limit)
                out.write(chunk)
        os.replace(tmp, dest)
    finally:
        os.close(fd)


async def _save_docker(provider: Any, sb: Sandbox, build_id: str, base_image: str | None,
                       dest_dir: Path, max_bytes: int, secrets: dict[str, str]) -> str:
    if not base_image:
        raise SandboxError("a docker build needs the environment's image")
    exported = dest_dir / f"{build_id}.export.tar"
    archive = dest_dir / f"{build_id}.tar"
    tag = f"{BUILD_IMAGE_REPO}:{build_id}"

    def export_and_build() -> str:
        container = provider._container(sb)
        stream, _ = container.get_archive(REPO_DIR)
        written = 0
        try:
            with open(exported, "wb") as out:
                for chunk in stream:
                    written += len(chunk)
                    if written > max_bytes + (64 << 20):
                        raise too_large(written, max_bytes)
                    out.write(chunk)
            hits = secretscan.scan_tar(exported, secrets, strip="repo/")
            if hits:
                raise SecretInCheckout(hits)
            without_set_id_bits(exported, archive)
        finally:
            exported.unlink(missing_ok=True)
        context = io.BytesIO()
        with tarfile.open(fileobj=context, mode="w") as tar:
            dockerfile = f"FROM {base_image}\nADD repo.tar {WORKSPACE}/\n".encode()
            info = tarfile.TarInfo("Dockerfile")
            info.size = len(dockerfile)
            tar.addfile(info, io.BytesIO(dockerfile))
            tar.add(archive, arcname="repo.tar")
        context.seek(0)
        try:
            provider.client.images.build(
                fileobj=context, custom_context=True, tag=tag, rm=True, forcerm=True,
                network_mode="none", labels={BUILD_LABEL: build_id},
            )
        finally:
            archive.unlink(missing_ok=True)
        return tag

    return await asyncio.to_thread(export_and_build)


def without_set_id_bits(source: Path, dest: Path) -> None:
    """A copy of a tar archive whose members carry no set-user-id or set-group-id bit."""
    with tarfile.open(source, "r|*") as tar_in, tarfile.open(dest, "w|") as tar_out:
        for member in tar_in:
            member.mode &= ~0o6000
            tar_out.addfile(member, tar_in.extractfile(member) if member.isreg() else None)


def _registry_session() -> aiohttp.ClientSession:
    # No limit on the whole call (a layer may be 512 MiB), only on a registry gone quiet.
    return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=30,
                                                               sock_read=300))


def docker_image_id(provider: Any, image: str) -> str:
    """The id the docker engine holds an image's name at (docker: what a container starts
    from), so a rebuilt or retagged environment image rebuilds the builds made from it.
    Blocks: call it in a thread."""
    return provider.client.images.get(image).id


async def image_digest(provider: Any, image: str) -> str:
    """The digest the registry holds an image's name at (kubernetes: what a pod pulls), so
    a retagged environment image rebuilds the builds made from it."""
    credentials = await asyncio.to_thread(registry.load_credentials,
                                          provider.build_registry_auth)
    async with _registry_session() as session:
        _, _, digest = await registry.Registry(session, credentials).manifest(
            registry.ImageRef.parse(image))
    return digest


def image_for(provider_name: str, ref: str, spec_image: str | None) -> str | None:
    """The image a sandbox of this build starts from (docker, kubernetes: the build's own)."""
    return ref if provider_name in ("docker", "kubernetes") else spec_image


async def restore(provider: Any, sb: Sandbox, ref: str) -> list[list[str]]:
    """Put a build's checkout at /workspace/repo of a new sandbox; the commands, run in it
    from /workspace, that finish the job (none: the copy is made before it starts; docker:
    none either, the image already holds it). The caller runs them in the same exec as its
    fetch and checkout: each exec costs."""
    if provider.name != "local":
        return []
    workspace = provider.root / sb.id / "workspace"
    kept = Path(ref)
    if kept.suffix == ".tar":  # a build kept as an archive, before builds were directories
        target = workspace / ".hangar" / "restore.tar"
        await asyncio.to_thread(copy_regular_file, kept, target, 1 << 40)
        return [["tar", "--extract", f"--file={HANGAR_DIR}/restore.tar", "--directory",
                 WORKSPACE], ["rm", "-f", f"{HANGAR_DIR}/restore.tar"]]
    if not (kept / "repo").is_dir():
        raise SandboxError(f"the environment build at {ref} is gone; build again with "
                           "`hangar env build-repo`")
    # A copy, never a link: nothing a sandbox does reaches the kept build.
    spares: SpareCopies = provider.spare_copies
    if not await spares.take(kept, workspace / "repo"):
        await copy_tree(kept / "repo", workspace / "repo")
    spares.refill(kept)
    return []


def _drop_docker_image(client: Any, ref: str) -> None:
    """Remove a build's image, or, while a sandbox still runs from it, keep it only under a
    name that says it is dropped (hangar-build:dropped-<build>) until the last such
    sandbox ends: the docker provider removes it then. Untagged, docker would keep it for
    good; kept under its build's name, nothing would ever remove it."""
    import docker.errors

    _, _, build = ref.rpartition(":")
    # Another hangar on the engine, removing dropped builds' images, may remove the dropped
    # name between this tag and the untag after it: the untag is then refused, the build's
    # name being the last while a sandbox runs from the image, and the image is named as
    # dropped again.
    for _ in range(3):
        try:
            client.images.remove(ref)
            return
        except docker.errors.NotFound:
            return
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # 409: a sandbox still runs from it
                log.warning("could not remove the build image %s: %s", ref, exc)
                return
        try:
            client.images.get(ref).tag(BUILD_IMAGE_REPO, f"{DROPPED_PREFIX}{build}")
        except docker.errors.NotFound:
            return
        except docker.errors.APIError as exc:
            log.warning("could not name the build image %s as dropped: %s", ref, exc)
            return
    log.warning("the build image %s is kept: another hangar keeps removing its dropped name",
                ref)


async def drop(provider: Any, ref: str | None) -> None:
    """Remove what a dropped build holds; a missing one is fine."""
    if not ref:
        return
    if provider.name == "kubernetes":
        async with _registry_session() as session:
            credentials = await asyncio.to_thread(registry.load_credentials,
                                                  provider.build_registry_auth)
            try:
                await registry.Registry(session, credentials).delete_manifest(
                    registry.ImageRef.parse(ref))
            except registry.RegistryError as exc:  # kept: the registry says why
                log.warning("could not delete the build image %s: %s", ref, exc)
    elif provider.name == "docker":
        await asyncio.to_thread(_drop_docker_image, provider.client, ref)
    elif provider.name == "local":
        kept = Path(ref)
        if kept.suffix == ".tar":
            await asyncio.to_thread(kept.unlink, missing_ok=True)
        else:
            provider.spare_copies.forget(kept)
            await asyncio.to_thread(shutil.rmtree, kept, True)


async def present(provider: Any, ref: str | None) -> bool:
    """Whether what a build kept is still there to start a sandbox from (local: its
    checkout; docker: its image). True when the provider cannot tell: starting from it
    says so then."""
    if not ref:
        return False
    if provider.name == "local":
        kept = Path(ref)
        there = kept.is_file if kept.suffix == ".tar" else (kept / "repo").is_dir
        return await asyncio.to_thread(there)
    if provider.name == "docker":
        import docker

        def look() -> bool:
            try:
                provider.client.images.get(ref)
            except docker.errors.ImageNotFound:
                return False
            except Exception:  # the engine did not answer: it is not known to be gone
                return True
            return True

        return await asyncio.to_thread(look)
    return True
