"""Environment builds as rows: history per lane, the active build, pins, the audit trail.

A lane is (repository, environment, provider). The rules that pick the active build and
decide when to rebuild are pure (sandbox.envbuild); this module keeps their inputs.
"""

from __future__ import annotations

import argparse
import getpass
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, Field

from app.models import changed, new_id, now
from app.render import blocked_line
from app.settings import Settings
from app.store import Store
from sandbox.envbuild import (
    DEFAULT_KEEP,
    Build,
    BuildKey,
    BuildState,
    active_build,
    builds_to_drop,
)

BUILD = "envbuild"
LANE = "envlane"
LOG_TAIL_BYTES = 16 * 1024


class EnvBuildRow(BaseModel):
    id: str
    version: int
    repo: str
    environment: str
    provider: str
    key_digest: str
    image_id: str
    config_digest: str
    lockfiles: list[tuple[str, str]] = []
    install: str | None = None
    state: BuildState = BuildState.queued
    reason: str = "first"  # first, drift, asked, startup
    asked_by: str | None = None
    installation_id: int | None = None
    clone_url: str = ""
    default_branch: str = "main"
    spec: dict = {}  # the effective environment spec the build runs in
    commit: str | None = None
    image: str | None = None  # what a sandbox starts from: an image id, or a snapshot path
    error: str | None = None
    log_tail: str = ""
    egress_blocked: list[dict] = []  # connections install was refused (app.egress.refusals)
    created_at: float = Field(default_factory=now)
    finished_at: float | None = None

    @property
    def lane_id(self) -> str:
        return lane_id(self.repo, self.environment, self.provider)

    def as_rule(self) -> Build:
        return Build(id=self.id, version=self.version, key_digest=self.key_digest,
                     state=self.state, image=self.image,
                     lockfiles=tuple((path, digest) for path, digest in self.lockfiles))


class EnvLane(BaseModel):
    id: str
    next_version: int = 1
    pinned_id: str | None = None


def lane_id(repo: str, environment: str, provider: str) -> str:
    return f"{repo.lower()}|{environment}|{provider}"


class BuildError(LookupError):
    """A build or lane named on the command line or in the API is not there."""


def lane(store: Store, lid: str) -> EnvLane:
    return store.get(LANE, lid, EnvLane) or EnvLane(id=lid)


def history(store: Store, lid: str) -> list[EnvBuildRow]:
    """The lane's builds, oldest first (a lane keeps only its newest few)."""
    rows = [r for r in store.all(BUILD, EnvBuildRow) if r.lane_id == lid]
    return sorted(rows, key=lambda r: r.version)


def lanes_of(store: Store, repo: str) -> list[str]:
    return sorted({r.lane_id for r in store.all(BUILD, EnvBuildRow)
                   if r.repo.lower() == repo.lower()})


def active(store: Store, lid: str) -> EnvBuildRow | None:
    rows = history(store, lid)
    build = active_build([r.as_rule() for r in rows], lane(store, lid).pinned_id)
    return next((r for r in rows if build and r.id == build.id), None)


def queue_build(store: Store, key: BuildKey, *, image_id: str, install: str | None,
                reason: str, asked_by: str | None = None, **where: object) -> EnvBuildRow:
    """A new build row for `key`, numbered in its lane; the engine runs it when a slot frees."""
    lid = lane_id(*key.lane)
    current = lane(store, lid)
    row = EnvBuildRow(
        id=new_id("bld"), version=current.next_version, repo=key.repo,
        environment=key.environment, provider=key.provider, key_digest=key.digest,
        image_id=image_id, config_digest=key.config_digest,
        lockfiles=[list(p) for p in key.lockfiles], install=install, reason=reason,
        asked_by=asked_by, **where,
    )
    store.put(LANE, lid, changed(current, **{"next_version": current.next_version + 1}),
              active=True)
    save(store, row)
    audit(store, key.repo, "env.build", f"{row.id} v{row.version} ({reason})", asked_by)
    return row


def save(store: Store, row: EnvBuildRow) -> None:
    busy = row.state in (BuildState.queued, BuildState.running)
    store.put(BUILD, row.id, row, active=busy)


def finish(store: Store, row: EnvBuildRow, *, ok: bool, image: str | None = None,
           commit: str | None = None, error: str | None = None, log: str = "",
           egress_blocked: list[dict] | None = None,
           keep: int = DEFAULT_KEEP) -> tuple[EnvBuildRow, list[EnvBuildRow]]:
    """Record a build's end; returns it and the builds past `keep` that were dropped.

    The caller removes what the dropped builds hold (an image, a snapshot).
    """
    done = changed(row, **{
        "state": BuildState.succeeded if ok else BuildState.failed,
        "image": image if ok else None, "commit": commit or row.commit,
        "error": None if ok else (error or "the build failed"),
        "log_tail": log[-LOG_TAIL_BYTES:], "finished_at": time.time(),
        "egress_blocked": egress_blocked or [],
    })
    save(store, done)
    audit(store, row.repo, "env.build.finish", f"{row.id} v{row.version} {done.state}", None)
    rows = history(store, row.lane_id)
    drop = set(builds_to_drop([r.as_rule() for r in rows], keep=keep,
                              pinned_id=lane(store, row.lane_id).pinned_id))
    dropped = [r for r in rows if r.id in drop]
    for r in dropped:
        store.delete(BUILD, r.id)
    return done, dropped


