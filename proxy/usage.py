"""A model credential's usage: every rate-limit reading its vendor gives, one per window.

The gateway reads each answer's headers, and a run's end its CLI's own stream; both give
`Reading`s, and the ledger keeps the newest reading of each (credential, window) with its
source and time. What each vendor sends:

- Anthropic, an API key: `anthropic-ratelimit-{requests,tokens,input-tokens,
  output-tokens}-{limit,remaining,reset}`, the reset in RFC 3339 (windows `requests`,
  `tokens`, `input-tokens`, `output-tokens`, each a per-minute limit).
- Anthropic, a subscription: `anthropic-ratelimit-unified-{5h,7d,…}-{utilization,reset,
  status}`, utilization a fraction, the reset in epoch seconds (windows `5h`, `7d`), and
  `anthropic-ratelimit-unified-{status,reset,representative-claim}`: which window refused.
- OpenAI, an API key: `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`, the reset a
  duration such as `6m0s` (windows `requests`, `tokens`).
- OpenAI, a Codex subscription: `x-codex-{primary,secondary}-{used-percent,window-minutes,
  reset-at}` (windows named by their length: `5h`, `7d`).
- A 429's `retry-after` (window `429`): the model refused until then.
- Claude Code's stream: `rate_limit_event` (`rate_limit_info.unifiedWindows` per window,
  or one `rateLimitType`); Codex's: the usage-limit error it prints ("…try again at
  10:12 PM."), the only word `codex exec --json` gives of its limits.
"""

from __future__ import annotations

import calendar
import json
import math
import re
import time
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any, Protocol

from app.database import Connection

# The window a 429 without a named window holds: the model refused every request.
REFUSED = "429"
# The vendors' names for a subscription's windows, and the lengths Codex reports.
WINDOW_NAMES = {"five_hour": "5h", "seven_day": "7d",
                "seven_day_overage_included": "7d_oi", "seven_day_opus": "7d_opus",
                "seven_day_sonnet": "7d_sonnet"}
WINDOW_MINUTES = {300: "5h", 10080: "7d"}

@dataclass(frozen=True)
class Reading:
    """One window's use as one source saw it at one time."""

    window: str
    utilization: float  # 0..1
    reset_at: float | None  # epoch seconds; None when the source did not say
    status: str | None  # the vendor's word: allowed, allowed_warning, rejected
    source: str  # "anthropic headers", "claude stream", "429 retry-after", ...
    at: float

    @property
    def refused(self) -> bool:
        return self.status == "rejected" or self.utilization >= 1.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Resume:
    """A person's word that a credential's paused windows may start agents anyway."""

    credential: str
    at: float
    by: str
    windows: dict[str, float | None]  # the windows it lifted, each until its reset


# ---- reading headers ------------------------------------------------------------------


_ANTHROPIC, _UNIFIED, _OPENAI, _CODEX = ("anthropic-ratelimit-", "anthropic-ratelimit-unified-",
                                         "x-ratelimit-", "x-codex-")


def from_headers(headers: Any, status: int, now: float) -> list[Reading]:
    """Every window an answer's headers report, and a 429's hold. One pass sorts the
    headers by family: the gateway reads every answer's on its way."""
    anthropic: dict[str, dict[str, str]] = {}
    openai: dict[str, dict[str, str]] = {}
    unified: dict[str, str] = {}
    codex: dict[str, str] = {}
    retry_after = ""
    for key, value in headers.items():
        key = key.lower()
        if key.startswith(_ANTHROPIC):
            if key.startswith(_UNIFIED):
                unified[key[len(_UNIFIED):]] = value
            else:
                kind, _, field = key[len(_ANTHROPIC):].rpartition("-")
                anthropic.setdefault(kind, {})[field] = value
        elif key.startswith(_OPENAI):
            field, _, kind = key[len(_OPENAI):].partition("-")
            openai.setdefault(kind, {})[field] = value
        elif key.startswith(_CODEX):
            codex[key[len(_CODEX):]] = value
        elif key == "retry-after":
            retry_after = value
    readings: dict[str, Reading] = {}
    for family, read in ((anthropic, lambda: _remaining(anthropic, now, "anthropic headers")),
                         (unified, lambda: _unified(unified, now)),
                         (openai, lambda: _remaining(openai, now, "openai headers")),
                         (codex, lambda: _codex(codex, now))):
        if family:  # most answers carry one family, or none
            for reading in read():
                readings[reading.window] = reading
    if status == 429:
        seconds = reset_seconds(retry_after, now)
        readings[REFUSED] = Reading(REFUSED, 1.0, now + seconds if seconds is not None else None,
                                    "rejected", "429 retry-after", now)
    return list(readings.values())


