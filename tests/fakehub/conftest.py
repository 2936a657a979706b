"""Fixtures for fakehub's own tests: a webhook receiver and a small world on fakehub."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fakehub_helpers import Receiver, World, build_world, serving_receiver

from fakehub.driver import Driver

__all__ = ["Receiver", "World"]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with serving_receiver() as got:
        yield got


@pytest.fixture
def world(fakehub: Driver, receiver: Receiver) -> World:
    return build_world(fakehub, receiver)
