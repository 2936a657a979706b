"""`hangar app-secret` makes the Secret the manifests read the App from, and the
top-level kustomization composes hangar and its sandboxes."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from kubernetes_validate.utils import latest_version

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"


def app_secret(hangar_cli, tmp_path: Path, env: dict[str, str], *args: str):
    return hangar_cli("app-secret", *args, env={"HANGAR_DATA_DIR": str(tmp_path / "data"),
                                                **env})


def key_file(tmp_path: Path) -> Path:
    pem = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption())
    path = tmp_path / "app.pem"
    path.write_bytes(pem)
    return path


def secret_refs(deployment: dict) -> tuple[set[str], set[str]]:
    """(keys the Deployment needs from hangar-app, keys it may read if present)."""
    needed, optional = set(), set()
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    for var in container["env"]:
        ref = (var.get("valueFrom") or {}).get("secretKeyRef")
        if ref and ref["name"] == "hangar-app":
            (optional if ref.get("optional") else needed).add(ref["key"])
    for volume in deployment["spec"]["template"]["spec"]["volumes"]:
        if (volume.get("secret") or {}).get("secretName") == "hangar-app":
            needed |= {item["key"] for item in volume["secret"]["items"]}
    return needed, optional


def test_the_secret_has_every_key_the_deployment_reads(tmp_path, hangar_cli):
    key = key_file(tmp_path)
    made = app_secret(hangar_cli, tmp_path,
                      {"HANGAR_APP_ID": "42", "HANGAR_PRIVATE_KEY_FILE": str(key),
                       "HANGAR_WEBHOOK_SECRET": "s3cret",
                       "HANGAR_CLIENT_ID": "Iv1.abc", "HANGAR_CLIENT_SECRET": "cs",
                       "HANGAR_PUBLIC_URL": "https://hangar.example.com"},
                      "--namespace", "ops")
    assert made.returncode == 0, made.stderr
    secret = yaml.safe_load(made.stdout)
    kubernetes_validate.validate(secret, latest_version(), strict=True)
    assert secret["metadata"] == {"name": "hangar-app", "namespace": "ops"}
    data = secret["stringData"]
    assert data["private-key"] == key.read_text() and data["app-id"] == "42"
    deployment = next(d for d in yaml.safe_load_all(
        (MANIFESTS / "hangar" / "deployment.yaml").read_text()) if d["kind"] == "Deployment")
    needed, optional = secret_refs(deployment)
    assert needed <= set(data) and optional <= set(data), (needed | optional) - set(data)


def test_without_an_app_it_says_what_is_missing(tmp_path, hangar_cli):
    made = app_secret(hangar_cli, tmp_path, {})
    assert made.returncode == 2 and not made.stdout
    assert made.stderr.startswith("hangar app-secret: HANGAR_WEBHOOK_SECRET is not set")


def test_one_kustomization_composes_hangar_and_its_sandboxes():
    top = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    assert top["resources"] == ["hangar", "sandboxes"] and "namespace" not in top
    for part in top["resources"]:
        assert (MANIFESTS / part / "kustomization.yaml").is_file()
