"""Files attached to issues and comments, served where GitHub serves them on the web host:
`/user-attachments/assets/{uuid}`. Uploading is a browser action on GitHub (no REST
route); here the driver attaches a file (`Driver.attach`). A file in a private
repository is served only to a caller who may read that repository, a 404 otherwise."""

from __future__ import annotations

import uuid

from aiohttp import web

from fakehub import auth
from fakehub.rest.common import ApiError, error_body, hub, identity
from fakehub.state import Attachment, Repo

web_routes = web.RouteTableDef()


def attach(store, repo: Repo, data: bytes, content_type: str) -> Attachment:
    attachment = Attachment(id=str(uuid.uuid4()), repo_id=repo.id, data=data,
                            content_type=content_type)
    store.attachments[attachment.id] = attachment
    return attachment


@web_routes.get("/user-attachments/assets/{asset_id}")
async def get_attachment(request: web.Request) -> web.Response:
    store = hub(request).store
    attachment = store.attachments.get(request.match_info["asset_id"])
    repo = store.repo_by_id(attachment.repo_id) if attachment else None
    try:
        ident = identity(request)
    except ApiError:
        ident = None
    if attachment is None or repo is None or not auth.can_read(store, ident, repo):
        return web.json_response(error_body(404, "Not Found"), status=404)
    return web.Response(body=attachment.data, content_type=attachment.content_type)
