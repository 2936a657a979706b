"""`hangar app-secret`: the Kubernetes Secret the manifests read the App from, made from
what `hangar setup` wrote (or the HANGAR_* settings), so nobody copies a key by hand."""

from __future__ import annotations

import sys

import yaml

from app.settings import Settings, SettingsError


def secret_manifest(settings: Settings, *, name: str, namespace: str) -> dict:
    """The Secret `manifests/hangar/deployment.yaml` mounts and reads, as a mapping."""
    settings.check_for_serving()  # an App id, a readable key and a webhook secret
    assert settings.private_key_file is not None and settings.app_id is not None
    data = {"app-id": str(settings.app_id), "webhook-secret": settings.secret(),
            "private-key": settings.private_key_file.read_text()}
    if settings.client_id and settings.client_secret:  # sign-in to hangar's pages
        data["client-id"] = settings.client_id
        data["client-secret"] = settings.client_secret.get_secret_value()
    if settings.public_url:
        data["public-url"] = settings.public_url
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": namespace}, "stringData": data}


def app_secret_command(settings: Settings, *, name: str, namespace: str) -> int:
    try:
        manifest = secret_manifest(settings, name=name, namespace=namespace)
    except SettingsError as exc:
        print(f"hangar app-secret: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(yaml.safe_dump(manifest, sort_keys=False, default_style=None))
    return 0
