"""The sandbox gate: the only part of hangar a sandbox can reach.

hangar's main listener serves people and GitHub (`/webhook`, `/api`, `/metrics`,
`/healthz`); no sandbox reaches it. Sandboxes reach a second aiohttp application, served
on a unix socket of its own (`<data dir>/sandbox-gate/proxy.sock`), which the local and
docker providers bind into each sandbox and relay to from 127.0.0.1:<port> inside it,
and, with `sandbox_port` set, on host:sandbox_port for sandboxes that reach hangar over
a network (kubernetes).

Every route a sandbox may use is registered in `sandbox_routes`, and nowhere else: the
push proxy (`/git/`), the model gateway (`/model/`) and the egress proxy (requests in
proxy form: `CONNECT host:port`, `GET http://host/...`; docs/egress.md).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web

from app.datadir import gate_dir
from app.web.keys import EGRESS, MAX_WEBHOOK_BYTES, MODELS, SESSION, SETTINGS, TOKENS
from app.web.upstream import CredentialEndpoints, InstallationUpstream
from proxy import setup_proxy
from proxy.egress import setup_egress
from proxy.gateway import setup_gateway
from sandbox.providers._relay import bind_unix_socket


def sandbox_routes(gate: web.Application, hangar: web.Application) -> None:
    """Mount every sandbox-facing route on `gate`. `hangar` is the main application, for
    shared state (the HTTP session, the token registry, settings). Add new sandbox
    services here, under their own prefix."""
    gate[SESSION] = hangar[SESSION]
    setup_proxy(gate, registry=hangar[TOKENS], upstream=InstallationUpstream(hangar),
                session_key=SESSION)
    setup_gateway(gate, ledger=hangar[MODELS], endpoints=CredentialEndpoints(hangar))
    # Proxy requests (CONNECT host:port, GET http://host/...) are egress, whatever path.
    setup_egress(gate, ledger=hangar[EGRESS])


async def serve_gate(app: web.Application) -> AsyncIterator[None]:
    """cleanup_ctx of the main application: the gate runs while hangar runs."""
    gate = web.Application(client_max_size=MAX_WEBHOOK_BYTES)
    sandbox_routes(gate, app)
    runner = web.AppRunner(gate, access_log=None, shutdown_timeout=2)
    await runner.setup()
    settings = app[SETTINGS]
    await web.SockSite(runner, bind_unix_socket(gate_dir(settings.data_dir))).start()
    if settings.sandbox_port:
        await web.TCPSite(runner, settings.host, settings.sandbox_port).start()
    yield
    await runner.cleanup()
