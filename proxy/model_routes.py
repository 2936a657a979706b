"""What the model gateway relays: the calls the agent CLIs make, and nothing else. Pure.

The gateway adds hangar's real model key to what it relays, so every other route of a
vendor's API (batches and files that outlive the run, admin endpoints, another base path
of a company proxy) would be reachable with that key. A request is relayed only when its
method and path are on its upstream's list; the path hangar sends upstream is the list's
own spelling of it, appended to the configured base URL, so nothing a sandbox writes can
leave that base. Anything else is refused with the reason.

The sandbox's path is read raw (before any server decodes it) and percent-decoded until
it no longer changes, so `%2e%2e`, `..%2f` and doubled encodings (`%252e`) are seen for
what they are; a `..` or `.` segment, an empty segment, a backslash or a control
character refuses the request outright, never "normalizes" into an allowed one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote

# Per upstream kind: (method, path pattern) the agent CLIs use. `{id}` is one segment of
# a model's name. Claude Code: messages (`?beta=true` too), token counting, model listing.
# Codex (the Responses API): responses and model listing.
ALLOWED: dict[str, tuple[tuple[str, str], ...]] = {
    "anthropic": (("POST", "v1/messages"), ("POST", "v1/messages/count_tokens"),
                  ("GET", "v1/models"), ("GET", "v1/models/{id}")),
    "openai": (("POST", "v1/responses"), ("GET", "v1/models"), ("GET", "v1/models/{id}")),
}
_MODEL_ID = r"[A-Za-z0-9][A-Za-z0-9._:@\-]{0,127}"
_COMPILED = {kind: [(method, re.compile(re.escape(path).replace(r"\{id\}", _MODEL_ID)))
                    for method, path in routes] for kind, routes in ALLOWED.items()}
# More rounds of percent-decoding than this is no client's doing.
MAX_DECODES = 4


@dataclass(frozen=True)
class Relay:
    """Relay to `path` (the allowlist's own spelling, no leading slash) under the base."""

    path: str


@dataclass(frozen=True)
class Refuse:
    """Refuse with 403; `reason` says why, for the agent to print."""

    reason: str


def decide(kind: str, method: str, raw_tail: str) -> Relay | Refuse:
    """Whether the sandbox's request `method /model/<id>/<raw_tail>` is relayed.

    `raw_tail` is the path after `/model/<sandbox id>/` exactly as sent (no query)."""
    path = raw_tail
    for _ in range(MAX_DECODES + 1):
        decoded = unquote(path)
        if decoded == path:
            break
        path = decoded
    else:
        return Refuse("the path is percent-encoded over and over; hangar relays only plain "
                      "API paths")
    if any(ord(c) < 0x20 or c in "\\\x7f" for c in path):
        return Refuse("the path holds a backslash or a control character")
    segments = path.split("/")
    if any(segment in ("", ".", "..") for segment in segments):
        return Refuse("the path has an empty, `.` or `..` segment; hangar relays only the "
                      "model API's own paths, under the configured base")
    allowed = ALLOWED.get(kind, ())
    for allowed_method, pattern in _COMPILED.get(kind, ()):
        if pattern.fullmatch(path):
            if method.upper() != allowed_method:
                return Refuse(f"hangar relays /{path} of the {kind} API for "
                              f"{allowed_method} only, not {method.upper()}")
            return Relay(path)
    listed = ", ".join(f"{m} /{p}" for m, p in allowed) or "nothing"
    return Refuse(f"hangar relays to the {kind} API only what the agent CLIs use ({listed}); "
                  f"{method.upper()} /{path[:200]} is not among them")
