"""The kubernetes provider without a cluster: generated objects are validated against the
Kubernetes schemas, and the call sequence runs through the real client with only its
transports faked (REST: `rest_client.request`; exec: the websocket call under
`kubernetes.stream`), so URLs, query strings and bodies are the client's own."""

from __future__ import annotations

import functools
import json
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qs, urlsplit

import kubernetes_validate
import pytest
from kubernetes import client
from kubernetes.stream.stream import _websocket_request

from sandbox.envspec import EnvSpec
from sandbox.provider import Sandbox, SandboxError
from sandbox.providers.kubernetes import (
    NETWORK_POLICY_NAME,
    KubernetesProvider,
    sandbox_network_policy,
    sandbox_pod,
)

K8S_VERSION = "1.30"
NS = "hangar-sandboxes"
SPEC = EnvSpec(
    name="k", provider="kubernetes", image="registry.example/hangar-base:1",
    resources={"cpus": 1.5, "memory_mb": 2048, "pids": 256},
)  # fmt: skip


def test_pod_manifest_is_valid_and_locked_down():
    sb = Sandbox(id="sb-0123456789ab", provider="kubernetes", labels={"hangar.run": "run-1"})
    pod = sandbox_pod(sb, SPEC, namespace=NS)
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
    spec = pod["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False
    assert spec["restartPolicy"] == "Never"
    assert spec["securityContext"]["runAsNonRoot"] is True
    container = spec["containers"][0]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert container["resources"]["limits"] == {"cpu": "1500m", "memory": "2048Mi"}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert mounts == {"/workspace": "workspace", "/tmp": "tmp"}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert "emptyDir" in volumes["workspace"] and "emptyDir" in volumes["tmp"]
    assert pod["metadata"]["labels"] == {
        "hangar.run": "run-1", "hangar.sandbox": sb.id, "hangar.provider": "kubernetes",
    }  # fmt: skip


@pytest.mark.parametrize("cidr", [None, "10.0.12.7/32"])
def test_network_policy_allows_only_dns_and_the_proxy(cidr):
    policy = sandbox_network_policy(
        namespace=NS, proxy_port=8080, proxy_namespace="hangar",
        proxy_pod_labels={"app.kubernetes.io/name": "hangar"}, proxy_cidr=cidr,
    )  # fmt: skip
    kubernetes_validate.validate(policy, K8S_VERSION, strict=True)
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"] and spec["ingress"] == []
    dns, proxy = spec["egress"]
    assert {p["port"] for p in dns["ports"]} == {53}
    assert dns["to"][0]["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}
    assert proxy["ports"] == [{"protocol": "TCP", "port": 8080}]
    if cidr:
        assert proxy["to"] == [{"ipBlock": {"cidr": cidr}}]
    else:
        assert proxy["to"][0]["podSelector"] == {
            "matchLabels": {"app.kubernetes.io/name": "hangar"}
        }
    assert spec["podSelector"]["matchExpressions"][0]["key"] == "hangar.sandbox"


def test_validation_catches_a_broken_manifest():
    sb = Sandbox(id="sb-0123456789ab", provider="kubernetes")
    pod = sandbox_pod(sb, SPEC, namespace=NS)
    pod["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"] = "yes"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)


class FakeResponse:
    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self.reason = "OK" if status < 400 else "Error"
        self.data = json.dumps(body).encode()
        self.headers = {"content-type": "application/json"}

    def read(self) -> bytes:
        return self.data

    def getheaders(self) -> dict[str, str]:
        return self.headers

    def getheader(self, name: str, default: str | None = None) -> str | None:
        return self.headers.get(name.lower(), default)


class FakeExec:
    """A websocket exec session: runs the cluster's responder once stdin is in."""

    def __init__(self, cluster: FakeCluster, command: list[str]) -> None:
        self.cluster, self.command = cluster, command
        self.stdin = b""
        self.out: bytes | None = None
        self.returncode: int | None = None
        self.closed = False

    def write_stdin(self, data: bytes) -> None:
        self.stdin += data

    def is_open(self) -> bool:
        return self.out is None

    def update(self, timeout: float = 0) -> None:
        if self.out is None:
            self.out, self.returncode = self.cluster.respond(self.command, self.stdin)
            self._pending = self.out

    def read_stdout(self, timeout: float | None = None) -> bytes:
        data, self._pending = self._pending, b""
        return data

    def read_stderr(self, timeout: float | None = None) -> bytes:
        return b""

    def close(self) -> None:
        self.closed = True


class FakeCluster:
    """Just enough of an API server: pods, one network policy, execs into a file map."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.bodies: list[Any] = []
        self.execs: list[list[str]] = []
        self.exec_urls: list[str] = []
        self.pods: dict[str, dict] = {}
        self.policies: dict[str, dict] = {}
        self.files: dict[str, bytes] = {}
        self.reads_until_running = 1
        self.waiting_reason: str | None = None
        self.process_state = "running"
        self.run_output = (b"hello from the pod\n", 0)
        self.checkout = b""  # what `tar -c repo` in the pod writes

    # REST
    def request(self, method, url, headers=None, body=None, post_params=None,
                _request_timeout=None):  # fmt: skip
        parts = urlsplit(url)
        query = parse_qs(parts.query)
        path = parts.path
        self.calls.append((method, path + (f"?{parts.query}" if parts.query else "")))
        self.bodies.append(body)
        pods = f"/api/v1/namespaces/{NS}/pods"
        policies = f"/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies"
        if path == policies and method == "POST":
            self.policies[body["metadata"]["name"]] = body
            return FakeResponse(201, body)
        if path.startswith(policies + "/") and method == "GET":
            name = path.rsplit("/", 1)[1]
            if name in self.policies:
                return FakeResponse(200, self.policies[name])
            return FakeResponse(404, {"kind": "Status", "code": 404, "reason": "NotFound"})
        if path == pods and method == "POST":
            self.pods[body["metadata"]["name"]] = {**body, "status": {"phase": "Pending"}}
            return FakeResponse(201, self.pods[body["metadata"]["name"]])
        if path == pods and method == "GET":
            wanted = query.get("labelSelector", [""])[0].split(",")
            items = [p for p in self.pods.values() if _selected(p, wanted)]
            return FakeResponse(200, {"kind": "PodList", "apiVersion": "v1", "items": items,
                                      "metadata": {}})  # fmt: skip
        if path.startswith(pods + "/"):
            name = path.rsplit("/", 1)[1]
            if name not in self.pods:
                return FakeResponse(404, {"kind": "Status", "code": 404, "reason": "NotFound"})
            if method == "DELETE":
                return FakeResponse(200, self.pods.pop(name))
            pod = self.pods[name]
            if self.waiting_reason:
                pod["status"] = {"phase": "Pending", "containerStatuses": [{
                    "name": "sandbox", "image": "x", "imageID": "", "ready": False,
                    "restartCount": 0,
                    "state": {"waiting": {"reason": self.waiting_reason, "message": "no pull"}},
                }]}  # fmt: skip
            elif self.reads_until_running > 0:
                self.reads_until_running -= 1
            else:
                pod["status"] = {"phase": "Running"}
            return FakeResponse(200, pod)
        raise AssertionError(f"unexpected call {method} {url}")

    # exec (websocket)
    def websocket_call(self, configuration, method, url, **kwargs):
        self.exec_urls.append(url)
        command = parse_qs(urlsplit(url).query)["command"]
        self.execs.append(command)
        return FakeExec(self, command)

    def respond(self, command: list[str], stdin: bytes) -> tuple[bytes, int]:
        if command[:1] == ["mkdir"]:
            return b"", 0
        if command[:2] == ["sh", "-c"] and command[3] == "copy-in":
            path, size = command[4], int(command[5])
            self.files[path] = stdin[:size]
            return b"", 0
        if command[:2] == ["sh", "-c"] and command[3] == "copy-out":
            if command[4] not in self.files:
                return b"", 44
            return self.files[command[4]], 0
        if command[:2] == ["sh", "-c"] and command[3] == "observe":
            exit_path = command[4]
            if exit_path in self.files:
                return b"exit " + self.files[exit_path], 0
            return self.process_state.encode() + b"\n", 0
        if command[:2] == ["env", "-i"]:
            return self.run_output
        if command[:2] == ["sh", "-c"] and command[3] == "export-checkout":
            return self.checkout, 0
        if command[:2] == ["sh", "-c"] and command[3].startswith("\nsig="):
            return b"", 0  # the kill-tree script
        raise AssertionError(f"unexpected exec {command}")


def _selected(pod: dict, wanted: list[str]) -> bool:
    labels = pod["metadata"].get("labels", {})
    for term in wanted:
        key, _, value = term.partition("=")
        if key not in labels or (value and labels[key] != value):
            return False
    return True


@pytest.fixture
def cluster() -> FakeCluster:
    return FakeCluster()


@pytest.fixture
def provider(cluster: FakeCluster) -> KubernetesProvider:
    configuration = client.Configuration()
    configuration.host = "https://k8s.invalid"
    api = client.ApiClient(configuration)
    api.rest_client.request = cluster.request
    return KubernetesProvider(
        namespace=NS, api_client=api, proxy_port=8080, poll_interval=0.01,
        stream=functools.partial(_websocket_request, cluster.websocket_call, None),
    )  # fmt: skip


async def test_create_sequence_policy_pod_wait_prepare(provider, cluster):
    sb = await provider.create(SPEC, {"hangar.run": "run-1"})
    assert cluster.calls == [
        ("GET", f"/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies/"
                f"{NETWORK_POLICY_NAME}"),
        ("POST", f"/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies"),
        ("POST", f"/api/v1/namespaces/{NS}/pods"),
        ("GET", f"/api/v1/namespaces/{NS}/pods/hangar-{sb.id}"),
        ("GET", f"/api/v1/namespaces/{NS}/pods/hangar-{sb.id}"),
    ]  # fmt: skip
    # What was sent is what the schema accepts.
    kubernetes_validate.validate(cluster.bodies[1], K8S_VERSION, strict=True)
    kubernetes_validate.validate(cluster.bodies[2], K8S_VERSION, strict=True)
    assert cluster.bodies[2]["spec"]["automountServiceAccountToken"] is False
    assert cluster.execs == [["mkdir", "-p", "/workspace/home", "/workspace/.hangar"]]
    assert "container=sandbox" in cluster.exec_urls[0]
    # The policy exists now: a second sandbox does not create it again.
    cluster.calls.clear()
    await provider.create(SPEC, {})
    assert [c for c in cluster.calls if "networkpolicies" in c[1]] == [
        ("GET", f"/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies/"
                f"{NETWORK_POLICY_NAME}"),
    ]  # fmt: skip


async def test_run_passes_env_through_a_file_never_the_url(provider, cluster):
    sb = await provider.create(SPEC, {})
    chunks: list[bytes] = []
    result = await provider.run(
        sb, ["python3", "-m", "unittest"], env={"SECRET_THING": "s3cr3t value"},
        cwd="/workspace/repo", on_output=chunks.append, timeout=30,
    )  # fmt: skip
    assert result.exit_code == 0 and result.output == "hello from the pod\n"
    assert not any("s3cr3t" in url for url in cluster.exec_urls)
    env_files = [p for p in cluster.files if p.startswith("/tmp/hangar-env-")]
    assert len(env_files) == 1
    env_text = cluster.files[env_files[0]].decode()
    assert "export SECRET_THING='s3cr3t value'" in env_text
    assert "export HOME=/workspace/home" in env_text
    run_exec = cluster.execs[-1]
    assert run_exec[:5] == ["env", "-i", "/bin/sh", "-c", run_exec[4]]
    assert run_exec[5] == env_files[0]
    assert run_exec[-4:] == ["/workspace/repo", "python3", "-m", "unittest"]


async def test_start_observe_stop(provider, cluster):
    sb = await provider.create(SPEC, {})
    pid = await provider.start(sb, ["bash", "/workspace/.hangar/agent.sh"], env={"T": "1"})
    launch = cluster.execs[-1]
    assert launch[:2] == ["env", "-i"] and 'trap "" HUP' in launch[4]
    assert launch[6] == f"/workspace/.hangar/{pid}.pid"
    assert (await provider.observe(sb, pid)).state == "running"
    cluster.process_state = "gone"
    assert (await provider.observe(sb, pid)).state == "gone"
    cluster.files[f"/workspace/.hangar/{pid}.exit"] = b"3\n"
    status = await provider.observe(sb, pid)
    assert (status.state, status.exit_code) == ("exited", 3)
    cluster.process_state = "running"
    del cluster.files[f"/workspace/.hangar/{pid}.exit"]
    before = len(cluster.execs)
    await provider.stop(sb, pid, grace_s=0.05)
    kills = [c for c in cluster.execs[before:] if c[3].startswith("\nsig=")]
    assert [k[5] for k in kills] == ["TERM", "KILL"]  # TERM first, KILL after the grace


async def test_copy_in_out_list_destroy(provider, cluster):
    sb = await provider.create(SPEC, {"hangar.run": "run-7", "hangar.role": "agent"})
    await provider.copy_in(sb, {"/workspace/a/b.txt": b"\x00binary\xff"}, mode=0o755)
    copy = next(c for c in cluster.execs if c[3] == "copy-in" and c[4] == "/workspace/a/b.txt")
    assert copy[5:] == ["8", "755"]
    assert await provider.copy_out(sb, "/workspace/a/b.txt") == b"\x00binary\xff"
    with pytest.raises(FileNotFoundError):
        await provider.copy_out(sb, "/workspace/none")
    with pytest.raises(ValueError):
        await provider.copy_in(sb, {"/etc/passwd": b""})
    listed = await provider.list({"hangar.run": "run-7"})
    assert [(s.id, s.labels) for s in listed] == [
        (sb.id, {"hangar.run": "run-7", "hangar.role": "agent"})
    ]
    assert cluster.calls[-1] == (
        "GET", f"/api/v1/namespaces/{NS}/pods?labelSelector=hangar.sandbox%2Changar.run%3Drun-7"
    )  # fmt: skip
    await provider.destroy(sb)
    await provider.destroy(sb)  # 404 the second time: fine
    assert cluster.calls[-2:] == [
        ("DELETE", f"/api/v1/namespaces/{NS}/pods/hangar-{sb.id}?gracePeriodSeconds=0"),
        ("DELETE", f"/api/v1/namespaces/{NS}/pods/hangar-{sb.id}?gracePeriodSeconds=0"),
    ]
    assert await provider.list({"hangar.run": "run-7"}) == []


async def test_image_pull_failure_is_reported_and_the_pod_removed(provider, cluster):
    cluster.waiting_reason = "ImagePullBackOff"
    with pytest.raises(SandboxError, match="cannot start: ImagePullBackOff"):
        await provider.create(SPEC, {})
    assert cluster.pods == {}
    assert cluster.calls[-1][0] == "DELETE"


async def test_labels_kubernetes_cannot_hold_are_refused(provider):
    with pytest.raises(SandboxError, match="Kubernetes label values"):
        await provider.create(SPEC, {"hangar.prompt": "fix the login test please"})
    with pytest.raises(SandboxError, match="not a valid Kubernetes label key"):
        await provider.list({"bad key": "x"})


# ---- environment builds ------------------------------------------------------------------

BUILD_IMAGE = "registry.example/hangar/builds@sha256:" + "a" * 64


def test_a_pod_from_a_build_copies_the_checkout_in_before_the_sandbox_starts():
    sb = Sandbox(id="sb-0123456789ab", provider="kubernetes")
    spec = SPEC.model_copy(update={"image": BUILD_IMAGE})
    pod = sandbox_pod(sb, spec, namespace=NS, from_build=True,
                      pull_secret="hangar-build-registry")
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
    # The kubernetes client's own models read it whole and write it back unchanged.
    api = client.ApiClient()
    model = api.deserialize(json.dumps(pod), "V1Pod", "application/json")
    assert api.sanitize_for_serialization(model) == pod
    [init] = model.spec.init_containers
    [main] = model.spec.containers
    assert init.image == main.image == BUILD_IMAGE
    # The build image holds the checkout at /workspace/repo, which the workspace volume
    # hides in the sandbox container: the init container copies it into that volume.
    assert init.command == ["cp", "-a", "/workspace/repo", "/hangar-restore/repo"]
    assert [(m.name, m.mount_path) for m in init.volume_mounts] == [
        ("workspace", "/hangar-restore")]
    assert init.security_context == main.security_context
    assert init.security_context.read_only_root_filesystem is True
    assert [s.name for s in model.spec.image_pull_secrets] == ["hangar-build-registry"]
    # A pod of the environment's own image has neither.
    plain = sandbox_pod(sb, SPEC, namespace=NS)
    assert "initContainers" not in plain["spec"] and "imagePullSecrets" not in plain["spec"]


async def test_a_kubernetes_build_is_pushed_to_the_registry_its_pods_start_from(
        cluster, registry_host, tmp_path):
    import base64
    import gzip
    import io
    import tarfile

    import aiohttp
    from sandbox_helpers import REGISTRY_PASSWORD, REGISTRY_USER, seed_base_image, tar_bytes

    from sandbox import registry as oci
    from sandbox import snapshots

    auth = tmp_path / "config.json"
    login = base64.b64encode(f"{REGISTRY_USER}:{REGISTRY_PASSWORD}".encode()).decode()
    auth.write_text(json.dumps({"auths": {registry_host: {"auth": login}}}))
    base = f"{registry_host}/envs/python:1"
    credentials = oci.load_credentials(auth)
    async with aiohttp.ClientSession() as session:
        await seed_base_image(oci.Registry(session, credentials), oci.ImageRef.parse(base))
    configuration = client.Configuration()
    configuration.host = "https://k8s.invalid"
    api = client.ApiClient(configuration)
    api.rest_client.request = cluster.request
    provider = KubernetesProvider(
        namespace=NS, api_client=api, poll_interval=0.01,
        stream=functools.partial(_websocket_request, cluster.websocket_call, None),
        build_registry=f"{registry_host}/hangar/builds", build_registry_auth=str(auth),
        build_pull_secret="hangar-build-registry")
    spec = SPEC.model_copy(update={"image": base})
    assert snapshots.unsupported(provider) is None
    # The key holds the digest the environment image's name points at, as a pod pulls it.
    from app.envbuilds.steps import image_id

    engine = SimpleNamespace(providers={"kubernetes": provider})
    first_id = await image_id(engine, spec)
    async with aiohttp.ClientSession() as session:
        _, _, digest = await oci.Registry(session, credentials).manifest(
            oci.ImageRef.parse(base))
    assert first_id == digest
    builder = await provider.create(spec, {})
    cluster.checkout = tar_bytes({"repo/.deps/lib.py": b"installed\n",
                                      "repo/app.py": b"import lib\n"})
    dest = tmp_path / "envbuilds"
    ref = await snapshots.save(provider, builder, build_id="bld-k8s00001", base_image=base,
                               dest_dir=dest, max_bytes=1 << 20)
    assert ref.startswith(f"{registry_host}/hangar/builds@sha256:")
    assert list(dest.iterdir()) == []  # the archive and the layer are not kept on hangar's disk
    async with aiohttp.ClientSession() as session:
        reader = oci.Registry(session, credentials)
        manifest, _, _ = await reader.manifest(oci.ImageRef.parse(ref))
        layer = await reader.blob(oci.ImageRef.parse(ref), manifest["layers"][-1]["digest"])
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(layer))) as tar:
        assert tar.extractfile("workspace/repo/.deps/lib.py").read() == b"installed\n"

    # A sandbox of the build runs exactly that image, pulled with the Secret, checkout first.
    start = spec.model_copy(update={"image": snapshots.image_for("kubernetes", ref, base)})
    await provider.create(start, {})
    pod = [body for (method, path), body in zip(cluster.calls, cluster.bodies, strict=True)
           if method == "POST" and path.endswith("/pods")][-1]
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
    assert pod["spec"]["containers"][0]["image"] == ref
    assert pod["spec"]["initContainers"][0]["image"] == ref
    assert pod["spec"]["imagePullSecrets"] == [{"name": "hangar-build-registry"}]

    # Dropped past HANGAR_ENV_BUILDS_KEEP: the registry no longer has it.
    await snapshots.drop(provider, ref)
    async with aiohttp.ClientSession() as session:
        with pytest.raises(oci.RegistryError, match="HTTP 404"):
            await oci.Registry(session, credentials).manifest(oci.ImageRef.parse(ref))

    # The environment image retagged (pushed again under its name): a new key, a rebuild.
    async with aiohttp.ClientSession() as session:
        await seed_base_image(oci.Registry(session, credentials), oci.ImageRef.parse(base),
                              marker=b"rebuilt\n")
    assert await image_id(engine, spec) not in (first_id, base)

    # A checkout over the cap fails the build with the cap's name, and leaves nothing.
    cluster.checkout = tar_bytes({"repo/big.bin": b"x" * (2 << 20)})
    with pytest.raises(SandboxError, match="HANGAR_SNAPSHOT_MAX_MB"):
        await snapshots.save(provider, builder, build_id="bld-k8s00002", base_image=base,
                             dest_dir=dest, max_bytes=1 << 20)
    assert list(dest.iterdir()) == []


def test_without_a_registry_a_kubernetes_build_says_what_to_set():
    from sandbox import snapshots

    why = snapshots.unsupported(KubernetesProvider(namespace=NS))
    assert "HANGAR_BUILD_REGISTRY" in why and "HANGAR_BUILD_REGISTRY_AUTH" in why
