"""The REST API for scripts and orchestrators: what a person does with `/hangar` on GitHub.

Every route is declared once (`calls.route`) with the scope it needs; the declaration
drives the enforcement (401 without a known token, 403 naming a missing scope), the body
and query validation (422 with the reason), the audit trail (every call that changes
something: who, what, when) and the OpenAPI description at `/api/openapi.json`.

Work asked for here goes through the same rows as a `/hangar` comment: each call that
acts records an intent the engine takes exactly as it takes a comment's, so the same
rules answer. No call approves anything; landing still needs a person's review.

One file per resource, each declaring its routes:
- `jobs.py`      jobs: list, read, ranking; start, turns, verify, pick, resolve, cancel, resume
- `runs.py`      one run, and ranking runs started by hand
- `intents.py`   what became of an ask
- `land.py`      land requests: list, read, ask, withdraw
- `usage.py`     usage per model credential
- `events.py`    the server-sent-events stream of changes
- `tokens.py`    named tokens and the audit trail (admin)
- `envs.py`      environment builds (admin)
- `openapi.py`   the description
and `calls.py` (a call: its route, checks and shared helpers), `views.py` (what the
answers show of hangar's rows).
"""

from app.web.api import envs, events, intents, jobs, land, openapi, runs, tokens, usage
from app.web.api.calls import ROUTES, WaitQuery, caller, ok, setup
from app.web.api.jobs import FollowUp, JobsQuery, Pick, PrChoice, StartJob
from app.web.api.land import LandQuery
from app.web.api.openapi import describe
from app.web.api.views import usage_view

# The resources, imported for the routes they declare (in this order in the description).
RESOURCES = (jobs, runs, intents, land, usage, events, tokens, envs, openapi)

__all__ = ["RESOURCES", "ROUTES", "FollowUp", "JobsQuery", "LandQuery", "Pick", "PrChoice",
           "StartJob", "WaitQuery", "caller", "describe", "ok", "setup", "usage_view"]
