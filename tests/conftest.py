"""Shared fixtures. Each area keeps its own fixtures in its own conftest or plugin."""

pytest_plugins = ["fakehub.pytest_plugin"]
