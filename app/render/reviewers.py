"""The status comment's line while a verified PR waits for a reviewer: the asker named
once, and who GitHub was asked to review it."""

from __future__ import annotations

from app.render.text import code_span, person


def waiting_note(asker: str, pr_number: int, users: list[str], teams: list[str], *,
                 refused: str | None) -> str:
    """`refused`: GitHub's words when it took none of the review request (its 422)."""
    asked = [f"@{u}" for u in users] + [f"a team ({t})" for t in teams]
    if refused is not None:
        tail = (f"GitHub refused hangar's review request, saying {code_span(refused[:300])}; "
                "ask someone with write access to review it")
    elif asked:
        tail = "review requested from " + ", ".join(asked)
    else:
        tail = ("no code owner or `land.reviewers` entry could be asked; ask someone with "
                "write access to review it")
    return f"**#{pr_number}:** {person(asker)}: verified, waiting for a reviewer; {tail}."
