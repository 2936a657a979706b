"""The typed keys of what hangar's web application holds: one place, so the parts the
application mounts (API, fleet page, MCP, sandbox gate) find settings, store and engine
without importing the module that builds the application (app/wiring.py)."""

from __future__ import annotations

import aiohttp
from aiohttp import web

from app.engine import Engine
from app.github.client import AppAuth
from app.intake.deliveries import DeliveryWriter
from app.intake.dispatch import Dispatcher
from app.metrics import Metrics
from app.settings import Settings
from app.store import Store
from proxy import TokenRegistry
from proxy.egress import EgressLedger
from proxy.gateway import ModelLedger

SETTINGS = web.AppKey("settings", Settings)
STORE = web.AppKey("store", Store)
METRICS = web.AppKey("metrics", Metrics)
SESSION = web.AppKey("session", aiohttp.ClientSession)
AUTH = web.AppKey("auth", AppAuth)
DISPATCHER = web.AppKey("dispatcher", Dispatcher)
ENGINE = web.AppKey("engine", Engine)
WRITER = web.AppKey("writer", DeliveryWriter)
# What the sandbox gate's services keep: push tokens, the model and the egress ledgers.
TOKENS = web.AppKey("tokens", TokenRegistry)
MODELS = web.AppKey("models", ModelLedger)
EGRESS = web.AppKey("egress", EgressLedger)

# GitHub caps webhook payloads at 25 MB.
MAX_WEBHOOK_BYTES = 25 * 2**20 + 4096
