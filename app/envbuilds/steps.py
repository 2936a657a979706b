"""Environment builds, the steps: run a queued build in a sandbox, start sandboxes from builds.

A build runs in an ordinary sandbox of its environment with a fetch-only proxy token and
the operator's build secrets in install's environment only: no model credential, no push
token. It never runs while anyone waits: an agent's sandbox only notices that the active
build is behind and queues one for the next sandbox.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import aiohttp

from app.envbuilds import rows as builds
from app.envbuilds.rows import EnvBuildRow
from app.models import changed
from sandbox import envimage, snapshots
from sandbox.envbuild import (
    BuildKey,
    BuildState,
    Fallback,
    StartPlan,
    config_digest,
    lockfile_grep,
    lockfile_ids,
    parse_ls_tree,
    rebuild_reason,
    start_plan,
)
from sandbox.provider import HANGAR_DIR, HOME_DIR, REPO_DIR, WORKSPACE

if TYPE_CHECKING:
    from app.envbuilds.context import EnvbuildsContext
    from app.store import Store
    from sandbox.envspec import EnvSpec
    from sandbox.fleet import Providers

log = logging.getLogger(__name__)

BUILD_ROLE = "build"


class SandboxBuilds(Protocol):
    """What a sandbox's start asks of the builds uses of the engine (runs calls these with
    its own narrow context): the build rows, hangar's environment specs, the providers (an
    image's id), and wake (a build queued)."""

    store: Store
    envs: dict[str, EnvSpec]
    providers: Providers

    def wake(self, *row_ids: str) -> None: ...


def snapshot_dir(engine: EnvbuildsContext) -> Path:
    return Path(engine.settings.data_dir).resolve() / "envbuilds"


async def image_id(engine: SandboxBuilds, spec: Any) -> str:
    """The id of the environment's image (docker: the engine's; kubernetes: the registry's
    digest), so a rebuilt or retagged image rebuilds the builds."""
    if spec.provider == "docker":
        provider = engine.providers["docker"]
        spec = await envimage.ensure(provider, spec)

        def look() -> str:
            return snapshots.docker_image_id(provider, spec.image)

        try:
            return await asyncio.to_thread(look)
        except Exception:
            return spec.image
    if spec.provider == "kubernetes" and spec.image:
        provider = engine.providers["kubernetes"]
        if snapshots.unsupported(provider) is None:  # builds are pushed: ask the registry
            try:
                return await snapshots.image_digest(provider, spec.image)
            except (snapshots.SandboxError, aiohttp.ClientError, OSError) as exc:
                log.warning("could not resolve %s to a digest: %s", spec.image, exc)
    return spec.image or f"{spec.provider}-host"


async def key_for(engine: SandboxBuilds, spec: Any, repo: str, tree_listing: str) -> BuildKey:
    return BuildKey(
        repo=repo, environment=spec.name, provider=spec.provider,
        image_id=await image_id(engine, spec),
        config_digest=config_digest(spec.install, spec.build_secrets, spec.lockfiles),
        lockfiles=tuple(lockfile_ids(parse_ls_tree(tree_listing), spec.lockfiles).items()),
    )


CONFIG_LIMIT = 65536


@dataclass(frozen=True)
class Probe:
    """What one exec in a fresh checkout tells: the default branch's `.github/hangar.yml`
    and the lockfile entries of the default branch and of the checked-out head."""

    config: str
    default_tree: str
    head_tree: str

    def head_lockfiles(self, spec: Any) -> dict[str, str]:
        return lockfile_ids(parse_ls_tree(self.head_tree), spec.lockfiles)


def probe_argv(default_branch: str, spec: Any) -> list[str]:
    script = (
        'git show "origin/$1:.github/hangar.yml" 2>/dev/null | head -c "$3"; printf "\\001"; '
        'git ls-tree -r -z "origin/$1" | grep -zE "$2"; printf "\\001"; '
        'git ls-tree -r -z HEAD | grep -zE "$2"; true'
    )
    return ["sh", "-c", script, "probe", default_branch, lockfile_grep(spec.lockfiles),
            str(CONFIG_LIMIT)]