def find(store: Store, build_id: str) -> EnvBuildRow:
    row = store.get(BUILD, build_id, EnvBuildRow)
    if row is None:
        raise BuildError(f"no environment build {build_id!r}; `hangar env builds OWNER/REPO` "
                         "lists a repository's builds")
    return row


def rollback(store: Store, build_id: str, *, who: str) -> EnvBuildRow:
    """Make a build that succeeded the active one, pinned until someone unpins."""
    row = find(store, build_id)
    if row.state is not BuildState.succeeded:
        raise BuildError(f"{build_id} {row.state}; only a build that succeeded can be rolled "
                         "back to")
    store.put(LANE, row.lane_id, changed(lane(store, row.lane_id), pinned_id=row.id),
              active=True)
    audit(store, row.repo, "env.rollback", f"{row.id} v{row.version}", who)
    return row


def unpin(store: Store, repo: str, *, who: str) -> list[str]:
    """Let new builds take over again in every lane of `repo`; the lanes that were pinned."""
    released = []
    for lid in lanes_of(store, repo):
        current = lane(store, lid)
        if current.pinned_id:
            store.put(LANE, lid, changed(current, **{"pinned_id": None}), active=True)
            released.append(lid)
    audit(store, repo, "env.unpin", ", ".join(released) or "nothing was pinned", who)
    return released


def audit(store: Store, repo: str, action: str, detail: str, who: str | None) -> None:
    """In hangar's one audit trail (the API's `GET /api/audit` reads it too)."""
    store.audit(who or "hangar", action, repo.lower(), detail)


def audit_trail(store: Store, repo: str) -> list[dict]:
    return [e for e in store.audit_trail(limit=100_000) if e["target"] == repo.lower()]


def builds_table(store: Store, repo: str) -> str:
    """`hangar env builds OWNER/REPO`: one block per lane, `*` marks the active build."""
    lids = lanes_of(store, repo)
    if not lids:
        return f"{repo}: no environment builds yet"
    blocks = []
    for lid in lids:
        owner_repo, env, provider = lid.split("|")
        current = active(store, lid)
        pinned = lane(store, lid).pinned_id
        lines = [f"{owner_repo} / {env} on {provider}"
                 + (f" (pinned to {pinned})" if pinned else "")]
        for r in history(store, lid):
            mark = "*" if current and r.id == current.id else " "
            when = datetime.fromtimestamp(r.created_at, UTC).strftime("%Y-%m-%d %H:%M")
            outcome = r.image if r.state is BuildState.succeeded else (r.error or "")
            lines.append(f"{mark} v{r.version:<3} {r.id:<12} {r.state:<9} "
                         f"{(r.commit or '-')[:9]:<9} {when}  {r.reason:<7} {outcome}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def build_details(row: EnvBuildRow) -> str:
    """`hangar env build-show ID`: its config and the end of the install's output."""
    lockfiles = ", ".join(f"{p}@{oid[:9]}" for p, oid in row.lockfiles) or "none"
    return "\n".join([
        f"{row.id}  v{row.version}  {row.state}  ({row.reason})",
        f"repository:  {row.repo}",
        f"environment: {row.environment} on {row.provider} (image {row.image_id})",
        f"commit:      {row.commit or '-'}",
        f"install:     {row.install or '-'}",
        f"lockfiles:   {lockfiles}",
        f"config:      {row.config_digest}",
        f"result:      {row.image or row.error or '-'}",
        f"egress:      {blocked_line(row.egress_blocked) or 'nothing refused'}",
        "",
        "install output (end):",
        row.log_tail.rstrip() or "(none)",
    ])


def add_env_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="env_command", required=True)
    sub.add_parser("builds", help="a repository's builds; * marks the active one") \
        .add_argument("repo", metavar="OWNER/REPO")
    sub.add_parser("build-show", help="a build's config and the end of its install output") \
        .add_argument("build_id", metavar="ID")
    sub.add_parser("rollback", help="make a build active and pin it") \
        .add_argument("build_id", metavar="ID")
    sub.add_parser("unpin", help="let new builds take over again") \
        .add_argument("repo", metavar="OWNER/REPO")
    image = sub.add_parser("build-image", help="build an environment's own image from its "
                                               "image_recipe (cached by its digest)")
    image.add_argument("name", metavar="NAME")
    ask = sub.add_parser("build-repo", help="build now, through the running hangar's API "
                                            "(HANGAR_API_URL, HANGAR_API_TOKEN)")
    ask.add_argument("repo", metavar="OWNER/REPO")
    ask.add_argument("--wait", action="store_true", help="until the build finishes")
    ask.add_argument("--timeout", type=float, default=3600, help="seconds to wait at most")


