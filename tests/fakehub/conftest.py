"""Fixtures for fakehub's own tests: a webhook receiver and a small world on fakehub."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fakehub_helpers import Receiver, World, build_world, serving_receiver

from fakehub.driver import Driver
from tests.github_reference import REFERENCE, WEBHOOK_SCHEMAS

EXAMPLES = REFERENCE / "webhooks-examples" / "api.github.com" / "index.json"

__all__ = ["Receiver", "World"]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with serving_receiver() as got:
        yield got


@pytest.fixture
def world(fakehub: Driver, receiver: Receiver) -> World:
    return build_world(fakehub, receiver)


@pytest.fixture(scope="session")
def github_webhooks() -> tuple[dict[tuple[str, str], list[set[str]]], dict[str, Any]]:
    """The top-level keys of each of GitHub's examples, by (event, action); the schemas."""
    if not EXAMPLES.exists() or not WEBHOOK_SCHEMAS.exists():
        pytest.skip("the @octokit reference packages are not installed (tests/reference)")
    keys: dict[tuple[str, str], list[set[str]]] = {}
    for event in json.loads(EXAMPLES.read_text()):
        for example in event["examples"]:
            keys.setdefault((event["name"], example.get("action")), []).append(set(example))
    return keys, json.loads(WEBHOOK_SCHEMAS.read_text())["definitions"]
