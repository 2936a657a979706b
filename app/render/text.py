"""The markup-safe pieces every sentence is built with: data in code spans and fenced
blocks nothing breaks out of, and bodies held to GitHub's size limits. Each piece masks
secrets (app.redact) before it escapes or cuts anything: a secret changed by escaping,
or cut in two, would no longer be found."""

from __future__ import annotations

import re
import time
from typing import Any

from app.models import API_ASKER
from app.redact import redact

STATUS_MARKER = "<!-- hangar:status {job} -->"
PR_MARKER = "<!-- hangar:pr {job} {branch} -->"
REPLY_MARKER = "<!-- hangar:reply {key} -->"
# A reply to a command in a review thread (a refusal, a usage): hangar's words in the
# thread, so a turn's prompt leaves it out as it leaves out hangar's other thread replies.
THREAD_REPLY_MARKER = "<!-- hangar:thread {root} reply {key} -->"
MAX_AGENT_TEXT = 4000


# GitHub's limits: it answers 422 past them, and the comment, PR or check run is lost.
BODY_LIMIT_CHARS = 65_536  # an issue, comment or pull request body
OUTPUT_LIMIT_BYTES = 65_535  # a check run's output.summary or output.text
_FENCE = re.compile(r"^(`{3,})", re.MULTILINE)


def fit_body(text: str, see: str = "the pull request and its check runs") -> str:
    """A comment or PR body within GitHub's limit: its start, closed, then a cut line."""
    return _fit(text, len, BODY_LIMIT_CHARS, "65,536 characters", see)


def fit_output(text: str, see: str = "the pull request and hangar's status comment") -> str:
    """A check run's summary or text within GitHub's limit (bytes of UTF-8)."""
    return _fit(text, lambda t: len(t.encode()), OUTPUT_LIMIT_BYTES, "65,535 bytes", see)


def _fit(text: str, size: Any, limit: int, what: str, see: str) -> str:
    text = redact(text)
    if size(text) <= limit:
        return text
    note = f"… (cut: GitHub takes at most {what} here; see {see})"
    room = limit - size(note) - 2 * 64 - 4  # the note, a fence and a tag to close, newlines
    kept = text[:room] if size is len else text.encode()[:room].decode(errors="ignore")
    return f"{kept}{_closers(kept)}\n\n{note}"


def _closers(kept: str) -> str:
    """What closes a code block or <details> left open where text was cut."""
    closing = ""
    open_fence: str | None = None
    for match in _FENCE.finditer(kept):
        fence = match.group(1)
        if open_fence is None:
            open_fence = fence
        elif fence == open_fence:
            open_fence = None
    if open_fence:
        closing += f"\n{open_fence}"
    if kept.count("<details>") > kept.count("</details>"):
        closing += "\n</details>"
    return closing


def status_marker(job_id: str) -> str:
    return STATUS_MARKER.format(job=job_id)


def reply_marker(key: str) -> str:
    return REPLY_MARKER.format(key=key)


def thread_reply_marker(root: int, key: str) -> str:
    return THREAD_REPLY_MARKER.format(root=root, key=key)


def fenced(text: str, lang: str = "") -> str:
    """A code block no content can break out of."""
    text = inert(redact(text))
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{lang}\n{text}\n{fence}"


# Bidirectional controls and invisible characters: shown as `<U+202E>`, never passed on.
_INVISIBLE = re.compile(
    "[\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\u206a-\u206f\ufeff"
    "\u00ad\u180e\ufff9-\ufffb]")


def visible(text: str) -> str:
    """Bidi and zero-width characters written out, so nobody reads text reordered or
    hidden."""
    return _INVISIBLE.sub(lambda m: f"<U+{ord(m.group()):04X}>", text)


# GitHub turns `#3`, `GH-3` and `owner/repo#3` into references, and a closing keyword
# before one closes the issue on merge, even inside code: the number sign is swapped for
# a look-alike that refers to nothing.
_REFERENCE = re.compile(r"(?i)(#|gh-)(?=\d)")  # "3GH-5" too: closing keywords match it


def inert(text: str) -> str:
    """Data made safe to show inside code: visible, and referring to no issue."""
    return _REFERENCE.sub(lambda m: "\uff03" if m.group(1) == "#" else m.group(1)[:2] + "\u2011",
                          visible(text))


def code_span(text: str, *, in_table: bool = False) -> str:
    """Text from outside hangar as one inline code span: one line, no markup, visible."""
    text = inert(" ".join(redact(text).splitlines()) or " ")
    if in_table:  # a table cell ends at any unescaped pipe, even inside code
        text = text.replace("|", "\\|")
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or text.strip() == "" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def short(sha: str | None) -> str:
    return (sha or "")[:7]


def clock(at: float) -> str:
    return time.strftime("%H:%M UTC", time.gmtime(at))


def person(who: str) -> str:
    """Who asked, as a person reads it: a GitHub login as a mention, an API token that
    acts for nobody by its name — never as a mention of a GitHub user of that name."""
    if who.startswith(API_ASKER):
        return f"the API token {code_span(who[len(API_ASKER):])}"
    return f"@{who}"
