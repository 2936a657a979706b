"""The deployment manifests are valid Kubernetes objects, and the GitHub App manifest asks
for exactly the events hangar's handlers react to."""

from __future__ import annotations

import json
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version

from handlers import router

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
# Sent to every App whatever it subscribes to, so the manifest does not list them (GitHub's
# list of events an App may subscribe to has no `installation_target` [unconfirmed]).
ALWAYS_SENT = {"installation", "installation_repositories", "github_app_authorization",
               "installation_target"}


def documents() -> list[tuple[str, dict]]:
    found = []
    for path in sorted(MANIFESTS.rglob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            found.append((f"{path.parent.name}/{path.name}", doc))
    return found


@pytest.mark.parametrize(("name", "doc"), documents(), ids=[n for n, _ in documents()])
def test_kubernetes_objects_validate(name, doc):
    kubernetes_validate.validate(doc, latest_version(), strict=True)


def test_kustomizations_list_every_file_beside_them():
    for kustomization in MANIFESTS.rglob("kustomization.yaml"):
        listed = set(yaml.safe_load(kustomization.read_text())["resources"])
        present = {p.name for p in kustomization.parent.glob("*.yaml")} - {kustomization.name}
        present |= {p.parent.name for p in kustomization.parent.glob("*/kustomization.yaml")}
        assert listed == present, kustomization


def test_app_manifest_subscribes_to_what_the_handlers_handle():
    manifest = json.loads((MANIFESTS / "github-app.json").read_text())
    handled = set(router._shallow_routes) | set(router._deep_routes)
    assert set(manifest["default_events"]) == handled - ALWAYS_SENT
    assert manifest["default_permissions"]["checks"] == "write"
    assert manifest["hook_attributes"]["url"].endswith("/webhook")


def test_the_deployment_runs_the_image_the_dockerfile_builds():
    kustomization = yaml.safe_load((MANIFESTS / "hangar" / "kustomization.yaml").read_text())
    deployment = next(d for n, d in documents()
                      if n == "hangar/deployment.yaml" and d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] in {i["name"] for i in kustomization["images"]}
    dockerfile = (MANIFESTS.parent / "Dockerfile").read_text()
    assert f"USER {pod['securityContext']['runAsUser']}:" in dockerfile
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    mounted = {m["mountPath"] for m in container["volumeMounts"]}
    assert {"/data", "/tmp"} <= mounted  # the only places hangar writes


def test_hangar_has_a_network_policy_that_admits_webhooks_and_sandbox_pushes():
    policy = next(d for n, d in documents() if n == "hangar/networkpolicy.yaml")
    assert policy["spec"]["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "hangar"}
    assert set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    rules = {p["port"]: rule for rule in policy["spec"]["ingress"] for p in rule["ports"]}
    assert set(rules) == {8787, 8788}
    # Only sandbox pods' namespace reaches the sandbox gate.
    assert rules[8788]["from"] == [{"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "hangar-sandboxes"}}}]


def test_sandboxes_are_pointed_at_the_sandbox_gate_not_the_main_port():
    deployment = next(d for n, d in documents()
                      if n == "hangar/deployment.yaml" and d["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert int(env["HANGAR_SANDBOX_PORT"]) == ports["sandbox"] != ports["http"]
    assert env["HANGAR_GIT_PROXY_URL"].endswith(f":{ports['sandbox']}")
    service = next(d for n, d in documents() if n == "hangar/service.yaml")
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]}["sandbox"] == ports["sandbox"]


def test_sandbox_processes_are_pointed_at_the_gate_for_egress_and_hangar_may_fetch():
    from yarl import URL

    from proxy.egress import proxy_env

    deployment = next(d for n, d in documents()
                      if n == "hangar/deployment.yaml" and d["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    settings = {e["name"]: e.get("value") for e in container["env"]}
    gate = URL(settings["HANGAR_GIT_PROXY_URL"])
    env = proxy_env(str(gate), "sb-1", "hge_t")
    proxy = URL(env["HTTPS_PROXY"])
    # The one port a sandbox pod may reach on hangar (its NetworkPolicy) is the gate's.
    assert (proxy.host, proxy.port) == (gate.host, int(settings["HANGAR_SANDBOX_PORT"]))
    assert gate.host in env["NO_PROXY"].split(",")  # git and the model go direct
    policy = next(d for n, d in documents() if n == "hangar/networkpolicy.yaml")
    out = {p["port"] for rule in policy["spec"]["egress"] for p in rule.get("ports", [])}
    assert {80, 443} <= out  # the proxy fetches allowlisted hosts over HTTP and HTTPS


def test_hangar_runs_two_replicas_on_postgresql_and_one_may_be_disrupted_at_a_time():
    deployment = next(d for n, d in documents()
                      if n == "hangar/deployment.yaml" and d["kind"] == "Deployment")
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    container = spec["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    url = env["HANGAR_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    assert (url["name"], url["key"]) == ("hangar-database", "url")  # never in the manifest
    assert env["HANGAR_REPLICA_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    volumes = {v["name"]: v for v in spec["template"]["spec"]["volumes"]}
    assert "persistentVolumeClaim" not in volumes["data"]  # no volume one pod alone may mount
    budget = next(d for n, d in documents() if n == "hangar/pdb.yaml")
    assert budget["kind"] == "PodDisruptionBudget" and budget["spec"]["minAvailable"] == 1
    assert budget["spec"]["selector"] == spec["selector"]
    policy = next(d for n, d in documents() if n == "hangar/networkpolicy.yaml")
    assert {"protocol": "TCP", "port": 5432} in [
        p for rule in policy["spec"]["egress"] for p in rule.get("ports", [])]