def parse_probe(output: str) -> Probe:
    config, _, rest = output.partition("\x01")
    default_tree, _, head_tree = rest.partition("\x01")
    return Probe(config[:CONFIG_LIMIT], default_tree, head_tree)


def spec_from_config(engine: SandboxBuilds, config_text: str, *, fallback: Any,
                     default: str) -> Any:
    """The environment the default branch's config asks for; `fallback` when it is broken."""
    from app.repoconfig import parse_repo_config
    from sandbox.envspec import EnvSpecError, select_environment

    config, _ = parse_repo_config(config_text)
    try:
        return select_environment(engine.envs, config.environment, default=default)
    except EnvSpecError:
        return fallback


def installed_for(plan: StartPlan, build: EnvBuildRow | None, spec: Any) -> bool:
    """True when the build this sandbox started from has exactly what `spec` would install."""
    return (build is not None and not plan.lockfiles_differ
            and build.config_digest == config_digest(spec.install, spec.build_secrets,
                                                     spec.lockfiles))


def lane_of(repo: str, spec: Any) -> str:
    return builds.lane_id(repo, spec.name, spec.provider)


def plan_for(engine: SandboxBuilds, repo: str, spec: Any, key: BuildKey | None = None,
             branch_lockfiles: dict[str, str] | None = None) -> tuple[StartPlan,
                                                                      EnvBuildRow | None]:
    """What a sandbox of this repository and environment starts from, and that build's row."""
    lid = lane_of(repo, spec)
    rows = builds.history(engine.store, lid)
    plan = start_plan([r.as_rule() for r in rows], key, has_install=bool(spec.install),
                      pinned_id=builds.lane(engine.store, lid).pinned_id,
                      branch_lockfiles=branch_lockfiles)
    row = next((r for r in rows if plan.build and r.id == plan.build.id), None)
    return plan, row


def maybe_queue(engine: SandboxBuilds, key: BuildKey, spec: Any, *, installation_id: int | None,
                clone_url: str, default_branch: str, asked_by: str | None = None) -> str | None:
    """Queue a build when the lane's builds are behind `key`; the new build's id or None."""
    if not spec.install:
        return None
    rows = builds.history(engine.store, builds.lane_id(*key.lane))
    reason = rebuild_reason([r.as_rule() for r in rows], key, asked=asked_by is not None)
    if reason is None:
        return None
    row = builds.queue_build(
        engine.store, key, image_id=key.image_id, install=spec.install, reason=reason,
        asked_by=asked_by, installation_id=installation_id, clone_url=clone_url,
        default_branch=default_branch, spec=spec.model_dump(),
    )
    engine.wake(row.id)
    return row.id


async def usable_build(engine: SandboxBuilds, provider: Any, repo: str,
                       spec: Any) -> EnvBuildRow | None:
    """The build a new sandbox of this repository starts from, when what it kept is still
    there. A build whose image or kept checkout is gone is marked gone (the next sandbox
    after it queues a rebuild, as for a build that is behind) and the next good one, or
    the environment's own image, takes its place."""
    while True:
        _, build = plan_for(engine, repo, spec)
        if build is None or await snapshots.present(provider, build.image):
            return build
        mark_gone(engine, build)


def mark_gone(engine: SandboxBuilds, build: EnvBuildRow) -> None:
    builds.save(engine.store, changed(build, **{"state": BuildState.gone}))
    builds.audit(engine.store, build.repo, "env.build.gone",
                    f"{build.id} v{build.version}: {build.image} is gone", None)
    log.warning("environment build %s is gone (%s); sandboxes start without it until it is "
                "rebuilt", build.id, build.image, extra={"build": build.id})


def build_slot_free(engine: EnvbuildsContext, row: EnvBuildRow) -> bool:
    running = [r for r in engine.store.all(builds.BUILD, EnvBuildRow, active=True)
               if r.state is BuildState.running and r.id != row.id]
    if len(running) >= engine.settings.env_builds_concurrency:
        return False
    return not any(r.repo.lower() == row.repo.lower() for r in running)


