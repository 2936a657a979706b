"""Injected faults: make chosen REST calls fail the ways GitHub fails."""

from __future__ import annotations

import asyncio
import random
import re
import time
from dataclasses import dataclass, field

from aiohttp import web

SECONDARY_RATE_LIMIT = (
    "You have exceeded a secondary rate limit. Please wait a few minutes before you try "
    "again. If you reach out to GitHub Support for help, please include the request ID."
)
PRIMARY_RATE_LIMIT = "API rate limit exceeded for installation."


@dataclass
class Fault:
    method: str
    path_regex: str
    status: int = 502
    times: int | None = 1  # None: until removed
    rate: float | None = None  # fail this fraction of matching calls instead of every one
    retry_after: int | None = None
    hang_seconds: float | None = None
    secondary_rate_limit: bool = False
    primary_rate_limit: bool = False
    after: bool = False  # do what was asked, then answer with the failure (a lost answer)
    message: str | None = None  # the JSON answer's message, e.g. GitHub's words for a 405
    fired: int = 0
    _pattern: re.Pattern = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._pattern = re.compile(self.path_regex)

    def matches(self, method: str, path: str) -> bool:
        if self.method not in ("*", method.upper()):
            return False
        if self.times is not None and self.fired >= self.times:
            return False
        if not self._pattern.search(path):
            return False
        return self.rate is None or random.random() < self.rate


class Faults:
    """The active faults; REST paths are matched under /api/v3, git paths whole."""

    def __init__(self) -> None:
        self.active: list[Fault] = []

    def add(self, fault: Fault) -> Fault:
        self.active.append(fault)
        return fault

    def clear(self) -> None:
        self.active.clear()

    def pick(self, method: str, path: str) -> Fault | None:
        for fault in self.active:
            if fault.matches(method, path):
                fault.fired += 1
                return fault
        return None


# The requests hanging on a fault now, by the loop of the fakehub serving them: a stopping
# fakehub ends its own rather than waiting out their hang (their clients gave up on them
# long ago). Each fakehub's thread touches only its own loop's set.
hanging: dict[asyncio.AbstractEventLoop, set[asyncio.Task]] = {}


async def answer(fault: Fault) -> web.Response:
    """The failure response for a fault that fired."""
    if fault.hang_seconds:
        task = asyncio.current_task()
        assert task is not None  # a request's handler runs as a task
        mine = hanging.setdefault(asyncio.get_running_loop(), set())
        mine.add(task)
        try:
            await asyncio.sleep(fault.hang_seconds)
        finally:
            mine.discard(task)
    headers: dict[str, str] = {}
    if fault.retry_after is not None:
        headers["Retry-After"] = str(fault.retry_after)
    if fault.secondary_rate_limit:
        status = fault.status if fault.status in (403, 429) else 403
        body = {"message": SECONDARY_RATE_LIMIT,
                "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"}
        return web.json_response(body, status=status, headers=headers)
    if fault.primary_rate_limit:
        status = fault.status if fault.status in (403, 429) else 403
        reset = int(time.time()) + (fault.retry_after or 60)
        headers.update({
            "x-ratelimit-limit": "5000",
            "x-ratelimit-remaining": "0",
            "x-ratelimit-used": "5000",
            "x-ratelimit-reset": str(reset),
            "x-ratelimit-resource": "core",
        })
        body = {"message": PRIMARY_RATE_LIMIT,
                "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"}
        return web.json_response(body, status=status, headers=headers)
    if fault.status == 502 and fault.message is None:
        return web.Response(status=502, text="Bad Gateway", headers=headers)
    default = "Server Error" if fault.status >= 500 else "Injected failure"
    return web.json_response(
        {"message": fault.message or default,
         "documentation_url": "https://docs.github.com/rest", "status": str(fault.status)},
        status=fault.status,
        headers=headers,
    )


FAULTS_KEY = web.AppKey("faults", Faults)
