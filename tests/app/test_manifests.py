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
# Sent to every App whatever it subscribes to, so the manifest does not list them.
ALWAYS_SENT = {"installation", "installation_repositories"}


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
        assert listed == present, kustomization


def test_app_manifest_subscribes_to_what_the_handlers_handle():
    manifest = json.loads((MANIFESTS / "github-app.json").read_text())
    handled = set(router._shallow_routes) | set(router._deep_routes)
    assert set(manifest["default_events"]) == handled - ALWAYS_SENT
    assert manifest["default_permissions"]["checks"] == "write"
    assert manifest["hook_attributes"]["url"].endswith("/webhook")