async def request_build(engine: EnvbuildsContext, repo: str, *, who: str) -> EnvBuildRow | None:
    """Someone asked for a build now (`hangar env build-repo`, the API): queue one for the
    repository's default branch, even when its last build with the same key failed.
    None when one is already queued or running."""
    from app.envbuilds.environments import environment_for
    from app.models import Thread

    app_client = await engine.github.app_client()
    installation = await app_client.getitem(f"/repos/{repo}/installation",
                                            jwt=engine.github.jwt())
    ops = await engine.github.repo_ops(
        Thread(repo=repo, number=0, installation_id=installation["id"]))
    info = await ops.gh.getitem(ops.base)
    spec, _ = await environment_for(engine, ops, info["default_branch"])
    if not spec.install:
        raise builds.BuildError(
            f"{repo}'s environment {spec.name!r} has no install step, so there is nothing to "
            "build; set environment.install in .github/hangar.yml")
    lid = lane_of(repo, spec)
    if any(r.state in (BuildState.queued, BuildState.running)
           for r in builds.history(engine.store, lid)):
        return None
    # The key's lockfiles are read when the build has cloned; until then it is the ask's own.
    key = BuildKey(repo=info["full_name"], environment=spec.name, provider=spec.provider,
                   image_id=await image_id(engine, spec),
                   config_digest=config_digest(spec.install, spec.build_secrets,
                                               spec.lockfiles),
                   lockfiles=(("(asked)", str(time.time())),))
    row = builds.queue_build(
        engine.store, key, image_id=key.image_id, install=spec.install, reason="asked",
        asked_by=who, installation_id=installation["id"], clone_url=info["clone_url"],
        default_branch=info["default_branch"], spec=spec.model_dump())
    engine.wake(row.id)
    return row


async def advance_build(engine: EnvbuildsContext, build_id: str) -> None:
    row = engine.store.get(builds.BUILD, build_id, EnvBuildRow)
    if row is None or row.state not in (BuildState.queued, BuildState.running):
        return
    if row.state is BuildState.running:
        # Only a restart leaves a build running with no step on it: run it again.
        await _destroy_leftovers(engine, row)
    elif not build_slot_free(engine, row):
        return  # a finishing build wakes the queued ones
    if not engine.fleet.reserve(f"{row.id}:build", waiter=row.id):
        return  # every sandbox hangar may hold is in use: one ending wakes the build
    row = changed(row, **{"state": BuildState.running})
    builds.save(engine.store, row)
    try:
        ref, commit, output = await run_build(engine, row)
    except BuildFailed as exc:
        await _finish(engine, row, ok=False, error=str(exc), log=exc.output, commit=exc.commit)
    except Exception as exc:
        log.exception("environment build failed", extra={"build": row.id})
        await _finish(engine, row, ok=False, error=f"hangar could not run the build: {exc}")
    else:
        await _finish(engine, row, ok=True, image=ref, commit=commit, log=output)
    # Its slot is free: the queued builds look again.
    engine.wake(*(r.id for r in engine.store.all(builds.BUILD, EnvBuildRow, active=True)
                  if r.state is BuildState.queued))


async def _finish(engine: EnvbuildsContext, row: EnvBuildRow, **outcome: Any) -> None:
    from app.egress import refusals

    done, dropped = builds.finish(engine.store, row, keep=engine.settings.env_builds_keep,
                                     egress_blocked=refusals(engine, row.id), **outcome)
    provider = engine.providers[row.provider]
    for old in dropped:
        await snapshots.drop(provider, old.image)
    log.info("environment build %s", done.state, extra={"build": row.id, "repo": row.repo})


class BuildFailed(Exception):
    def __init__(self, message: str, output: str = "", commit: str | None = None):
        super().__init__(message)
        self.output = output
        self.commit = commit


async def _destroy_leftovers(engine: EnvbuildsContext, row: EnvBuildRow) -> None:
    provider = engine.providers[row.provider]
    for leftover in await provider.list(_labels(engine, row)):
        await provider.destroy(leftover)
        engine.tokens.revoke(leftover.id)


def _labels(engine: EnvbuildsContext, row: EnvBuildRow) -> dict[str, str]:
    return {"hangar.instance": engine.instance_id, "hangar.build": row.id,
            "hangar.role": BUILD_ROLE}


