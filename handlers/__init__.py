"""One gidgethub router per concern, joined into the one router the dispatcher uses.

What a concern hears is what its router says: `handlers/landing.py` lists every event
landing reacts to, `handlers/autofix.py` auto-fix's, and so on. Handlers are thin: each
takes the payload parts intake validated, hands them to its concern's intake as plain
data, and wakes the engine. They never call GitHub or a sandbox.

One handler's failure never hides another's (Prow's errorOnPanic): every handler of a
delivery runs, each failure is logged and counted, and the delivery is marked failed
after all have run.
"""

from __future__ import annotations

import logging
from typing import Any

from gidgethub import routing, sansio

from handlers import access, autofix, commands, fanout, landing, repositories, runs

log = logging.getLogger(__name__)


class HandlersFailed(Exception):
    """Every handler of a delivery ran, and these raised: (handler, exception) each."""

    def __init__(self, failures: list[tuple[str, Exception]]):
        super().__init__("; ".join(f"{name}: {exc!r}"[:2000] for name, exc in failures))
        self.failures = failures


def handler_name(callback: Any) -> str:
    """The router's module and the handler's name: `landing.new_review`."""
    module = getattr(callback, "__module__", "") or ""
    return f"{module.rpartition('.')[2]}.{callback.__name__}"


class Handlers(routing.Router):
    """Routers joined; `dispatch` runs every handler of an event, whatever one raises."""

    async def dispatch(self, event: sansio.Event, *args: Any, metrics: Any = None,
                       **kwargs: Any) -> None:
        failures: list[tuple[str, Exception]] = []
        for callback in self.fetch(event):
            try:
                await callback(event, *args, **kwargs)
            except Exception as exc:
                name = handler_name(callback)
                if metrics is not None:
                    metrics.handler_errors.inc(handler=name)
                log.exception("handler %s failed", name,
                              extra={"delivery_id": event.delivery_id, "event": event.event})
                failures.append((name, exc))
        if failures:
            raise HandlersFailed(failures) from failures[0][1]


router = Handlers(
    commands.router,
    runs.router,
    landing.router,
    autofix.router,
    fanout.router,
    access.router,
    repositories.router,
)
