"""Operator notifications' words: a title and a line of facts per kind, and the body
each notifier format sends (hangar's JSON, or a Slack incoming webhook's `text`). Only
hangar's own facts go in: no agent text, no link the agent chose."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from app.render.text import person


def _when(at: float | None) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M UTC") if at else "unknown"


def _short(sha: str | None) -> str:
    return (sha or "")[:7] or "unknown"


TITLES = {
    "approval.requested": lambda f: f"PR #{f['pr']} is verified and waits for an approval",
    "land.conflict": lambda f: f"PR #{f['pr']} conflicts with {f['base']}",
    "land.landed": lambda f: f"PR #{f['pr']} landed on {f['base']}",
    "run.lost": lambda f: f"Run {f['run']} was lost",
    "usage.high": lambda f: f"Model credential {f['credential']} is at {f['pct']}%",
    "build.failed": lambda f: f"Environment build {f['build']} failed",
}

TEXTS = {
    "approval.requested": lambda f: (
        f"head {_short(f['head_sha'])}, asked by {person(f['asker'])}; review requested from "
        + (", ".join(f["reviewers"]) or "nobody hangar could ask")),
    "land.conflict": lambda f: (
        f"head {_short(f['head_sha'])} cannot be brought up to date with {f['base']}; "
        "a person resolves it or asks hangar for a turn"),
    "land.landed": lambda f: f"merged as {_short(f['merge_sha'])}",
    "run.lost": lambda f: (
        f"its sandbox went away without an exit code (issue #{f['issue']}"
        + (f", PR #{f['pr']}" if f.get("pr") else "") + ")"),
    "usage.high": lambda f: (
        f"window {f['window']} at {f['pct']}% (threshold {f['threshold_pct']}%), "
        f"resets {_when(f.get('reset_at'))}"),
    "build.failed": lambda f: (
        f"environment {f['environment']} on {f['provider']} ({f['reason']} build); "
        "its log is on the fleet page"),
}


def title(kind: str, facts: dict[str, Any]) -> str:
    return TITLES[kind](facts)


def text(kind: str, facts: dict[str, Any]) -> str:
    return TEXTS[kind](facts)


def body(fmt: str, delivery_id: str, note: Any) -> bytes:
    """The POST body: hangar's JSON (`format: json`) or a Slack incoming webhook's."""
    heading = title(note.kind, note.facts)
    line = text(note.kind, note.facts)
    where = f"{note.repo}: " if note.repo else ""
    if fmt == "slack":
        return json.dumps({"text": f"{where}{heading}\n{line}"}).encode()
    return json.dumps({
        "id": delivery_id, "kind": note.kind, "repo": note.repo, "title": heading,
        "text": line, "facts": note.facts, "created_at": note.created_at,
    }, sort_keys=True).encode()
