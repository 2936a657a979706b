"""What an environment build saves: from "sandbox requested" to "ready to work".

A Python project with ten dependencies (wheels made here, installed by real pip from a
`--find-links` directory in the repository, no network) is made ready three ways, on each
provider:

- bare:    create → clone (no install at all: the floor a build can approach)
- install: create → clone → install (what every sandbox pays without builds)
- build:   create from the build → fetch → checkout → remove untracked leftovers

Prints medians and the ratios the goal names: install / build (goal ≥ 5) and
build / bare (goal ≤ 1.2).

    .venv/bin/python bench/env_build.py [--rounds 5] [--providers local,docker]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import io
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.runs import must_each
from sandbox import snapshots
from sandbox.envspec import EnvSpec
from sandbox.provider import HANGAR_DIR, REPO_DIR, WORKSPACE
from sandbox.providers import get_provider

DEPENDENCIES = 10
MODULE_KB = 300  # each package carries this much code, so unpacking costs something
INSTALL = ("python3 vendor/pip.whl/pip install -q --disable-pip-version-check --no-index "
           "--find-links vendor --target .deps -r requirements.txt")
BUNDLE = f"{HANGAR_DIR}/repo.bundle"


def wheel(name: str) -> tuple[str, bytes]:
    """A small but real wheel: a package with MODULE_KB of code and its dist-info."""
    version = "1.0"
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f"VERSION = {version!r}\n".encode(),
        f"{name}/bulk.py": b"".join(b"def f%d():\n    return %d\n" % (i, i)
                                    for i in range(MODULE_KB * 1024 // 28)),
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: true\n"
                         b"Tag: py3-none-any\n",
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, data in files.items():
            zf.writestr(path, data)
    return f"{name}-{version}-py3-none-any.whl", out.getvalue()


def make_repo(root: Path) -> Path:
    repo = root / "project"
    vendor = repo / "vendor"
    vendor.mkdir(parents=True)
    names = [f"benchdep{i}" for i in range(DEPENDENCIES)]
    for name in names:
        filename, data = wheel(name)
        (vendor / filename).write_bytes(data)
    bundled = Path(sysconfig.get_paths()["stdlib"]) / "ensurepip" / "_bundled"
    pip_wheel = sorted(bundled.glob("pip-*.whl"))[-1]
    (vendor / "pip.whl").write_bytes(pip_wheel.read_bytes())
    (repo / "requirements.txt").write_text("".join(f"{n}==1.0\n" for n in names))
    (repo / ".gitignore").write_text(".deps/\n")
    (repo / "app.py").write_text("import benchdep0\nprint(benchdep0.VERSION)\n")
    git = ["git", "-C", str(repo)]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "p"],
                   check=True)
    bundle = root / "repo.bundle"
    subprocess.run([*git, "bundle", "create", "-q", str(bundle), "main"], check=True)
    return bundle


async def must(provider, sb, argv, cwd=WORKSPACE, timeout=300) -> None:
    result = await provider.run(sb, argv, cwd=cwd, timeout=timeout)
    if result.exit_code != 0:
        raise RuntimeError(f"{argv}: {result.output[-500:]}")


async def clone(provider, sb, bundle: bytes) -> None:
    await provider.copy_in(sb, {BUNDLE: bundle})
    await must(provider, sb, ["git", "clone", "-q", "--branch", "main", BUNDLE, REPO_DIR])


async def ready(provider, spec, bundle: bytes, mode: str, build_ref: str | None) -> float:
    started = time.perf_counter()
    start_spec = spec
    if mode == "build":
        start_spec = spec.model_copy(
            update={"image": snapshots.image_for(spec.provider, build_ref, spec.image)})
    sb = await provider.create(start_spec, {"hangar.bench": "env-build"})
    try:
        if mode == "build":
            unpack = await snapshots.restore(provider, sb, build_ref)
            await provider.copy_in(sb, {BUNDLE: bundle})
            # As a run starts from a build (app.runs.prepare_sandbox): one exec.
            await must_each(provider, sb, [
                *((argv, "unpack") for argv in unpack),
                (["cd", REPO_DIR], "cd"),
                (["git", "fetch", "-q", BUNDLE, "main"], "fetch"),
                (["git", "checkout", "-q", "FETCH_HEAD"], "checkout"),
                (["git", "clean", "-fdq"], "clean"),
            ])
        else:
            await clone(provider, sb, bundle)
            if mode == "install":
                await must(provider, sb, ["sh", "-c", INSTALL], cwd=REPO_DIR)
        elapsed = time.perf_counter() - started
        if mode != "bare":  # the dependencies are really there
            await must(provider, sb, ["sh", "-c", "PYTHONPATH=.deps python3 app.py"],
                       cwd=REPO_DIR)
        return elapsed
    finally:
        await provider.destroy(sb)


async def make_build(provider, spec, bundle: bytes, dest: Path) -> str:
    sb = await provider.create(spec, {"hangar.bench": "env-build"})
    try:
        await clone(provider, sb, bundle)
        await must(provider, sb, ["sh", "-c", INSTALL], cwd=REPO_DIR)
        return await snapshots.save(provider, sb, build_id="bld-bench", base_image=spec.image,
                                    dest_dir=dest, max_bytes=512 << 20)
    finally:
        await provider.destroy(sb)


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--providers", default="local,docker")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hangar-bench-") as tmp:
        root = Path(tmp)
        bundle = make_repo(root).read_bytes()
        print(f"a project with {DEPENDENCIES} dependencies of {MODULE_KB} KiB each, "
              f"installed by pip; {args.rounds} rounds, medians")
        print(f"{'provider':10} {'bare':>9} {'install':>9} {'build':>9} "
              f"{'install/build':>14} {'build/bare':>11}")
        for name in args.providers.split(","):
            if name == "local":
                provider = get_provider("local", root=root / "sandboxes")
                spec = EnvSpec(name="bench", provider="local", network="none")
            elif name == "docker":
                provider = get_provider("docker", instance="bench")
                spec = EnvSpec(name="bench", provider="docker", image="hangar-base:1",
                               network="none")
            else:
                print(f"{name}: not benchmarked here (no cluster)")
                continue
            try:
                ref = await make_build(provider, spec, bundle, root / "builds")
            except Exception as exc:  # no engine, no image: say so and go on
                print(f"{name}: skipped ({exc})")
                continue
            try:
                modes = ("bare", "install", "build")
                for mode in modes:
                    await ready(provider, spec, bundle, mode, ref)  # warm-up
                samples: dict[str, list[float]] = {mode: [] for mode in modes}
                # Interleaved, so the machine's load drifting over the run weighs on every
                # mode alike.
                for _ in range(args.rounds):
                    for mode in modes:
                        samples[mode].append(await ready(provider, spec, bundle, mode, ref))
                medians = {mode: statistics.median(samples[mode]) for mode in modes}
            finally:
                await snapshots.drop(provider, ref)
            bare, install, build = (medians[m] for m in ("bare", "install", "build"))
            print(f"{name:10} {bare * 1000:7.0f}ms {install * 1000:7.0f}ms {build * 1000:7.0f}ms "
                  f"{install / build:13.1f}x {build / bare:10.2f}x")
    print("goals: install/build >= 5x, build/bare <= 1.2x")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
