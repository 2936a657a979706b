"""hangar's side of the push proxy: where git lives and the installation token for it."""

from __future__ import annotations

from aiohttp import web

from proxy import Grant, TokenRegistry, setup_proxy

TOKENS = web.AppKey("tokens", TokenRegistry)


class InstallationUpstream:
    """Answers the proxy with GitHub's git address and a fresh installation token."""

    def __init__(self, app: web.Application):
        self.app = app

    async def credentials(self, grant: Grant) -> tuple[str, str]:
        from app.web import AUTH, SETTINGS

        if grant.installation_id is None:
            raise PermissionError("this sandbox's grant names no installation")
        token = await self.app[AUTH].installation_token(grant.installation_id)
        return self.app[SETTINGS].git_base_url, token.token


def mount_proxy(app: web.Application) -> None:
    from app.web import SESSION, SETTINGS

    settings = app[SETTINGS]
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    app[TOKENS] = TokenRegistry(settings.db_path)
    setup_proxy(app, registry=app[TOKENS], upstream=InstallationUpstream(app), session_key=SESSION)
