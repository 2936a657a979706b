"""Verification's sentences: why it did not run (or ran out of time) and what fixes it,
check run `hangar / verify` while it runs, and its buttons.

Keys are the values of the jobs-and-runs concern's codes (`app.runs.VerifyTrouble`):
runs decides, this module words. The facts may quote others' words (an exception's
text): the status comment and the check run show `error` as data.
"""

from __future__ import annotations

from app.render.reasons import Sentences, Why, word
from app.render.text import code_span, short

VERIFY_AGAIN = "**Verify again**"

# What went wrong (a Verification's `error`), by `VerifyTrouble` code.
ERRORS: Sentences = {
    "no_verify_command": lambda env: f"the environment `{env}` has no verify command",
    "sandbox_failed": lambda: "could not prepare the sandbox (hangar's log says why)",
    "install_failed": lambda: "the install step failed",
    "timed_out": lambda minutes: f"timed out after {minutes:g} minutes",
    "restore_failed": lambda: (
        "could not restore verify.restore_paths from the base (its output is below)"),
}

# What a person does about it (a Verification's `fix`), by the same code.
FIXES: Sentences = {
    "no_verify_command": lambda env: (
        f"add `verify: {{command: ...}}` to the environment `{env}`, then press {VERIFY_AGAIN} "
        "(or comment `/hangar verify`)"),
    "sandbox_failed": lambda: (
        f"check the environment's provider and image (`hangar doctor`), then press "
        f"{VERIFY_AGAIN}"),
    "install_failed": lambda: (
        f"fix the environment's `install` step (its output is below), then press "
        f"{VERIFY_AGAIN}"),
    "timed_out": lambda minutes: "",
    "restore_failed": lambda: (
        "check that verify.restore_paths names paths of the repository, then press "
        f"{VERIFY_AGAIN}"),
}


def error(why: Why) -> str:
    return word(ERRORS, why)


def fix(why: Why) -> str | None:
    return word(FIXES, why) or None


# Verification's timed steps, by `app.runs.VerifyStep` code.
STEP_NAMES = {
    "sandbox": "clean sandbox started, head checked out",
    "install": "the environment's install step",
    "restore": "verify.restore_paths put back from the base",
    "command": "the verify command",
}


def step_lines(steps: list[dict], command: str) -> list[str]:
    """One line a step, in order: what it was, how long it took, how it ended."""
    lines, attempt = [], 0
    for step in steps:
        name = STEP_NAMES.get(step.get("code", ""), str(step.get("code")))
        if step.get("code") == "command":
            attempt += 1
            name = f"{code_span(command)} (attempt {attempt})" if command else name
        if step.get("skipped"):
            lines.append(f"- {name}: skipped, the sandbox started from a current "
                         "environment build")
            continue
        ended = ("" if step.get("exit_code") in (None, 0)
                 else f", exit {step['exit_code']}")
        lines.append(f"- {name}: {float(step.get('seconds') or 0):.1f}s{ended}")
    return lines


def verifying_output(command: str, head: str) -> dict:
    """Check run `hangar / verify` while verification runs."""
    return {"title": "Verifying", "summary": f"`{command}` on `{short(head)}` in a clean sandbox"}


def waiting_output(head: str) -> dict:
    """Check run `hangar / verify` while verification waits for a free sandbox."""
    return {"title": "Waiting for a sandbox",
            "summary": f"Verification of `{short(head)}` waits: every sandbox hangar may hold "
                       "at once is in use (HANGAR_MAX_SANDBOXES). It starts by itself when "
                       "one ends."}


def verify_actions(passed: bool | None) -> list[dict]:
    """The buttons on check run `hangar / verify`; `identifier` is what the click asks."""
    actions = [{"label": "Verify again", "description": "Run verification again",
                "identifier": "verify"}]
    if passed is False:
        actions.append({"label": "Fix with hangar", "description": "Start an auto-fix turn",
                        "identifier": "autofix"})
    return actions
