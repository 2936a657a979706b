"""Sandbox providers by name: local (bubblewrap, the default), docker and kubernetes."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandbox.provider import Provider

if TYPE_CHECKING:
    from app.settings import Settings

PROVIDER_NAMES = ("local", "docker", "kubernetes")


def get_provider(name: str, **options: Any) -> Provider:
    """A provider by name. Options go to its constructor:

    - local: root (Path, required), proxy_port, hidden_paths
    - docker: client (a docker.DockerClient; default docker.from_env()), instance (the
      hangar.instance label that scopes list(); default "default")
    - kubernetes: namespace, api_client, proxy_host, proxy_port
    """
    if name == "local":
        from sandbox.providers.local import LocalProvider

        return LocalProvider(**options)
    if name == "docker":
        from sandbox.providers.docker import DockerProvider

        return DockerProvider(**options)
    if name == "kubernetes":
        from sandbox.providers.kubernetes import KubernetesProvider

        return KubernetesProvider(**options)
    raise ValueError(f"unknown sandbox provider {name!r}; use one of {', '.join(PROVIDER_NAMES)}")


def configured_provider(name: str, settings: Settings, instance_id: str) -> Provider:
    """A provider by name as hangar's settings configure it: local sandboxes under the
    data directory, which they never see; docker's labelled with the instance
    (`instance_id`), so its reaper never touches another hangar's; kubernetes' with the
    build registry. Every one reaches the sandbox gate on hangar's port."""
    from app.datadir import gate_dir

    if name == "local":
        root = Path(settings.data_dir).resolve() / "sandboxes"
        return get_provider(
            "local", root=root, proxy_port=settings.port,
            gate_dir=gate_dir(settings.data_dir),
            hidden_paths=[Path(settings.data_dir).resolve()], warm=True,
        )
    if name == "docker":
        return get_provider("docker", instance=instance_id, proxy_port=settings.port,
                            gate_dir=gate_dir(settings.data_dir))
    if name == "kubernetes":
        builds = {"build_registry": settings.build_registry,
                  "build_registry_auth": settings.build_registry_auth,
                  "build_pull_secret": settings.build_pull_secret}
        if settings.sandbox_port:
            return get_provider(name, proxy_port=settings.sandbox_port, **builds)
        return get_provider(name, **builds)
    return get_provider(name)
