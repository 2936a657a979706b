"""Environments that carry their agent: an environment's own image, built from its recipe.

`image_recipe` says what goes on top of a base image: Debian packages (a fresh rootfs made
by scripts/base-image.sh) and the pinned agent CLIs hangar itself installed (their native
binaries, copied in). The image is tagged with a digest of the recipe and of those
binaries, so it is built once and again only when either changes.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import subprocess
import tarfile
from pathlib import Path
from typing import Any

from sandbox.envspec import EnvSpec, ImageRecipe
from sandbox.provider import SandboxError

AGENT_CLIS_DIR = Path(os.environ.get("HANGAR_AGENT_CLIS_DIR", "/usr/local/lib/hangar-agent-clis"))
IN_IMAGE_DIR = "/usr/local/lib/hangar-agent-clis"
BASE_IMAGE_SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "base-image.sh"
# The companions a CLI needs beside it (codex runs a helper of its own).
CLI_FILES = {"claude": ("claude",), "codex": ("codex", "codex-code-mode-host")}


def cli_files(recipe: ImageRecipe, clis_dir: Path = AGENT_CLIS_DIR) -> list[Path]:
    files = []
    for cli in recipe.agent_clis:
        for i, name in enumerate(CLI_FILES[cli]):
            path = clis_dir / name
            if path.is_file():
                files.append(path)
            elif i == 0:
                raise SandboxError(
                    f"the {cli} CLI is not installed at {path}; scripts/setup.sh installs the "
                    "pinned agent CLIs there")
    return files


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def recipe_tag(name: str, recipe: ImageRecipe, files: list[Path]) -> str:
    """`hangar-env-<name>:<digest>` of the recipe and the exact CLI binaries."""
    material = {"recipe": recipe.model_dump(mode="json"),
                "files": {p.name: _file_digest(p) for p in files}}
    digest = hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:12]
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in name.lower())
    return f"hangar-env-{safe}:{digest}"


def _base_image(recipe: ImageRecipe, tag: str) -> str:
    """The recipe's base, or a fresh rootfs with its extra Debian packages."""
    if not recipe.packages:
        return recipe.base
    base = tag.replace("hangar-env-", "hangar-env-rootfs-", 1)
    result = subprocess.run([str(BASE_IMAGE_SCRIPT), base],
                            env={**os.environ, "HANGAR_BASE_EXTRA": ",".join(recipe.packages)},
                            capture_output=True, text=True, timeout=1800)
    if result.returncode != 0:
        raise SandboxError(f"building a rootfs with {', '.join(recipe.packages)} failed: "
                           f"{result.stderr[-600:]}")
    return base


def build_image(client: Any, spec: EnvSpec, clis_dir: Path = AGENT_CLIS_DIR) -> tuple[str, bool]:
    """Build the environment's image unless one of this digest exists: (tag, built now)."""
    recipe = spec.image_recipe
    if recipe is None:
        raise SandboxError(f"environment {spec.name} has no image_recipe; it uses "
                           f"image: {spec.image}")
    files = cli_files(recipe, clis_dir)
    tag = recipe_tag(spec.name, recipe, files)
    try:
        client.images.get(tag)
        return tag, False
    except Exception as exc:
        if type(exc).__name__ != "ImageNotFound":
            raise
    base = _base_image(recipe, tag)
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        lines = [f"FROM {base}"]
        if files:
            lines += [f"COPY agent-clis/ {IN_IMAGE_DIR}/",
                      f"ENV PATH={IN_IMAGE_DIR}:/usr/local/sbin:/usr/local/bin:/usr/sbin:"
                      "/usr/bin:/sbin:/bin"]
        dockerfile = ("\n".join(lines) + "\n").encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        tar.addfile(info, io.BytesIO(dockerfile))
        for path in files:
            entry = tar.gettarinfo(str(path), arcname=f"agent-clis/{path.name}")
            entry.mode = 0o755
            entry.uid = entry.gid = 0
            with open(path, "rb") as f:
                tar.addfile(entry, f)
    context.seek(0)
    client.images.build(fileobj=context, custom_context=True, tag=tag, rm=True, forcerm=True,
                        network_mode="none", labels={"hangar.env": spec.name})
    return tag, True


_locks: dict[str, asyncio.Lock] = {}


async def ensure(provider: Any, spec: EnvSpec) -> EnvSpec:
    """The spec with its image set, building the recipe's image first when it is missing."""
    if spec.image_recipe is None or spec.provider != "docker":
        return spec
    lock = _locks.setdefault(spec.name, asyncio.Lock())
    async with lock:
        tag, _ = await asyncio.to_thread(build_image, provider.client, spec)
    return spec.model_copy(update={"image": tag})
