"""The docker provider: one container per sandbox, commands run with exec.

Each container runs a do-nothing init (a shell that sleeps and reaps orphans) with the
image from the environment spec, never privileged, all capabilities dropped,
no-new-privileges, a read-only root filesystem, /workspace on a volume of its own and a
tmpfs /tmp, pids/memory/cpu limits from the spec. `network: loopback` (the default) is
Docker's `none` plus hangar's sandbox gate: the gate's socket directory is bound into the
container and a relay inside (python3 from the image, started by the container's init)
forwards 127.0.0.1:<proxy port> to it, so the container reaches the push proxy and
nothing else. `none`, `host` or a named network are taken as given (never the default
bridge). Every container carries the label
hangar.sandbox=<id> and the caller's labels, so `list` can find orphans after a crash.

The docker SDK blocks; every call runs in a worker thread.

Detached processes: the process id is "<name>:<exec id>". <name> names the files in
/workspace/.hangar (<name>.exit, <name>.pid); the exec id lets `observe` ask the engine
whether the wrapper still runs, also after hangar restarts.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import secrets
import tarfile
import time
from typing import Any

from sandbox.envspec import EnvSpec
from sandbox.provider import (
    BUILD_IMAGE_REPO,
    BUILD_LABEL,
    DEFAULT_LOG_PATH,
    DROPPED_PREFIX,
    HANGAR_DIR,
    HOME_DIR,
    REPO_DIR,
    SANDBOX_LABEL,
    WORKSPACE,
    ExecResult,
    OutputCallback,
    OutputTail,
    ProcessStatus,
    Provider,
    Sandbox,
    SandboxError,
    detached_wrapper,
    exit_file,
    new_process_id,
    new_sandbox_id,
    sandbox_env,
    workspace_relative,
)
from sandbox.providers import _procs
from sandbox.providers._relay import RELAY_SANDBOX_DIR, relay_argv
from sandbox.safe_read import (
    EXEC_READ_TIMEOUT_S,
    EXIT_FILE_BYTES,
    LOG_TAIL_BYTES,
    MISSING_CODE,
    REFUSED_CODE,
    SAFE_TAIL_SH,
    refusal,
)

log = logging.getLogger(__name__)

PROVIDER_LABEL = "hangar.provider"
CREATED_LABEL = "hangar.created_at"
# Scopes `list` (and so a reaper) to one hangar: deployments and test runs sharing an
# engine never see, let alone destroy, each other's sandboxes.
INSTANCE_LABEL = "hangar.instance"
_INTERNAL_LABELS = (SANDBOX_LABEL, PROVIDER_LABEL, CREATED_LABEL, INSTANCE_LABEL)

# pid 1: sleeps, and reaps orphans whenever one of its children ends.
CONTAINER_INIT = ["/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done"]
# A docker sandbox's pid 1 first makes the sandbox's own directories in its workspace
# volume, then says so in its log: one exec less (~100 ms) per sandbox created.
READY = "hangar-sandbox-ready"
DOCKER_INIT = ["/bin/sh", "-c", f"mkdir -p {HOME_DIR} {HANGAR_DIR} || exit 1; echo {READY}; "
               + CONTAINER_INIT[2]]
READY_TIMEOUT_S = 60.0

# Signal a process and everything below it, found through /proc (no procps needed).
# Usage: sh -c KILL_TREE kill-tree SIGNAL SKIP_ROOT(0|1) PID
KILL_TREE = r"""
sig="$1"; skip="$2"; todo="$3"; all=""
while [ -n "$todo" ]; do
  next=""
  for s in /proc/[0-9]*/stat; do
    read -r line < "$s" 2>/dev/null || continue
    pid=${line%% *}; rest=${line##*) }
    set -- $rest
    for t in $todo; do [ "$2" = "$t" ] && next="$next $pid"; done
  done
  all="$all $todo"; todo="$next"
done
set -- $all
[ "$skip" = 1 ] && shift
[ "$#" -gt 0 ] && kill -s "$sig" "$@" 2>/dev/null
exit 0
"""


def _docker_errors():
    import docker.errors

    return docker.errors


class DockerProvider(Provider):
    name = "docker"

    def __init__(
        self,
        client: Any = None,
        *,
        instance: str = "default",
        proxy_port: int | None = None,
        gate_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self._client = client
        self.instance = instance
        # network: loopback relays 127.0.0.1:proxy_port inside to the gate's socket.
        self.proxy_port = proxy_port
        self.gate_dir = os.fspath(gate_dir) if gate_dir and proxy_port else None

    @property
    def client(self) -> Any:
        if self._client is None:
            import docker

            try:
                self._client = docker.from_env()
            except Exception as exc:
                raise SandboxError(
                    f"cannot reach a Docker engine ({exc}); start dockerd "
                    "(scripts/docker-engine.sh) or choose the local provider"
                ) from None
        return self._client

    def _container(self, sb: Sandbox) -> Any:
        errors = _docker_errors()
        try:
            return self.client.containers.get(sb.ref.get("container") or f"hangar-{sb.id}")
        except errors.NotFound:
            raise SandboxError(f"sandbox {sb.id} does not exist (destroyed?)") from None

    # ---- create / destroy / list ---------------------------------------------------

    async def create(self, spec: EnvSpec, labels: dict[str, str]) -> Sandbox:
        if not spec.image:
            raise SandboxError(f"environment {spec.name}: the docker provider needs an image")
        sb = Sandbox(id=new_sandbox_id(), provider=self.name, labels=dict(labels))
        all_labels = {
            **labels,
            SANDBOX_LABEL: sb.id,
            PROVIDER_LABEL: self.name,
            INSTANCE_LABEL: self.instance,
            CREATED_LABEL: repr(sb.created_at),
        }
        volume = f"hangar-{sb.id}"
        api = self.client.api
        from docker.types import Mount

        command = DOCKER_INIT
        binds: dict[str, dict[str, str]] = {}
        host: dict[str, Any] = {
            "privileged": False,
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "read_only": True,
            "tmpfs": {"/tmp": "rw,nosuid,nodev,size=1g"},
            # The engine makes the volume, labelled, with the container: no call of its own.
            "mounts": [Mount(WORKSPACE, volume, type="volume", labels=all_labels)],
        }
        resources = spec.resources
        if resources.pids:
            host["pids_limit"] = resources.pids
        if resources.memory_mb:
            host["mem_limit"] = f"{resources.memory_mb}m"
            host["memswap_limit"] = f"{resources.memory_mb}m"
        if resources.cpus:
            host["nano_cpus"] = int(resources.cpus * 1e9)
        if spec.network == "loopback":
            host["network_mode"] = "none"
            if self.gate_dir and self.proxy_port:
                binds[self.gate_dir] = {"bind": RELAY_SANDBOX_DIR, "mode": "ro"}
                command = relay_argv("python3", self.proxy_port, DOCKER_INIT)
        else:
            # none, host or a named network, as given (never the default bridge)
            host["network_mode"] = spec.network
        if binds:
            host["binds"] = binds

        def remove_all() -> None:
            errors = _docker_errors()
            with contextlib.suppress(errors.NotFound, errors.APIError):
                api.remove_container(f"hangar-{sb.id}", force=True, v=True)
            with contextlib.suppress(errors.NotFound, errors.APIError):
                api.remove_volume(volume, force=True)

        def make() -> str:
            errors = _docker_errors()
            # Create and start by hand, not containers.run: run looks the image and the new
            # container up again (two round trips to the engine for nothing). The engine
            # never pulls on create: images are built or pulled by the operator.
            try:
                created = api.create_container(
                    spec.image, command=command, hostname=sb.id, name=f"hangar-{sb.id}",
                    labels=all_labels, working_dir=WORKSPACE, environment={},
                    volumes=[WORKSPACE, *(b["bind"] for b in binds.values())],
                    host_config=api.create_host_config(**host),
                )  # fmt: skip
                container_id = created["Id"]
                api.start(container_id)
            except errors.ImageNotFound:
                remove_all()
                raise SandboxError(
                    f"image {spec.image} is not present in the Docker engine; build it "
                    "(scripts/base-image.sh builds hangar-base:1) or pull it"
                ) from None
            except errors.APIError as exc:
                remove_all()
                raise SandboxError(f"docker could not create the sandbox: {exc}") from None
            # pid 1 says READY once the workspace is made; the log stream ends if it stops,
            # and a read that waits longer than the client's timeout raises.
            said = ""
            deadline = time.monotonic() + READY_TIMEOUT_S
            stream = None
            try:
                stream = api.logs(container_id, stream=True, follow=True)
                for chunk in stream:
                    said += chunk.decode("utf-8", "replace")
                    if READY in said.splitlines() or time.monotonic() > deadline:
                        break
            except Exception:
                pass  # not ready, whatever the engine said: answered below
            finally:
                if stream is not None:
                    with contextlib.suppress(Exception):
                        stream.close()
            if READY not in said.splitlines():
                said = "\n".join(said.strip().splitlines()[-5:])
                remove_all()
                raise SandboxError(
                    f"the sandbox container of {sb.id} stopped at once ({said or 'no output'}); "
                    f"with network: loopback the image {spec.image} needs python3 for the "
                    "relay to hangar's push proxy (hangar-base:1 has it)"
                )
            return container_id

        container_id = await asyncio.to_thread(make)
        sb.ref = {"container": container_id, "volume": volume, "image": spec.image}
        return sb

    async def destroy(self, sb: Sandbox) -> None:
        api = self.client.api

        def remove() -> None:
            errors = _docker_errors()
            # By name or id, no lookup first: a round trip less each.
            with contextlib.suppress(errors.NotFound):
                api.remove_container(sb.ref.get("container") or f"hangar-{sb.id}", force=True,
                                     v=True)  # fmt: skip
            with contextlib.suppress(errors.NotFound):
                api.remove_volume(sb.ref.get("volume") or f"hangar-{sb.id}", force=True)
            if str(sb.ref.get("image", "")).startswith(f"{BUILD_IMAGE_REPO}:"):
                self._remove_dropped_builds()

        await asyncio.to_thread(remove)

    def _remove_dropped_builds(self) -> None:
        """Remove the images of dropped builds that no container uses any more.

        A build dropped while a sandbox still runs from its image keeps the image, named
        hangar-build:dropped-<build> (sandbox.snapshots.drop); the last such sandbox to
        end, or the next hangar to start, removes it. Before, drop untagged it by force,
        and docker kept the untagged image for good: hundreds of megabytes a drop."""
        errors = _docker_errors()
        try:
            # The listing's own answer, not an inspect of each image after it (what
            # `images.list` does): an image another hangar removes meanwhile fails no look.
            for image in self.client.api.images(
                    filters={"reference": f"{BUILD_IMAGE_REPO}:{DROPPED_PREFIX}*"}):
                for tag in image.get("RepoTags") or ():
                    with contextlib.suppress(errors.NotFound, errors.APIError):  # still used
                        self.client.api.remove_image(tag)
        except Exception as exc:  # the engine says why; the next sandbox's end tries again
            log.info("could not remove the images of dropped builds: %s", exc)

    async def end_abandoned(self) -> list[str]:
        """Containers of any hangar whose data directory is gone: each binds that hangar's
        gate directory, and a bind source that no longer exists names a hangar gone for
        good. They are removed with their volumes."""
        def sweep() -> list[str]:
            errors = _docker_errors()
            ended = []
            for container in self.client.containers.list(
                    all=True, filters={"label": [SANDBOX_LABEL]}, ignore_removed=True):
                sources = [m.get("Source") for m in container.attrs.get("Mounts") or []
                           if m.get("Destination") == RELAY_SANDBOX_DIR]
                if not sources or not sources[0] or os.path.exists(sources[0]):
                    continue
                sandbox = container.labels.get(SANDBOX_LABEL, container.name)
                with contextlib.suppress(errors.NotFound, errors.APIError):
                    container.remove(force=True, v=True)
                    with contextlib.suppress(errors.NotFound):
                        self.client.volumes.get(f"hangar-{sandbox}").remove(force=True)
                    ended.append(sandbox)
            self._remove_dropped_builds()
            with contextlib.suppress(Exception):
                # Untagged by force before dropped builds were kept by name; an hour old
                # at least, so never a build's image made a moment before its tag.
                self.client.images.prune(
                    filters={"dangling": True, "label": BUILD_LABEL, "until": "1h"})
            return ended

        return await asyncio.to_thread(sweep)

    async def list(self, labels: dict[str, str]) -> list[Sandbox]:
        wanted = {**labels, INSTANCE_LABEL: self.instance}
        filters = {"label": [SANDBOX_LABEL, *(f"{k}={v}" for k, v in wanted.items())]}

        def find() -> list[Sandbox]:
            found = []
            # A container removed between the listing and its inspect (a destroy running
            # beside this) is left out, not an error.
            for container in self.client.containers.list(all=True, filters=filters,
                                                         ignore_removed=True):
                own = container.labels
                try:
                    created = float(own.get(CREATED_LABEL, "0"))
                except ValueError:
                    created = 0.0
                found.append(
                    Sandbox(
                        id=own[SANDBOX_LABEL],
                        provider=self.name,
                        labels={k: v for k, v in own.items() if k not in _INTERNAL_LABELS},
                        ref={
                            "container": container.id,
                            "volume": f"hangar-{own[SANDBOX_LABEL]}",
                            "image": (container.attrs.get("Config") or {}).get("Image"),
                        },
                        created_at=created,
                    )
                )
            return sorted(found, key=lambda s: (s.created_at, s.id))

        return await asyncio.to_thread(find)

    # ---- commands -----------------------------------------------------------------

    async def run(
        self,
        sb: Sandbox,
        argv: list[str],
        *,
        timeout: float | None = None,
        env: dict[str, str] | None = None,
        cwd: str = WORKSPACE,
        on_output: OutputCallback | None = None,
        offline: bool = False,
    ) -> ExecResult:
        container_id = sb.ref.get("container") or f"hangar-{sb.id}"
        pid_file = f"/tmp/hangar-run-{secrets.token_hex(6)}.pid"
        wrapped = [
            "/bin/sh", "-c", 'echo $$ > "$1"; cd "$2" || exit 127; shift 2; exec "$@"',
            "hangar-run", pid_file, cwd, *argv,
        ]  # fmt: skip
        api = self.client.api
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        # The tail is kept in the worker thread: however fast a command prints, hangar
        # holds its last 1 MiB, never a backlog of chunks waiting for the event loop.
        tail = OutputTail()

        def execute() -> int | None:
            # The container's id, not a lookup first: one round trip to the engine less.
            try:
                created = api.exec_create(
                    container_id, wrapped, environment=sandbox_env(env), workdir=WORKSPACE
                )
            except _docker_errors().NotFound:
                raise SandboxError(f"sandbox {sb.id} does not exist (destroyed?)") from None
            exec_id = created["Id"]
            for chunk in api.exec_start(exec_id, stream=True):
                tail.add(chunk)
                if on_output is not None:
                    loop.call_soon_threadsafe(on_output, chunk)
            # In the same worker: one hand-over between threads less.
            return api.exec_inspect(exec_id).get("ExitCode")

        worker = asyncio.ensure_future(asyncio.to_thread(execute))
        timed_out = False
        try:
            async with asyncio.timeout(timeout):
                await asyncio.shield(worker)
        except TimeoutError:
            timed_out = True
            container = await asyncio.to_thread(self._container, sb)
            await self._kill_tree_by_pidfile(container, pid_file, "KILL")
        try:
            # A process that left the tree (daemonised) may hold the stream open.
            async with asyncio.timeout(EXEC_READ_TIMEOUT_S if timed_out else None):
                exit_code = await asyncio.shield(worker)
        except TimeoutError:
            raise SandboxError(f"{argv[0]} in {sb.id} outlived its timeout: something it "
                               "started still holds its output open") from None
        # The pid file (a few bytes on the sandbox's own /tmp, gone with it) is left: an
        # exec to remove it cost as much as the command's own exec.
        return ExecResult(
            exit_code=None if timed_out else exit_code,
            output=tail.text(),
            timed_out=timed_out,
            duration_s=time.monotonic() - started,
        )

    async def _kill_tree_by_pidfile(
        self, container: Any, pid_file: str, sig: str, *, skip_root: bool = False
    ) -> None:
        script = 'pid=$(cat "$1" 2>/dev/null) || exit 0; shift; exec sh -c "$0" kill-tree "$@" $pid'
        await asyncio.to_thread(
            container.exec_run,
            ["/bin/sh", "-c", script, KILL_TREE, pid_file, sig, "1" if skip_root else "0"],
            environment={},
            workdir="/",
        )

    # ---- detached processes -------------------------------------------------------

    async def start(
        self,
        sb: Sandbox,
        argv: list[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str = REPO_DIR,
        log_path: str = DEFAULT_LOG_PATH,
    ) -> str:
        container = await asyncio.to_thread(self._container, sb)
        name = new_process_id()
        inner = detached_wrapper(argv, cwd=cwd, log_path=log_path, process_id=name)
        # Record the wrapper's pid (inside the container) for stop, then become it.
        wrapped = [
            "/bin/sh", "-c", 'echo $$ > "$1"; shift; exec "$@"', "hangar-start",
            f"{HANGAR_DIR}/{name}.pid", *inner,
        ]  # fmt: skip
        api = self.client.api

        def launch() -> str:
            created = api.exec_create(
                container.id, wrapped, environment=sandbox_env(env), workdir=WORKSPACE,
                stdout=False, stderr=False,
            )  # fmt: skip
            api.exec_start(created["Id"], detach=True)
            return created["Id"]

        exec_id = await asyncio.to_thread(launch)
        return f"{name}:{exec_id}"

    @staticmethod
    def _split(process_id: str) -> tuple[str, str]:
        name, _, exec_id = process_id.partition(":")
        if not name.startswith("p-") or "/" in name or not exec_id:
            raise ValueError(f"not a docker process id: {process_id!r}")
        return name, exec_id

    async def _exit_code(self, sb: Sandbox, name: str) -> int | None:
        try:
            return int((await self.copy_out(sb, exit_file(name), EXIT_FILE_BYTES)).strip())
        except (OSError, ValueError):
            return None

    def _exec_running(self, exec_id: str) -> tuple[bool, int | None]:
        """(running, host pid) of an exec; (False, None) when the engine no longer knows it."""
        errors = _docker_errors()
        try:
            info = self.client.api.exec_inspect(exec_id)
        except errors.NotFound:
            return False, None
        pid = info.get("Pid") or None
        running = bool(info.get("Running"))
        if running and pid and os.path.exists("/proc"):
            # The engine may be slow to notice; a zombie counts as gone.
            running = _procs.is_alive(pid) or not os.path.exists(f"/proc/{pid}")
        return running, pid

    async def observe(self, sb: Sandbox, process_id: str) -> ProcessStatus:
        name, exec_id = self._split(process_id)
        code = await self._exit_code(sb, name)
        if code is not None:
            return ProcessStatus(state="exited", exit_code=code)
        running, _ = await asyncio.to_thread(self._exec_running, exec_id)
        if running:
            return ProcessStatus(state="running")
        code = await self._exit_code(sb, name)
        if code is not None:
            return ProcessStatus(state="exited", exit_code=code)
        return ProcessStatus(state="gone")

    def host_pids(self, sb: Sandbox, process_id: str) -> list[int]:
        """Host pids of a detached process when the engine runs on this host: the wrapper
        that records the exit code first, then the agent and all it started."""
        _, exec_id = self._split(process_id)
        running, pid = self._exec_running(exec_id)
        if not running or not pid:
            return []
        return [pid, *_procs.descendants(pid)]

    async def stop(self, sb: Sandbox, process_id: str, grace_s: float = 5) -> None:
        name, exec_id = self._split(process_id)
        try:
            container = await asyncio.to_thread(self._container, sb)
        except SandboxError:
            return
        running, _ = await asyncio.to_thread(self._exec_running, exec_id)
        if not running:
            return
        pid_file = f"{HANGAR_DIR}/{name}.pid"
        # TERM the agent beneath the wrapper so the wrapper can record how it ended.
        await self._kill_tree_by_pidfile(container, pid_file, "TERM", skip_root=True)
        deadline = time.monotonic() + grace_s
        while (await asyncio.to_thread(self._exec_running, exec_id))[0]:
            if time.monotonic() >= deadline:
                await self._kill_tree_by_pidfile(container, pid_file, "KILL")
                break
            await asyncio.sleep(0.05)

    # ---- files --------------------------------------------------------------------

    async def copy_in(self, sb: Sandbox, files: dict[str, bytes], mode: int = 0o644) -> None:
        container = await asyncio.to_thread(self._container, sb)
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            made_dirs: set[str] = set()
            for path, data in files.items():
                rel = workspace_relative(path)
                parts = rel.split("/")
                for depth in range(1, len(parts)):
                    directory = "/".join(parts[:depth])
                    if directory not in made_dirs:
                        made_dirs.add(directory)
                        info = tarfile.TarInfo(directory)
                        info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, time.time()
                        tar.addfile(info)
                info = tarfile.TarInfo(rel)
                info.size, info.mode, info.mtime = len(data), mode, time.time()
                tar.addfile(info, io.BytesIO(data))
        ok = await asyncio.to_thread(container.put_archive, WORKSPACE, buffer.getvalue())
        if not ok:
            raise SandboxError(f"docker refused to copy files into {sb.id}")

    async def copy_out(self, sb: Sandbox, path: str, max_bytes: int = LOG_TAIL_BYTES) -> bytes:
        """Read inside the container with SAFE_TAIL_SH: never an archive of an arbitrarily
        large file, never a FIFO or a link, at most max_bytes and EXEC_READ_TIMEOUT_S."""
        norm = f"{WORKSPACE}/{workspace_relative(path)}"
        # The container's id, not a lookup first: observe reads the exit file every tick.
        container_id = sb.ref.get("container") or f"hangar-{sb.id}"
        api = self.client.api

        def read() -> tuple[int | None, bytes]:
            argv = ["/bin/sh", "-c", SAFE_TAIL_SH, "copy-out", norm, str(max_bytes)]
            try:
                created = api.exec_create(container_id, argv, environment={}, workdir="/",
                                          stdout=True, stderr=False)  # fmt: skip
            except _docker_errors().NotFound:
                raise SandboxError(f"sandbox {sb.id} does not exist (destroyed?)") from None
            out = api.exec_start(created["Id"], stream=False)
            return api.exec_inspect(created["Id"]).get("ExitCode"), out or b""

        try:
            async with asyncio.timeout(EXEC_READ_TIMEOUT_S):
                code, out = await asyncio.to_thread(read)
        except TimeoutError:
            raise SandboxError(f"reading {path} in {sb.id} took over "
                               f"{EXEC_READ_TIMEOUT_S} s; gave up") from None
        if code == MISSING_CODE:
            raise FileNotFoundError(path)
        if code == REFUSED_CODE:
            raise refusal(norm)
        if code != 0:
            raise SandboxError(f"could not read {path} in {sb.id} (exit {code})")
        return out
