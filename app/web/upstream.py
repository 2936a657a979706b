"""hangar's side of the push proxy: where git lives and the installation token for it."""

from __future__ import annotations

import os

from aiohttp import web
from cachetools import TTLCache
from gidgethub import BadRequest

from app.redact import remember, remember_url
from app.web.keys import AUTH, EGRESS, MODELS, SETTINGS, TOKENS
from proxy import Grant, TokenRegistry
from proxy.egress import EgressLedger
from proxy.gateway import Endpoint, ModelLedger

# A push needs `contents`, and `workflows` for a change under .github/workflows/ (which
# stays a sensitive path an approver must acknowledge); an installation that has not
# granted `workflows` gets a contents-only token.
PUSH_PERMISSIONS = {"contents": "write", "workflows": "write"}
CONTENTS_ONLY = {"contents": "write"}
# How long an installation's refusal of `workflows` is believed before it is asked again
# (an owner may accept the App's new permissions at any time).
WORKFLOWS_REFUSED_S = 600.0
VENDOR_APIS = {"openai": ("https://api.openai.com", "bearer"),
               "anthropic": ("https://api.anthropic.com", "x-api-key")}


class InstallationUpstream:
    """Answers the proxy with GitHub's git address and a fresh installation token."""

    def __init__(self, app: web.Application):
        self.app = app
        # (installation, repository) whose installation refused `workflows`: every git
        # request of every sandbox asks for credentials, and GitHub's 422 is not cached.
        self._no_workflows: TTLCache[tuple[int, str], bool] = TTLCache(
            maxsize=4096, ttl=WORKFLOWS_REFUSED_S)

    async def credentials(self, grant: Grant) -> tuple[str, str]:
        if grant.installation_id is None:
            raise PermissionError("this sandbox's grant names no installation")
        # A token that leaks from the push path can do nothing but write this one
        # repository's contents (and its workflow files).
        auth = self.app[AUTH]
        key = (grant.installation_id, grant.repo)
        token = None
        if key not in self._no_workflows:
            try:
                token = await auth.installation_token(
                    grant.installation_id, repository=grant.repo, permissions=PUSH_PERMISSIONS)
            except BadRequest as exc:
                if exc.status_code != 422:
                    raise
                self._no_workflows[key] = True
        if token is None:
            token = await auth.installation_token(
                grant.installation_id, repository=grant.repo, permissions=CONTENTS_ONLY)
        return self.app[SETTINGS].git_base_url, token.token


class CredentialEndpoints:
    """A credential's secret from hangar's own environment and its endpoint from settings."""

    def __init__(self, app: web.Application):
        self.app = app

    def endpoint(self, credential: str) -> Endpoint | None:
        secret = os.environ.get(credential)
        if not secret:
            return None
        configured = self.app[SETTINGS].model_endpoints.get(credential, {})
        kind = configured.get("kind") or ("openai" if "OPENAI" in credential else "anthropic")
        base_url, auth = VENDOR_APIS[kind if kind in VENDOR_APIS else "anthropic"]
        if "OAUTH" in credential:
            auth = "bearer"  # a subscription token, not an API key
        endpoint = Endpoint(configured.get("base_url", base_url), secret,
                            configured.get("auth", auth), kind)
        # Read afresh each time: a key set after hangar started is masked from then on.
        remember(secret)
        remember_url(endpoint.base_url)
        return endpoint


def mount_sandbox_state(app: web.Application) -> None:
    """What the sandbox gate's services keep on the main application: the push tokens,
    the model ledger and the egress ledger. Their routes are the gate's alone
    (app/sandbox_gate.py); the main listener serves no `/git/`."""
    settings = app[SETTINGS]
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    app[TOKENS] = TokenRegistry(settings.database)
    app[MODELS] = ModelLedger(settings.database)
    app[EGRESS] = EgressLedger(settings.database)
    app.on_cleanup.append(_close_sandbox_state)  # after the engine and the store stop


async def _close_sandbox_state(app: web.Application) -> None:
    for key in (TOKENS, MODELS, EGRESS):
        app[key].close()
