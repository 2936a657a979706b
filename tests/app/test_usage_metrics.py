"""`/metrics` carries the model's usage: a gauge per credential and window, and whether
new agents on a credential are paused."""

from __future__ import annotations

import time

from app.web.keys import MODELS
from app.wiring import create_app
from proxy.usage import Reading


async def test_metrics_show_each_credentials_windows_and_pause(aiohttp_client, settings):
    client = await aiohttp_client(create_app(settings))
    now = time.time()
    client.app[MODELS].record_readings("PLAN", [
        Reading("7d", 0.913, now + 3600, None, "anthropic headers", now),
        Reading("5h", 0.34, now + 600, None, "anthropic headers", now),
        Reading("tokens", 0.99, now - 1, None, "anthropic headers", now - 61)])  # reset
    client.app[MODELS].record_readings("OPENAI_API_KEY", [
        Reading("tokens", 0.2, now + 60, None, "openai headers", now)])
    metrics = await (await client.get("/metrics")).text()
    assert "# TYPE hangar_model_usage_ratio gauge" in metrics
    assert 'hangar_model_usage_ratio{credential="PLAN",window="7d"} 0.913' in metrics
    assert 'hangar_model_usage_ratio{credential="PLAN",window="5h"} 0.34' in metrics
    assert 'window="tokens"} 0.99' not in metrics  # its reset has passed
    assert 'hangar_model_usage_ratio{credential="OPENAI_API_KEY",window="tokens"} 0.2' in metrics
    assert 'hangar_model_paused{credential="PLAN"} 1' in metrics
    assert 'hangar_model_paused{credential="OPENAI_API_KEY"} 0' in metrics
