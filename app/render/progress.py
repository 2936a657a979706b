"""A running agent's progress: its latest steps (the agent's own account, so shown only
inside the labelled block, as data) and hangar's facts about the turn (outside it).

The steps come from `app.runs.progress` (`run.agent["progress"]`, or `run.agent["steps"]`
once the turn ended): dicts of `sandbox.harness.AgentStep`.
"""

from __future__ import annotations

import time

from app.models import Run
from app.render.text import clock, fenced, fit_output, short

# The steps shown (the last ones) and how long one line may be.
STEPS_SHOWN = 6
STEP_LINE_CHARS = 160


def step_line(step: dict) -> str:
    """One step in hangar's words around the agent's subject: `ran pytest -q (exit 1)`."""
    subject = str(step.get("subject") or "")
    if len(subject) > STEP_LINE_CHARS:
        subject = subject[:STEP_LINE_CHARS - 1] + "…"
    line = f"{step.get('verb', 'did')} {subject}".rstrip()
    if step.get("running"):
        return line + " (running)"
    if step.get("exit_code") not in (None, 0):
        return line + f" (exit {step['exit_code']})"
    if step.get("failed"):
        return line + " (failed)"
    return line


def steps_block(steps: list[dict]) -> str:
    """The labelled block of the agent's latest steps, or "" when it has none."""
    if not steps:
        return ""
    shown = steps[-STEPS_SHOWN:]
    return (
        "<details><summary>The agent's latest steps (unverified)</summary>\n\n"
        "_From the agent's own event stream, latest last; hangar has not checked them._\n\n"
        f"{fenced(chr(10).join(step_line(s) for s in shown), 'text')}\n</details>"
    )


def progress_facts(run: Run, now: float | None = None) -> list[str]:
    """hangar's facts about a running turn: since when, the turn, files edited so far."""
    progress = (run.agent or {}).get("progress") or {}
    facts = [f"- turn {run.turn}, working since {clock(run.started_at or time.time())}"]
    if now is not None and run.started_at:
        facts[0] += f" ({_duration(now - run.started_at)} as of {clock(now)})"
    count = progress.get("steps_seen")
    if count:
        facts.append(f"- steps read so far: {count}")
    edited = progress.get("edited") or []
    if edited:
        facts.append(f"- files edited so far: {len(edited)}"
                     + (" or more" if progress.get("edited_more") else ""))
    return facts


def agent_check_progress(run: Run, now: float) -> dict:
    """`hangar / agent` while the agent works, once hangar has read its steps."""
    progress = (run.agent or {}).get("progress") or {}
    steps = progress.get("steps") or []
    summary = "\n".join([
        f"The agent is working on `{short(run.start_sha)}` in a sandbox; this check "
        "run completes with how its turn ends.", "", *progress_facts(run, now)])
    text = steps_block(steps) or "The agent has taken no step hangar can read yet."
    see = "hangar's page of the job"
    return {"title": "The agent is working", "summary": fit_output(summary, see),
            "text": fit_output(text, see)}


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    minutes, seconds = divmod(seconds, 60)
    return f"{minutes} min {seconds} s" if minutes else f"{seconds} s"