def _remaining(kinds: dict[str, dict[str, str]], now: float, source: str) -> Iterator[Reading]:
    """An API key's limits: the share of each limit used, from limit and remaining."""
    for kind, fields in sorted(kinds.items()):
        limit, remaining = _float(fields.get("limit")), _float(fields.get("remaining"))
        if not kind or limit is None or remaining is None or limit <= 0:
            continue
        seconds = reset_seconds(fields.get("reset", ""), now)
        yield Reading(kind, _fraction(1 - remaining / limit),
                      now + seconds if seconds is not None else None, None, source, now)


def _unified(fields: dict[str, str], now: float) -> Iterator[Reading]:
    """A Claude subscription's windows (`fields` without the family's prefix); the overall
    status names the window it refused."""
    windows: dict[str, Reading] = {}
    for key, value in fields.items():
        if key.endswith("-utilization"):
            window = key.removesuffix("-utilization")
            used = _float(value)
            if used is None or window.startswith(("overage", "grace", "slow")):
                continue  # paid overage and grace are not the plan's own windows
            windows[window] = Reading(
                window, _fraction(used), _epoch(fields.get(f"{window}-reset")),
                fields.get(f"{window}-status"), "anthropic headers", now)
    if fields.get("status") == "rejected":
        claim = fields.get("representative-claim", "")
        window = WINDOW_NAMES.get(claim, claim) or REFUSED
        known = windows.get(window)
        windows[window] = Reading(
            window, 1.0, _epoch(fields.get("reset")) or (known and known.reset_at),
            "rejected", "anthropic headers", now)
    yield from windows.values()


def _codex(fields: dict[str, str], now: float) -> Iterator[Reading]:
    """A Codex plan's primary and secondary windows (`fields` without `x-codex-`)."""
    for slot in ("primary", "secondary"):
        used = _float(fields.get(f"{slot}-used-percent"))
        if used is None:
            continue
        minutes = _float(fields.get(f"{slot}-window-minutes"))
        window = (WINDOW_MINUTES.get(int(minutes), f"{int(minutes)}m") if minutes else slot)
        reset = _epoch(fields.get(f"{slot}-reset-at"))
        if reset is None:
            seconds = _float(fields.get(f"{slot}-reset-after-seconds"))
            reset = now + seconds if seconds is not None else None
        yield Reading(window, _fraction(used / 100), reset, None, "codex headers", now)


# ---- reading the CLIs' streams --------------------------------------------------------


def from_claude_event(info: Any, at: float) -> list[Reading]:
    """Claude Code's `rate_limit_event.rate_limit_info`: each window it names."""
    if not isinstance(info, dict):
        return []
    readings: dict[str, Reading] = {}
    windows = info.get("unifiedWindows")
    for name, window in (windows.items() if isinstance(windows, dict) else ()):
        used = _float(window.get("utilization")) if isinstance(window, dict) else None
        if used is None:
            continue
        key = WINDOW_NAMES.get(name, name)
        status = window.get("status") if isinstance(window.get("status"), str) else None
        readings[key] = Reading(key, _fraction(used), _epoch(window.get("resetsAt")), status,
                                "claude stream", at)
    kind = info.get("rateLimitType")
    status = info.get("status") if isinstance(info.get("status"), str) else None
    used = _float(info.get("utilization"))
    if isinstance(kind, str) and kind and (used is not None or status == "rejected"):
        key = WINDOW_NAMES.get(kind, kind)
        known = readings.get(key)
        readings[key] = Reading(
            key, 1.0 if status == "rejected" else _fraction(used),
            _epoch(info.get("resetsAt")) or (known and known.reset_at),
            status if status == "rejected" or known is None else known.status,
            "claude stream", at)
    return list(readings.values())


_TRY_AGAIN = re.compile(r"usage limit.*?try again at (?P<when>[^.]*?\d{1,2}:\d{2}\s*[AP]M)",
                        re.IGNORECASE | re.DOTALL)


def from_codex_message(message: str, at: float) -> list[Reading]:
    """Codex's usage-limit error ("You've hit your usage limit. … try again at 10:12 PM."):
    the plan's limit is used up until then. The time is the sandbox's clock, UTC."""
    found = _TRY_AGAIN.search(message)
    if found is None:
        return []
    return [Reading(REFUSED, 1.0, _clock_time(found.group("when"), at), "rejected",
                    "codex stream", at)]


