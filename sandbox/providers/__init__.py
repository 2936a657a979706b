"""Sandbox providers by name: local (bubblewrap, the default), docker and kubernetes."""

from __future__ import annotations

from typing import Any

from sandbox.provider import Provider

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
