"""hangar's reply in a review thread: what the turn asked there changed — its commits and
files as GitHub compares them, its verification — with the agent's words only in the
labelled block; or how the turn ended when it made no commits (render.endings' words).
"""

from __future__ import annotations

from app import render
from app.models import Run
from app.render.text import code_span, person, short

COMMITS_SHOWN = 10
FILES_SHOWN = 20


def thread_reply(run: Run, turn: dict | None) -> str:
    """`turn`: GitHub's compare of where the turn began and the head it left (None: the
    turn moved nothing)."""
    asked = f" asked by {person(run.requested_by)}" if run.requested_by else ""
    lines = [f"**hangar** · turn {run.turn}{asked}"]
    commits = (turn or {}).get("commits") or []
    if not commits:
        cause = render.ending_cause(run) or "the turn ended before its work reached GitHub"
        # Not "made no commits": a held push, or hangar's own failure, may keep some.
        lines += ["", f"➖ Nothing of this turn reached the pull request: {cause}."]
        step = render.ending_next(run)
        if step:
            lines.append(f"Next: {step}")
        return "\n".join(lines)
    head = short(run.head_sha or "")
    lines += ["", f"Pushed {len(commits)} commit(s) to {code_span(run.branch)} (head `{head}`):"]
    for commit in commits[:COMMITS_SHOWN]:
        subject = ((commit.get("message") or "").splitlines() or [""])[0]
        lines.append(f"- `{short(commit['sha'])}` {code_span(subject)}")
    if len(commits) > COMMITS_SHOWN:
        lines.append(f"- … and {len(commits) - COMMITS_SHOWN} more")
    files = (turn or {}).get("files") or []
    if files:
        lines += ["", "Files:"]
        for f in files[:FILES_SHOWN]:
            lines.append(f"- {code_span(f['filename'])} +{f.get('additions', 0)} "
                         f"−{f.get('deletions', 0)}")
        if len(files) > FILES_SHOWN:
            lines.append(f"- … and {len(files) - FILES_SHOWN} more")
    lines += ["", f"Verification: {render.verification_line(run.verification)}"]
    says = render.agent_says((run.agent or {}).get("summary"))
    if says:
        lines += ["", says]
    return "\n".join(lines)