def env_command(args: argparse.Namespace, settings: Settings) -> int:
    if args.env_command == "build-repo":
        return build_repo_command(args, settings)
    if args.env_command == "build-image":
        return build_image_command(args.name, settings)
    path = settings.database
    if isinstance(path, Path) and not path.exists():
        print(f"hangar: no database at {path}; set HANGAR_DATA_DIR to hangar's data directory",
              file=sys.stderr)
        return 2
    store = Store(path)
    who = f"cli:{getpass.getuser()}"
    try:
        if args.env_command == "builds":
            print(builds_table(store, args.repo))
        elif args.env_command == "build-show":
            print(build_details(find(store, args.build_id)))
        elif args.env_command == "rollback":
            row = rollback(store, args.build_id, who=who)
            print(f"{row.repo}: v{row.version} ({row.id}) is active and pinned; "
                  f"`hangar env unpin {row.repo}` lets new builds take over again")
        elif args.env_command == "unpin":
            released = unpin(store, args.repo, who=who)
            print(f"{args.repo}: unpinned {len(released)} lane(s)")
    except BuildError as exc:
        print(f"hangar: {exc}", file=sys.stderr)
        return 1
    finally:
        store.close()
    return 0


def build_repo_command(args: argparse.Namespace, settings: Settings) -> int:
    """Ask the running hangar to build; with --wait, follow the build until it ends."""
    import json
    import os
    import urllib.error
    import urllib.request

    base = os.environ.get("HANGAR_API_URL", f"http://{settings.host}:{settings.port}").rstrip("/")
    token = os.environ.get("HANGAR_API_TOKEN") or (
        settings.api_token.get_secret_value() if settings.api_token else "")
    if not token:
        print("hangar: set HANGAR_API_TOKEN to a token with the admin scope", file=sys.stderr)
        return 2

    def call(method: str, path: str) -> tuple[int, dict]:
        request = urllib.request.Request(base + path, method=method,
                                         headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return answer.status, json.loads(answer.read() or b"{}")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")

    try:
        status, body = call("POST", f"/api/envs/{args.repo}/builds")
    except OSError as exc:
        print(f"hangar: could not reach hangar at {base} ({exc}); is `hangar serve` running? "
              "Set HANGAR_API_URL to its address", file=sys.stderr)
        return 2
    if status >= 400:
        print(f"hangar: {body.get('error', status)}", file=sys.stderr)
        return 1
    build_id = body.get("queued")
    if build_id is None:
        print(f"{args.repo}: {body.get('message')}")
        return 0
    print(f"{args.repo}: build v{body.get('version')} ({build_id}) queued")
    if not args.wait:
        return 0
    deadline = time.monotonic() + args.timeout
    shown = ""
    while time.monotonic() < deadline:
        _, row = call("GET", f"/api/envs/builds/{build_id}")
        # install's output as it grows (its end once the build is over), each line once
        tail = row.get("log_tail") or ""
        fresh = new_output(shown, tail)
        if fresh:
            print(fresh, end="" if fresh.endswith("\n") else "\n", flush=True)
            shown = tail
        if row.get("state") in (BuildState.succeeded, BuildState.failed):
            print(f"{args.repo}: {build_id} {row['state']}"
                  + (f": {row.get('error')}" if row.get("error") else ""))
            return 0 if row["state"] == BuildState.succeeded else 1
        time.sleep(1)
    print(f"hangar: {build_id} did not finish within {args.timeout:.0f} s", file=sys.stderr)
    return 1


def new_output(shown: str, tail: str) -> str:
    """What `tail` (the last bytes of install's output) holds after `shown`, the tail
    printed before: the text past their longest overlap; all of it when none."""
    if tail.startswith(shown):
        return tail[len(shown):]
    for start in range(1, len(shown)):  # the tail has moved on past shown's start
        if tail.startswith(shown[start:]):
            return tail[len(shown) - start:]
    return tail


def build_image_command(name: str, settings: Settings) -> int:
    from sandbox.envimage import build_image
    from sandbox.envspec import EnvSpecError, default_envs_dir, load_envs
    from sandbox.provider import SandboxError

    try:
        envs = load_envs(settings.envs_dir or default_envs_dir())
    except EnvSpecError as exc:
        print(f"hangar: {exc}", file=sys.stderr)
        return 2
    spec = envs.get(name)
    if spec is None:
        print(f"hangar: no environment named {name!r}; known: {', '.join(sorted(envs))}",
              file=sys.stderr)
        return 2
    if spec.image_recipe is None:
        print(f"{name}: uses image {spec.image}; there is no image_recipe to build")
        return 0
    try:
        import docker

        tag, built = build_image(docker.from_env(), spec)
    except (SandboxError, Exception) as exc:  # no engine, a CLI missing: one sentence
        print(f"hangar: could not build the image of {name}: {exc}", file=sys.stderr)
        return 1
    print(f"{name}: {tag} {'built' if built else 'is up to date'}")
    return 0