async def run_build(engine: EnvbuildsContext, row: EnvBuildRow) -> tuple[str, str, str]:
    """Clone, install, keep the checkout: (snapshot reference, commit, install output)."""
    from app.egress import egress_env, end_egress
    from proxy import sandbox_git_files
    from sandbox.envspec import EnvSpec

    provider = engine.providers[row.provider]
    if why := snapshots.unsupported(provider):  # fail before install costs anything
        raise BuildFailed(why)
    spec = EnvSpec.model_validate(row.spec)
    spec = await envimage.ensure(provider, spec)
    sb = await provider.create(spec, _labels(engine, row))
    try:
        token = engine.tokens.issue(sb.id, repo=row.repo, branch=None,
                                    installation_id=row.installation_id)
        files = sandbox_git_files(engine.settings.proxy_base_url, sb.id, token, row.clone_url,
                                  home=HOME_DIR)
        await provider.copy_in(sb, {f"{HOME_DIR}/.gitconfig": files[f"{HOME_DIR}/.gitconfig"]})
        await provider.copy_in(sb, {f"{HOME_DIR}/.git-credentials":
                                    files[f"{HOME_DIR}/.git-credentials"]}, mode=0o600)
        clone = await provider.run(
            sb, ["git", "clone", "-q", "--branch", row.default_branch, row.clone_url, REPO_DIR],
            cwd=WORKSPACE, timeout=600)
        if clone.exit_code != 0:
            raise BuildFailed("cloning the default branch through hangar's proxy failed",
                              clone.output)
        head = await provider.run(sb, ["git", "rev-parse", "HEAD"], cwd=REPO_DIR, timeout=60)
        commit = head.output.strip()[:40]
        # The key is what was cloned: the default branch may have moved since it was queued.
        probe = parse_probe((await provider.run(sb, probe_argv(row.default_branch, spec),
                                                cwd=REPO_DIR, timeout=120)).output)
        key = await key_for(engine, spec, row.repo, probe.default_tree)
        row = changed(row, **{"key_digest": key.digest, "image_id": key.image_id,
                                     "lockfiles": list(key.lockfiles),
                                     "commit": commit})
        builds.save(engine.store, row)
        # The build secrets are install's alone; the credentials file is not needed any more.
        await provider.run(sb, ["rm", "-f", f"{HOME_DIR}/.git-credentials"], cwd=WORKSPACE,
                           timeout=60)
        engine.tokens.revoke(sb.id)
        secrets = {name: os.environ[name] for name in spec.build_secrets if name in os.environ}
        started = time.monotonic()
        timeout = engine.settings.env_build_timeout_minutes * 60
        # Package registries through the egress proxy; refusals are kept under the build.
        egress = egress_env(engine, row.id, sb, spec, step="install")
        # install writes to a file hangar follows while it runs (the build's log_tail, which
        # `hangar env build-repo --wait` prints as it grows); the file is its output after.
        following = asyncio.ensure_future(_follow_install(engine, provider, sb, row, secrets))
        try:
            result = await provider.run(sb, ["sh", "-c", INSTALL_WRAPPER, "sh",
                                             row.install or "true", INSTALL_LOG],
                                        cwd=REPO_DIR, env={**egress, **secrets},
                                        timeout=timeout)
        finally:
            following.cancel()
            await asyncio.gather(following, return_exceptions=True)
        output = _redacted(result.output if not result.timed_out
                           else await _install_log(provider, sb), secrets)
        if result.timed_out:
            raise BuildFailed(f"install ran longer than the build timeout of {timeout:g} s "
                              "(HANGAR_ENV_BUILD_TIMEOUT_MINUTES)", output, commit)
        if result.exit_code != 0:
            raise BuildFailed(f"install exited with {result.exit_code}", output, commit)
        log.info("install finished in %.1f s", time.monotonic() - started,
                 extra={"build": row.id})
        try:
            # Nothing that holds a build secret is kept (sandbox/secretscan.py).
            ref = await snapshots.save(provider, sb, build_id=row.id, base_image=spec.image,
                                       dest_dir=snapshot_dir(engine),
                                       max_bytes=engine.settings.snapshot_max_mb << 20,
                                       secrets=secrets)
        except snapshots.SandboxError as exc:
            raise BuildFailed(str(exc), output, commit) from None
        return ref, commit, output
    finally:
        engine.tokens.revoke(sb.id)
        end_egress(engine, sb, "install")
        await provider.destroy(sb)


