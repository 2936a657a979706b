"""A review comment's `diff_hunk`, as GitHub computes it: the hunk of the pull request's
diff that holds the commented line, from its `@@` header down to and including that line
(GitHub's webhook examples: `"@@ -1 +1 @@\\n-# Hello-World"` for a comment at position 1)."""

from __future__ import annotations

import re

HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@")


def hunk_up_to(patch: str, line: int, side: str = "RIGHT") -> str:
    """The hunk of a file's patch up to `line` of the new file (RIGHT) or the old one
    (LEFT); empty when the line is not in the diff."""
    header: str | None = None
    taken: list[str] = []
    old = new = 0
    for text in patch.split("\n"):
        found = HUNK_HEADER.match(text)
        if found:
            header, taken = text, []
            old, new = int(found[1]), int(found[2])
            continue
        if header is None or text.startswith("\\"):  # "\ No newline at end of file"
            continue
        taken.append(text)
        mark = text[:1]
        if mark in (" ", "-") and side == "LEFT" and old == line:
            return "\n".join([header, *taken])
        if mark in (" ", "+") and side != "LEFT" and new == line:
            return "\n".join([header, *taken])
        old += mark in (" ", "-")
        new += mark in (" ", "+")
    return ""
