"""What fan-out hears: CI finishing on a head, which a ranking waiting for CI (grading)
looks at again."""

from gidgethub import routing

from app import fanout
from handlers.ci import listen_for_ci

router = routing.Router()
listen_for_ci(router, fanout.on_ci, concern="fanout")