INSTALL_LOG = f"{HANGAR_DIR}/install.log"
# $1: the install step, $2: its log. Its output goes to the log, then out as before; the
# log goes away, so nothing in the sandbox keeps it.
INSTALL_WRAPPER = ('mkdir -p "${2%/*}"; sh -c "$1" >"$2" 2>&1; rc=$?; cat "$2"; '
                   'rm -f "$2"; exit $rc')


async def _install_log(provider: Any, sb: Any) -> str:
    """What install wrote so far (its output when it was stopped), or "" if unreadable."""
    try:
        async with asyncio.timeout(60):
            data = await provider.copy_out(sb, INSTALL_LOG, max_bytes=builds.LOG_TAIL_BYTES)
    except (TimeoutError, OSError, snapshots.SandboxError):
        return ""
    return data.decode("utf-8", "replace")


async def _follow_install(engine: EnvbuildsContext, provider: Any, sb: Any, row: EnvBuildRow,
                          secrets: dict[str, str]) -> None:
    """While install runs: its output's tail, masked, kept on the build row as it grows."""
    shown = ""
    while True:
        await asyncio.sleep(engine.settings.run_watch_interval_seconds)
        tail = _redacted(await _install_log(provider, sb), secrets)
        if tail and tail != shown:
            shown = tail
            builds.save(engine.store, changed(row, **{"log_tail": tail}))


def _redacted(text: str, secrets: dict[str, str]) -> str:
    """Install's output, as it is kept: masked of the build secrets in every encoding."""
    from app.redact import redact

    return redact(text, secrets.values())


# Where each harness reads its global instructions; the script harness gets a plain file.
INSTRUCTION_FILES = {"claude": (".claude/CLAUDE.md",), "codex": (".codex/AGENTS.md",),
                     "script": ("ENVIRONMENT.md",)}


def instruction_files(harness: str) -> tuple[str, ...]:
    return INSTRUCTION_FILES.get(harness, ("ENVIRONMENT.md",))


def facts(plan: StartPlan, build: EnvBuildRow | None) -> dict[str, Any]:
    """The run's environment facts for the job view, the status comment and the check run."""
    if build is None:
        return {"fallback": True, "reason": str(plan.fallback or ""),
                "missing": plan.fallback is Fallback.build_gone}
    return {
        "fallback": False, "version": build.version, "id": build.id, "stale": plan.stale,
        "commit": build.commit, "built_at": build.finished_at,
        "config_digest": build.config_digest, "image": build.image,
        "lockfiles_differ": list(plan.lockfiles_differ),
    }


async def rebuild_stale(engine: EnvbuildsContext) -> list[str]:
    """At startup: each lane whose active build was made from another image of its
    environment gets a build with the same build fields on the current image."""
    from sandbox.envspec import EnvSpec

    queued = []
    lanes = {r.lane_id for r in engine.store.all(builds.BUILD, EnvBuildRow)}
    for lid in sorted(lanes):
        build = builds.active(engine.store, lid)
        if build is None or build.environment not in engine.envs:
            continue
        spec = EnvSpec.model_validate(build.spec) if build.spec else engine.envs[build.environment]
        current = engine.envs[build.environment]
        spec = changed(spec, **{"image": current.image})
        now_id = await image_id(engine, spec)
        if now_id == build.image_id:
            continue
        key = BuildKey(repo=build.repo, environment=build.environment, provider=build.provider,
                       image_id=now_id, config_digest=build.config_digest,
                       lockfiles=tuple((path, digest) for path, digest in build.lockfiles))
        rows = builds.history(engine.store, lid)
        if rebuild_reason([r.as_rule() for r in rows], key) is None:
            continue
        row = builds.queue_build(
            engine.store, key, image_id=now_id, install=build.install, reason="startup",
            installation_id=build.installation_id, clone_url=build.clone_url,
            default_branch=build.default_branch, spec=spec.model_dump())
        queued.append(row.id)
    if queued:
        engine.wake(*queued)
    return queued
