"""Secrets never reach a comment, a check run or a log tail that people see."""

from __future__ import annotations

import re
from collections.abc import Iterable

REDACTED = "[redacted]"

# Token shapes GitHub, hangar and model vendors use; matched wherever they appear.
# GitHub's prefixes: ghp_ (classic PAT), github_pat_ (fine-grained PAT), gho_ (OAuth),
# ghu_ (user-to-server), ghs_ (installation), ghr_ (refresh). Lengths vary up to 255, and
# stateless installation tokens are ghs_<app id>_<JWT>: dots, dashes and underscores.
_PATTERNS = re.compile(
    r"(gh[pousr]_[A-Za-z0-9_][A-Za-z0-9._\-]{18,}[A-Za-z0-9_]"
    r"|github_pat_[A-Za-z0-9_]{20,}"
    r"|hgs_[A-Za-z0-9_\-]{16,}"
    r"|sk-ant-[A-Za-z0-9_\-]{16,}"
    r"|sk-[A-Za-z0-9]{20,}"
    r"|AKIA[0-9A-Z]{16}"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----)"
)
_BASIC_AUTH_URL = re.compile(r"(https?://)[^/\s:@]+:[^/\s@]+@")
_BEARER = re.compile(r"(?i)(authorization:\s*(?:bearer|token|basic)\s+)\S+")


def redact(text: str, known: Iterable[str] = ()) -> str:
    """Mask known secret values and anything shaped like a token."""
    for secret in sorted({k for k in known if k and len(k) >= 8}, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    text = _PATTERNS.sub(REDACTED, text)
    text = _BASIC_AUTH_URL.sub(r"\1" + REDACTED + "@", text)
    return _BEARER.sub(r"\1" + REDACTED, text)


def tail(text: str, max_chars: int = 6000, max_lines: int = 80) -> str:
    lines = text.splitlines()[-max_lines:]
    out = "\n".join(lines)
    return out[-max_chars:]
