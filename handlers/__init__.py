"""One router per event family, joined into the one router the dispatcher uses.

Handlers are thin: they validate the part of the payload they need and hand the engine an
intent. They never call GitHub or a sandbox.
"""

from gidgethub.routing import Router

from handlers import (
    checks,
    comments,
    installations,
    members,
    pulls,
    repositories,
    reviews,
    statuses,
)

router = Router(
    comments.router,
    reviews.router,
    pulls.router,
    checks.router,
    statuses.router,
    installations.router,
    members.router,
    repositories.router,
)