def _clock_time(text: str, after: float) -> float | None:
    """'10:12 PM' (the next such time after `after`) or 'Jan 5th, 2026 10:12 PM', UTC."""
    text = re.sub(r"(\d)(st|nd|rd|th)\b", r"\1", " ".join(text.split()))
    for pattern in ("%b %d, %Y %I:%M %p", "%B %d, %Y %I:%M %p", "%Y-%m-%d %I:%M %p"):
        try:
            return calendar.timegm(time.strptime(text, pattern))
        except ValueError:
            continue
    try:
        clock = datetime.strptime(text, "%I:%M %p")
    except ValueError:
        return None
    base = datetime.fromtimestamp(after, UTC)
    when = base.replace(hour=clock.hour, minute=clock.minute, second=0, microsecond=0)
    if when.timestamp() < after - 60:
        when += timedelta(days=1)
    return when.timestamp()


# ---- values ----------------------------------------------------------------------------

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")


def reset_seconds(value: str, now: float) -> float | None:
    """Seconds until a reset given as RFC 3339 (Anthropic), '6m0s'/'20ms' (OpenAI), a
    number of seconds (retry-after) or an HTTP date (retry-after)."""
    value = value.strip()
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    if value[0].isdigit() and "-" in value:
        try:
            return max(0.0, datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
                       - now)
        except ValueError:
            return None
    parts = _DURATION.findall(value)
    if parts and "".join(n + u for n, u in parts) == value:
        scale = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
        return sum(float(n) * scale[u] for n, u in parts)
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - now)
    except (TypeError, ValueError):
        return None


def _float(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _epoch(value: Any) -> float | None:
    """Epoch seconds (a number, or its text); milliseconds are recognised by their size."""
    number = _float(value)
    if number is None or number <= 0:
        return None
    return number / 1000 if number > 1e11 else number


def _fraction(value: float | None) -> float:
    return max(0.0, min(1.0, value or 0.0))


# ---- the ledger --------------------------------------------------------------------------


class _Connects(Protocol):
    def _connect(self) -> AbstractContextManager[Connection]: ...


class UsageLedger:
    """The newest reading of each credential's windows, and people's resumes: in the
    gate's tables (mixed into the model ledger, whose file and connections it uses)."""

    def record_readings(self: _Connects, credential: str, readings: Iterable[Reading]) -> None:
        with self._connect() as db:
            UsageLedger._write(db, credential, readings)

    @staticmethod
    def _write(db: Connection, credential: str, readings: Iterable[Reading]) -> None:
        """An older reading never replaces a newer one (a run's stream is read after its
        end; the gateway's reading of the same answer may be newer)."""
        db.executemany(
            "INSERT INTO model_windows (credential, \"window\", utilization, reset_at, status,"
            " source, at) VALUES (?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT(credential, \"window\") DO UPDATE SET utilization = excluded.utilization,"
            " reset_at = excluded.reset_at, status = excluded.status, source = excluded.source,"
            " at = excluded.at WHERE excluded.at >= model_windows.at",
            [(credential, r.window, r.utilization, r.reset_at, r.status, r.source, r.at)
             for r in readings])

    @staticmethod
    def _accepted(db: Connection, credential: str, at: float) -> None:
        """The model took a request at `at`: a refusal read before then is over."""
        db.execute("DELETE FROM model_windows WHERE credential = ? AND \"window\" = ? AND at < ?",
                   (credential, REFUSED, at))

    def readings(self: _Connects, credential: str) -> list[Reading]:
        with self._connect() as db:
            rows = db.execute(
                "SELECT \"window\", utilization, reset_at, status, source, at FROM model_windows"
                " WHERE credential = ? ORDER BY \"window\"", (credential,)).fetchall()
        return [Reading(*row) for row in rows]

    def all_readings(self: _Connects) -> dict[str, list[Reading]]:
        with self._connect() as db:
            rows = db.execute(
                "SELECT credential, \"window\", utilization, reset_at, status, source, at"
                " FROM model_windows ORDER BY credential, \"window\"").fetchall()
        out: dict[str, list[Reading]] = {}
        for credential, *rest in rows:
            out.setdefault(credential, []).append(Reading(*rest))
        return out

    def resume(self: _Connects, credential: str, *, by: str,
               windows: dict[str, float | None]) -> Resume:
        """A person lets the credential's paused windows start agents until their resets."""
        record = Resume(credential, time.time(), by, dict(windows))
        with self._connect() as db:
            db.execute("INSERT INTO model_resumes (credential, at, by, windows)"
                       " VALUES (?, ?, ?, ?) ON CONFLICT (credential) DO UPDATE SET"
                       " at = excluded.at, by = excluded.by, windows = excluded.windows",
                       (credential, record.at, by, json.dumps(record.windows)))
        return record

    def resumed(self: _Connects, credential: str) -> Resume | None:
        with self._connect() as db:
            row = db.execute("SELECT credential, at, by, windows FROM model_resumes"
                             " WHERE credential = ?", (credential,)).fetchone()
        return Resume(row[0], row[1], row[2], json.loads(row[3])) if row else None
