"""`hangar serve` takes what it built to start out of the collector's walk: a full
collection over hangar's ~100,000 startup objects paused every webhook in flight for
~100 ms, and cost more CPU per delivery than parsing it."""

from __future__ import annotations

import asyncio
import gc

import app.wiring  # noqa: F401  (what serve imports before it starts)
from app.cli import _freeze_startup_objects


def test_a_full_collection_after_startup_walks_only_what_came_since():
    gc.unfreeze()
    before = len(gc.get_objects())
    try:
        asyncio.run(_freeze_startup_objects(None))
        walked = len(gc.get_objects())
        assert gc.get_freeze_count() >= before // 2
        assert walked < before // 10, (walked, before)
    finally:
        gc.unfreeze()
