"""The kubernetes provider: one pod per sandbox, commands over the exec stream API.

Each pod: no service-account token, no service links, non-root (uid 1000), read-only
root filesystem with emptyDir volumes at /workspace and /tmp, all capabilities dropped,
no privilege escalation, RuntimeDefault seccomp, resource limits from the spec,
restartPolicy Never, and the labels hangar.sandbox=<id> plus the caller's. One
NetworkPolicy in the namespace selects every sandbox pod and allows egress only to DNS
and to hangar's push proxy; no ingress.

Process limits (spec.resources.pids) are a kubelet setting (podPidsLimit) in Kubernetes,
not a pod field; they are not set here.

Every exec starts from an empty environment (`env -i`) and reads the caller's variables
from a file copied in over stdin, so no value appears in exec URLs or API audit logs.
The blocking client runs in worker threads.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import shlex
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sandbox.envspec import EnvSpec
from sandbox.provider import (
    BASE_PATH,
    DEFAULT_LOG_PATH,
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
from sandbox.providers.docker import CONTAINER_INIT, KILL_TREE
from sandbox.safe_read import (
    EXEC_READ_TIMEOUT_S,
    LOG_TAIL_BYTES,
    MISSING_CODE,
    REFUSED_CODE,
    SAFE_TAIL_SH,
    refusal,
)

PROVIDER_LABEL = "hangar.provider"
LABELS_ANNOTATION = "hangar.io/labels"
CREATED_ANNOTATION = "hangar.io/created-at"
NETWORK_POLICY_NAME = "hangar-sandbox-egress"
CONTAINER_NAME = "sandbox"
RESTORE_CONTAINER_NAME = "restore-build"
RESTORE_MOUNT = "/hangar-restore"
EXPORT_TAG = "export-checkout"
SANDBOX_UID = 1000
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                        r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")  # fmt: skip
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


def pod_name(sandbox_id: str) -> str:
    return f"hangar-{sandbox_id}"


def check_labels(labels: dict[str, str]) -> None:
    for key, value in labels.items():
        if not _LABEL_KEY.match(key):
            raise SandboxError(f"label key {key!r} is not a valid Kubernetes label key")
        if not _LABEL_VALUE.match(value):
            raise SandboxError(
                f"label {key}={value!r}: Kubernetes label values are at most 63 letters, "
                "digits, '-', '_' or '.', starting and ending with a letter or digit"
            )


def sandbox_pod(sb: Sandbox, spec: EnvSpec, *, namespace: str, from_build: bool = False,
                pull_secret: str | None = None) -> dict[str, Any]:
    """The pod manifest for a sandbox (a plain dict: what is sent and what is validated).

    `from_build`: spec.image is an environment build, which holds the checkout at
    /workspace/repo; the workspace volume mounted there would hide it, so an init container
    of the same image, as locked down, copies it into the volume first. `pull_secret`
    names the Secret the kubelet pulls build images with."""
    resources: dict[str, str] = {}
    if spec.resources.cpus:
        resources["cpu"] = f"{int(spec.resources.cpus * 1000)}m"
    if spec.resources.memory_mb:
        resources["memory"] = f"{spec.resources.memory_mb}Mi"
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(sb.id),
            "namespace": namespace,
            "labels": {**sb.labels, SANDBOX_LABEL: sb.id, PROVIDER_LABEL: "kubernetes"},
            "annotations": {
                LABELS_ANNOTATION: json.dumps(sb.labels, sort_keys=True),
                CREATED_ANNOTATION: repr(sb.created_at),
            },
        },
        "spec": {
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "restartPolicy": "Never",
            "hostNetwork": False,
            "hostPID": False,
            "hostIPC": False,
            "terminationGracePeriodSeconds": 5,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": SANDBOX_UID,
                "runAsGroup": SANDBOX_UID,
                "fsGroup": SANDBOX_UID,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": CONTAINER_NAME,
                    "image": spec.image,
                    "command": CONTAINER_INIT,
                    "workingDir": WORKSPACE,
                    "env": [{"name": "HOME", "value": HOME_DIR}],
                    "securityContext": {
                        "privileged": False,
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "runAsNonRoot": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                    "resources": {"limits": resources, "requests": dict(resources)},
                    "volumeMounts": [
                        {"name": "workspace", "mountPath": WORKSPACE},
                        {"name": "tmp", "mountPath": "/tmp"},
                    ],
                }
            ],
            "volumes": [
                {"name": "workspace", "emptyDir": {}},
                {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
            ],
        },
    }
    container = pod["spec"]["containers"][0]
    if from_build:
        pod["spec"]["initContainers"] = [{
            "name": RESTORE_CONTAINER_NAME,
            "image": spec.image,
            "command": ["cp", "-a", REPO_DIR, f"{RESTORE_MOUNT}/repo"],
            "securityContext": dict(container["securityContext"]),
            "resources": container["resources"],
            "volumeMounts": [{"name": "workspace", "mountPath": RESTORE_MOUNT}],
        }]
    if pull_secret:
        pod["spec"]["imagePullSecrets"] = [{"name": pull_secret}]
    return pod


def sandbox_network_policy(
    *,
    namespace: str,
    proxy_port: int,
    proxy_namespace: str,
    proxy_pod_labels: dict[str, str] | None,
    proxy_cidr: str | None,
) -> dict[str, Any]:
    """Egress from sandbox pods only to DNS and the push proxy; no ingress at all."""
    if proxy_cidr:
        proxy_peer: dict[str, Any] = {"ipBlock": {"cidr": proxy_cidr}}
    else:
        proxy_peer = {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": proxy_namespace}},
            "podSelector": {"matchLabels": proxy_pod_labels or {}},
        }
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": NETWORK_POLICY_NAME, "namespace": namespace},
        "spec": {
            "podSelector": {"matchExpressions": [{"key": SANDBOX_LABEL, "operator": "Exists"}]},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [],
            "egress": [
                {
                    "to": [
                        {
                            "namespaceSelector": {
                                "matchLabels": {"kubernetes.io/metadata.name": "kube-system"}
                            },
                            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                        }
                    ],
                    "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
                },
                {"to": [proxy_peer], "ports": [{"protocol": "TCP", "port": proxy_port}]},
            ],
        },
    }


def env_file(env: dict[str, str]) -> bytes:
    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items()).encode()


class KubernetesProvider(Provider):
    name = "kubernetes"

    def __init__(
        self,
        *,
        namespace: str = "hangar-sandboxes",
        api_client: Any = None,
        proxy_port: int = 8080,
        proxy_namespace: str = "hangar",
        proxy_pod_labels: dict[str, str] | None = None,
        proxy_cidr: str | None = None,
        pod_start_timeout: float = 180,
        poll_interval: float = 0.5,
        stream: Callable[..., Any] | None = None,
        build_registry: str | None = None,
        build_registry_auth: str | None = None,
        build_pull_secret: str | None = None,
    ) -> None:
        self.namespace = namespace
        # Where environment builds are pushed (a repository: registry.example.com/hangar/
        # builds), the Docker config file hangar pushes with, and the Secret pods pull with.
        self.build_registry = build_registry
        self.build_registry_auth = build_registry_auth
        self.build_pull_secret = build_pull_secret
        self.proxy_port = proxy_port
        self.proxy_namespace = proxy_namespace
        self.proxy_pod_labels = proxy_pod_labels or {"app.kubernetes.io/name": "hangar"}
        self.proxy_cidr = proxy_cidr
        self.pod_start_timeout = pod_start_timeout
        self.poll_interval = poll_interval
        self._api_client = api_client
        self._stream = stream

    # ---- the client ---------------------------------------------------------------

    @property
    def core(self) -> Any:
        from kubernetes import client, config

        if self._api_client is None:
            try:
                config.load_incluster_config()
            except config.ConfigException:
                config.load_kube_config()
            self._api_client = client.ApiClient()
        return client.CoreV1Api(self._api_client)

    @property
    def networking(self) -> Any:
        from kubernetes import client

        self.core  # noqa: B018 (loads the configuration once)
        return client.NetworkingV1Api(self._api_client)

    def _stream_fn(self) -> Callable[..., Any]:
        if self._stream is None:
            from kubernetes.stream import stream

            self._stream = stream
        return self._stream

    # ---- exec ---------------------------------------------------------------------

    def _exec(
        self,
        pod: str,
        command: list[str],
        *,
        stdin: bytes | None = None,
        timeout: float | None = None,
        on_chunk: Callable[[bytes], None] | None = None,
    ) -> tuple[int | None, bytes, bool]:
        """(exit code, combined output, timed out) of one exec; blocking."""
        resp = self._stream_fn()(
            self.core.connect_get_namespaced_pod_exec,
            pod,
            self.namespace,
            container=CONTAINER_NAME,
            command=command,
            stdin=stdin is not None,
            stdout=True,
            stderr=True,
            tty=False,
            binary=True,
            _preload_content=False,
        )
        output = OutputTail()  # a command printing gigabytes costs hangar 1 MiB
        deadline = None if timeout is None else time.monotonic() + timeout
        timed_out = False
        try:
            if stdin is not None:
                resp.write_stdin(stdin)
            while resp.is_open():
                resp.update(timeout=0.2)
                for read in (resp.read_stdout, resp.read_stderr):
                    chunk = read(timeout=0)
                    if chunk:
                        data = chunk if isinstance(chunk, bytes) else chunk.encode()
                        output.add(data)
                        if on_chunk:
                            on_chunk(data)
                if deadline is not None and time.monotonic() >= deadline:
                    timed_out = True
                    break
        finally:
            resp.close()
        return (None if timed_out else resp.returncode), output.data(), timed_out

    def _pod(self, sb: Sandbox) -> str:
        return sb.ref.get("pod") or pod_name(sb.id)

    def _put(self, pod: str, path: str, data: bytes, mode: int = 0o600) -> None:
        script = 'mkdir -p "$(dirname "$1")" && head -c "$2" > "$1" && chmod "$3" "$1"'
        code, out, _ = self._exec(
            pod, ["sh", "-c", script, "copy-in", path, str(len(data)), f"{mode:o}"], stdin=data
        )
        if code != 0:
            raise SandboxError(f"could not write {path} in pod {pod}: {out[-500:]!r}")

    def _clean_env_command(self, pod: str, env: dict[str, str] | None, inner: str, *args: str):
        """argv that runs `inner` (a sh script) in a fresh environment made of env."""
        env_path = f"/tmp/hangar-env-{secrets.token_hex(6)}"
        self._put(pod, env_path, env_file(sandbox_env(env, path=BASE_PATH)))
        prelude = 'set -a; . "$0"; set +a; rm -f "$0"; '
        return ["env", "-i", "/bin/sh", "-c", prelude + inner, env_path, *args]

    # ---- create / destroy / list ---------------------------------------------------

    async def create(self, spec: EnvSpec, labels: dict[str, str]) -> Sandbox:
        if not spec.image:
            raise SandboxError(f"environment {spec.name}: the kubernetes provider needs an image")
        check_labels(labels)
        sb = Sandbox(id=new_sandbox_id(), provider=self.name, labels=dict(labels))
        from_build = self.is_build_image(spec.image)
        manifest = sandbox_pod(sb, spec, namespace=self.namespace, from_build=from_build,
                               pull_secret=self.build_pull_secret if from_build else None)
        await asyncio.to_thread(self._ensure_network_policy)
        await asyncio.to_thread(
            self.core.create_namespaced_pod, namespace=self.namespace, body=manifest
        )
        sb.ref = {"pod": pod_name(sb.id), "namespace": self.namespace}
        try:
            await self._wait_running(sb)
            code, out, _ = await asyncio.to_thread(
                self._exec, self._pod(sb), ["mkdir", "-p", HOME_DIR, HANGAR_DIR]
            )
            if code != 0:
                raise SandboxError(f"could not prepare /workspace in {sb.id}: {out!r}")
        except BaseException:
            await self.destroy(sb)
            raise
        return sb

    def _ensure_network_policy(self) -> None:
        from kubernetes.client.exceptions import ApiException

        policy = sandbox_network_policy(
            namespace=self.namespace,
            proxy_port=self.proxy_port,
            proxy_namespace=self.proxy_namespace,
            proxy_pod_labels=self.proxy_pod_labels,
            proxy_cidr=self.proxy_cidr,
        )
        try:
            self.networking.read_namespaced_network_policy(NETWORK_POLICY_NAME, self.namespace)
            return
        except ApiException as exc:
            if exc.status != 404:
                raise
        try:
            self.networking.create_namespaced_network_policy(self.namespace, policy)
        except ApiException as exc:
            if exc.status != 409:  # created meanwhile by another create
                raise

    async def _wait_running(self, sb: Sandbox) -> None:
        deadline = time.monotonic() + self.pod_start_timeout
        while True:
            pod = await asyncio.to_thread(
                self.core.read_namespaced_pod, self._pod(sb), self.namespace
            )
            phase = pod.status.phase if pod.status else None
            if phase == "Running":
                return
            for status in (pod.status.container_statuses if pod.status else None) or []:
                waiting = status.state.waiting if status.state else None
                if waiting and waiting.reason in (
                    "ErrImagePull", "ImagePullBackOff", "InvalidImageName",
                    "CreateContainerConfigError", "CreateContainerError",
                ):  # fmt: skip
                    raise SandboxError(
                        f"sandbox pod {self._pod(sb)} cannot start: {waiting.reason}: "
                        f"{waiting.message or ''}".strip()
                    )
            if phase in ("Failed", "Succeeded"):
                raise SandboxError(f"sandbox pod {self._pod(sb)} ended ({phase}) before use")
            if time.monotonic() >= deadline:
                raise SandboxError(
                    f"sandbox pod {self._pod(sb)} was not running after "
                    f"{self.pod_start_timeout:g} s (phase {phase})"
                )
            await asyncio.sleep(self.poll_interval)

    async def destroy(self, sb: Sandbox) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            await asyncio.to_thread(
                self.core.delete_namespaced_pod,
                self._pod(sb),
                self.namespace,
                grace_period_seconds=0,
            )
        except ApiException as exc:
            if exc.status != 404:
                raise

    async def list(self, labels: dict[str, str]) -> list[Sandbox]:
        check_labels(labels)
        selector = ",".join([SANDBOX_LABEL, *(f"{k}={v}" for k, v in sorted(labels.items()))])
        pods = await asyncio.to_thread(
            self.core.list_namespaced_pod, self.namespace, label_selector=selector
        )
        found = []
        for pod in pods.items:
            meta = pod.metadata
            annotations = meta.annotations or {}
            try:
                own = json.loads(annotations.get(LABELS_ANNOTATION, "{}"))
                created = float(annotations.get(CREATED_ANNOTATION, "0"))
            except ValueError:
                own, created = {}, 0.0
            found.append(
                Sandbox(
                    id=meta.labels[SANDBOX_LABEL],
                    provider=self.name,
                    labels=own,
                    ref={"pod": meta.name, "namespace": meta.namespace},
                    created_at=created,
                )
            )
        return sorted(found, key=lambda s: (s.created_at, s.id))

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
        pod = self._pod(sb)
        pid_file = f"/tmp/hangar-run-{secrets.token_hex(6)}.pid"
        inner = 'echo $$ > "$1"; cd "$2" || exit 127; shift 2; exec "$@"'
        loop = asyncio.get_running_loop()
        tail = OutputTail()

        def chunk(data: bytes) -> None:
            tail.add(data)
            if on_output is not None:
                loop.call_soon_threadsafe(on_output, data)

        def execute() -> tuple[int | None, bool]:
            command = self._clean_env_command(pod, env, inner, pid_file, cwd, *argv)
            code, _, timed_out = self._exec(pod, command, timeout=timeout, on_chunk=chunk)
            if timed_out:
                self._kill_tree(pod, pid_file, "KILL")
            return code, timed_out

        started = time.monotonic()
        code, timed_out = await asyncio.to_thread(execute)
        return ExecResult(
            exit_code=code,
            output=tail.text(),
            timed_out=timed_out,
            duration_s=time.monotonic() - started,
        )

    def is_build_image(self, image: str) -> bool:
        """Whether an image is one of this hangar's environment builds (pushed by digest)."""
        return bool(self.build_registry) and image.startswith(f"{self.build_registry}@sha256:")

    async def export_checkout(self, sb: Sandbox, dest: Path, limit: int) -> int:
        """Stream `tar -c repo` of /workspace out of the pod into `dest`, at most `limit`
        bytes (exec output is otherwise kept only as a 1 MiB tail); the bytes written."""
        written = 0

        def execute() -> int | None:
            nonlocal written
            with open(dest, "wb") as out:
                def chunk(data: bytes) -> None:
                    nonlocal written
                    written += len(data)
                    if written > limit:
                        raise SandboxError(
                            f"the checkout after install is over {limit / 2**20:.0f} MiB "
                            "(HANGAR_SNAPSHOT_MAX_MB); keep caches out of the repository "
                            "directory or raise the cap")
                    out.write(data)

                # stderr is dropped in the pod: the stream is the archive and nothing else.
                code, _, _ = self._exec(
                    self._pod(sb), ["sh", "-c", f"cd {WORKSPACE} && exec tar -c repo 2>/dev/null",
                                    EXPORT_TAG], timeout=600, on_chunk=chunk)
            return code

        code = await asyncio.to_thread(execute)
        if code != 0:
            raise SandboxError(f"archiving {REPO_DIR} in the build pod failed (exit {code})")
        return written

    def _kill_tree(self, pod: str, pid_file: str, sig: str, *, skip_root: bool = False) -> None:
        script = 'pid=$(cat "$1" 2>/dev/null) || exit 0; shift; exec sh -c "$0" kill-tree "$@" $pid'
        self._exec(pod, ["sh", "-c", script, KILL_TREE, pid_file, sig, "1" if skip_root else "0"])

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
        pod = self._pod(sb)
        process_id = new_process_id()
        wrapper = detached_wrapper(argv, cwd=cwd, log_path=log_path, process_id=process_id)
        # In the background, immune to the exec session's hangup. The pid (for stop) comes
        # from a new sh: in a subshell $$ would still be the parent's.
        inner = (
            '( trap "" HUP; exec sh -c \'echo $$ > "$1"; shift; exec "$@"\' pid "$@" ) '
            "</dev/null >/dev/null 2>&1 &"
        )

        def launch() -> None:
            command = self._clean_env_command(
                pod, env, inner, f"{HANGAR_DIR}/{process_id}.pid", *wrapper
            )
            code, out, _ = self._exec(pod, command)
            if code != 0:
                raise SandboxError(f"could not start the agent in {sb.id}: {out[-500:]!r}")

        await asyncio.to_thread(launch)
        return process_id

    async def observe(self, sb: Sandbox, process_id: str) -> ProcessStatus:
        if "/" in process_id or not process_id.startswith("p-"):
            raise ValueError(f"not a process id: {process_id!r}")
        exit_path = exit_file(process_id)
        # One exec per tick: the exit file, else whether the wrapper lives (zombie = gone).
        # Files the agent can replace (by a FIFO, a link) are read only as regular files,
        # with head -c under a timeout.
        script = (
            't=""; command -v timeout >/dev/null 2>&1 && t="timeout -s KILL 5"; '
            'small() { [ -f "$1" ] && [ ! -L "$1" ] && $t head -c 64 -- "$1" 2>/dev/null; }; '
            'if [ -f "$1" ]; then echo "exit $(small "$1")"; exit 0; fi; '
            'pid=$(small "$2") && [ -r /proc/$pid/stat ] && '
            'read -r l < /proc/$pid/stat && s=${l##*) } && [ "${s%% *}" != Z ] '
            "&& { echo running; exit 0; }; "
            'if [ -f "$1" ]; then echo "exit $(small "$1")"; else echo gone; fi'
        )
        command = ["sh", "-c", script, "observe", exit_path, f"{HANGAR_DIR}/{process_id}.pid"]
        code, out, _ = await asyncio.to_thread(
            self._exec, self._pod(sb), command, timeout=EXEC_READ_TIMEOUT_S
        )
        words = out.decode(errors="replace").split()
        if code == 0 and words[:1] == ["running"]:
            return ProcessStatus(state="running")
        if code == 0 and words[:1] == ["exit"] and len(words) > 1:
            try:
                return ProcessStatus(state="exited", exit_code=int(words[1]))
            except ValueError:
                pass
        return ProcessStatus(state="gone")

    async def stop(self, sb: Sandbox, process_id: str, grace_s: float = 5) -> None:
        pod = self._pod(sb)
        pid_file = f"{HANGAR_DIR}/{process_id}.pid"
        await asyncio.to_thread(self._kill_tree, pod, pid_file, "TERM", skip_root=True)
        deadline = time.monotonic() + grace_s
        while (await self.observe(sb, process_id)).state == "running":
            if time.monotonic() >= deadline:
                await asyncio.to_thread(self._kill_tree, pod, pid_file, "KILL")
                break
            await asyncio.sleep(self.poll_interval)

    # ---- files --------------------------------------------------------------------

    async def copy_in(self, sb: Sandbox, files: dict[str, bytes], mode: int = 0o644) -> None:
        for path, data in files.items():
            _check_workspace_path(path)
            await asyncio.to_thread(self._put, self._pod(sb), path, data, mode)

    async def copy_out(self, sb: Sandbox, path: str, max_bytes: int = LOG_TAIL_BYTES) -> bytes:
        norm = f"{WORKSPACE}/{workspace_relative(path)}"
        argv = ["sh", "-c", SAFE_TAIL_SH, "copy-out", norm, str(max_bytes)]
        code, out, timed_out = await asyncio.to_thread(
            self._exec, self._pod(sb), argv, timeout=EXEC_READ_TIMEOUT_S
        )
        if timed_out:
            raise SandboxError(f"reading {path} in {sb.id} took over "
                               f"{EXEC_READ_TIMEOUT_S} s; gave up")
        if code == MISSING_CODE:
            raise FileNotFoundError(path)
        if code == REFUSED_CODE:
            raise refusal(norm)
        if code != 0:
            raise SandboxError(f"could not read {path} in {sb.id}: {out[-500:]!r}")
        return out[-max_bytes:]


def _check_workspace_path(path: str) -> None:
    norm = os.path.normpath(path)
    if not path.startswith("/") or not norm.startswith(WORKSPACE + "/"):
        raise ValueError(f"{path}: only paths under {WORKSPACE} can be copied in or out")
