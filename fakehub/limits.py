"""GitHub's REST rate limits, per caller: fakehub answers as GitHub does when one is hit."""

from __future__ import annotations

import time
from collections import defaultdict

from aiohttp import web

from fakehub.faults import PRIMARY_RATE_LIMIT, SECONDARY_RATE_LIMIT

RATE_LIMIT = 5000
WRITES = ("POST", "PATCH", "PUT", "DELETE")


class RateCounter:
    """GitHub's limits per caller (an installation, a user, the App): the primary limit
    per hour with x-ratelimit-* headers, and the secondary limits on content-creating
    requests (per minute and per hour). A 304 costs nothing."""

    def __init__(self, limit: int = RATE_LIMIT, writes_per_minute: int = 80,
                 writes_per_hour: int = 500) -> None:
        self.limit = limit
        self.writes_per_minute = writes_per_minute
        self.writes_per_hour = writes_per_hour
        self.window_start = int(time.time())
        self.used: dict[str, int] = defaultdict(int)
        self.writes: dict[str, list[float]] = defaultdict(list)

    def _roll(self) -> None:
        current = int(time.time())
        if current - self.window_start >= 3600:
            self.window_start, self.used = current, defaultdict(int)

    def headers(self, caller: str) -> dict[str, str]:
        used = self.used[caller]
        return {
            "x-ratelimit-limit": str(self.limit),
            "x-ratelimit-remaining": str(max(0, self.limit - used)),
            "x-ratelimit-used": str(used),
            "x-ratelimit-reset": str(self.window_start + 3600),
            "x-ratelimit-resource": "core",
        }

    def refusal(self, caller: str, method: str) -> web.Response | None:
        """GitHub's answer when this call is over a limit (None: it may go)."""
        self._roll()
        if self.used[caller] >= self.limit:
            return _refusal(PRIMARY_RATE_LIMIT, self.headers(caller))
        if method in WRITES:
            now = time.time()
            recent = [t for t in self.writes[caller] if now - t < 3600]
            self.writes[caller] = recent
            last_minute = [t for t in recent if now - t < 60]
            if len(last_minute) >= self.writes_per_minute or len(recent) >= self.writes_per_hour:
                oldest = last_minute[0] if len(last_minute) >= self.writes_per_minute else recent[0]
                wait = int((oldest + (60 if oldest in last_minute else 3600)) - now) + 1
                return _refusal(SECONDARY_RATE_LIMIT,
                                {**self.headers(caller), "retry-after": str(max(1, wait))})
        return None

    def charge(self, caller: str, method: str) -> dict[str, str]:
        self.used[caller] += 1
        if method in WRITES:
            self.writes[caller].append(time.time())
        return self.headers(caller)


def _refusal(message: str, headers: dict[str, str]) -> web.Response:
    body = {"message": message,
            "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api",
            "status": "403"}
    return web.json_response(body, status=403, headers=headers)
