"""Auto-fix's rules: what counts as the same failure, when a turn may start, and what a
turn's prompt says. Pure: each is built from the data handed to it, with no engine and no
GitHub; the steps (steps.py) read the data and act on the answer."""

from __future__ import annotations

import hashlib
import re
from enum import StrEnum
from typing import Any

from pydantic import BaseModel

from app.models import AutofixRow, Job, Reason
from app.redact import redact
from app.render import autofix as words
from app.render.reasons import Why
from app.repoconfig import AutofixPolicy, FanoutPolicy

IGNORED_CHECKS = ("hangar / agent", "hangar / land")
VERIFY_CHECK = "hangar / verify"
EVIDENCE_CHARS = 6000  # per failed check
PROMPT_CHARS = 12000  # the whole prompt
TRUNCATED = "\n…(truncated)"
SIGNATURE_LINES = 5
MAX_JUDGED = 50
PUSH_WORD_GRACE_S = 120  # how long CI on an unknown head waits for the push event


class Stop(StrEnum):
    """Why auto-fix did not start a turn (worded by render.autofix)."""

    MERGING = "merging"
    TURNS_USED = "turns_used"
    OFF_FOR_REPO = "off_for_repo"
    OFF_FOR_PR = "off_for_pr"
    OFF = "off"
    SAME_FAILURE = "same_failure"
    QUIET = "quiet"
    REVIEW_WAITS = "review_waits"
    REVIEW_NOT_STARTED = "review_not_started"
    REVIEW_OPT_IN = "review_opt_in"  # `review.act_on_changes_requested` is not set
    GAVE_UP = "gave_up"
    NOT_PICKED = "not_picked"  # an attempt of `/hangar try N` nobody picked


def kept(why: Why) -> Reason:
    """A decision as the row keeps it: its code and facts, worded when shown."""
    return Reason(code=str(why.code), facts=dict(why.facts))


def review_not_started(author: str, why: Why) -> Why:
    """A change request's turn did not start, because of `why` (another `Stop`)."""
    return Why(Stop.REVIEW_NOT_STARTED, author=author, because=str(why.code), **why.facts)


# Reasons that pass with time: looked at again. The others are said once per failure.
PASSING = (Stop.MERGING, Stop.QUIET, Stop.NOT_PICKED)

# Lines that say what failed; the rest of a log is context.
_FAILING_LINE = re.compile(r"(?i)(fail|error|exception|assert|panic|traceback|not ok\b)")
# What changes between two runs of the same failure: where, when, how long, which commit.
_PATH = re.compile(r"(?:/[\w.+@-]+)+/([\w.+@-]+)")
_DURATION = re.compile(r"\b\d+(?:\.\d+)?\s*(?:ms|s|sec|seconds|m|min)\b")
_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d+)?Z?")
_SHA = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")


class Failure(BaseModel):
    name: str
    title: str = ""
    summary: str = ""
    details: list[str] = []  # annotations, log lines, the status's description and URL
    unread: bool = False  # its job's log could not be fetched: what failed is not known


def normalize_line(line: str) -> str:
    """A log line without what differs between two runs of the same failure."""
    line = _TIMESTAMP.sub("<time>", line.strip())
    line = _PATH.sub(r"\1", line)
    line = _DURATION.sub("<duration>", line)
    return _SHA.sub("<sha>", line)


def failing_lines(text: str, limit: int = SIGNATURE_LINES) -> list[str]:
    """The first lines that say what failed (or the first lines, when none does)."""
    lines = [line.strip() for line in text.splitlines()
             if line.strip() and not line.strip().startswith("```")]
    hits = [line for line in lines if _FAILING_LINE.search(line)]
    return [normalize_line(line)[:200] for line in (hits or lines)[:limit]]


def failure_signature(failures: list[Failure]) -> str | None:
    """Names of the failed checks plus their first failing lines: 'the same failure'.
    None when a failure's log could not be read: without its lines, two failures of one
    check would look the same whatever failed, and hangar does not claim what it has not
    seen."""
    if any(failure.unread for failure in failures):
        return None
    parts = []
    for failure in sorted(failures, key=lambda f: f.name):
        evidence = "\n".join(failure.details) or failure.title
        parts.append("\n".join([failure.name, *failing_lines(evidence)]))
    return hashlib.sha256("\n\n".join(parts).encode()).hexdigest()[:16]


def why_not(
    row: AutofixRow, policy: AutofixPolicy, signature: str | None, *, landing: bool,
    now_s: float, requested: bool = False,
) -> str | None:
    """None when a turn may start; else the reason, worded for the humans."""
    return words.stopped(stop_reason(row, policy, signature, landing=landing, now_s=now_s,
                                     requested=requested))


def stop_reason(
    row: AutofixRow, policy: AutofixPolicy, signature: str | None, *, landing: bool,
    now_s: float, requested: bool = False,
) -> Why | None:
    """None when a turn may start; else why not (a `Stop` code).

    `requested`: a person asked (the "Fix with hangar" button). The bound and a merge in
    progress still hold; the rules that keep hangar from acting on its own do not.
    """
    if landing:
        return Why(Stop.MERGING)
    if row.turns >= policy.max_turns:
        return Why(Stop.TURNS_USED, max_turns=policy.max_turns)
    if requested:
        return None
    if not policy.enabled:
        return Why(Stop.OFF_FOR_REPO)
    if not row.enabled:
        return Why(Stop.OFF_FOR_PR)
    if signature is not None and row.last_signature == signature:
        return Why(Stop.SAME_FAILURE)
    if row.last_human_push_at and now_s - row.last_human_push_at < policy.quiet_minutes * 60:
        return Why(Stop.QUIET)
    return None


def fanout_hold(job: Job, attempt: int, policy: FanoutPolicy) -> Why | None:
    """None when auto-fix may work on this attempt; else why not. One attempt of
    `/hangar try N` gets turns: the picked one, or (`fanout.autofix: ranked_first`) the
    eligible one ranked first once the ranking is final."""
    if job.attempts < 2 or job.winner == attempt:
        return None
    if job.winner is None and policy.autofix == "ranked_first" and job.ranking:
        first = job.ranking[0]
        if first["attempt"] == attempt and first.get("eligible", True):
            return None
    return Why(Stop.NOT_PICKED, n=attempt, mode=policy.autofix)


def _bounded(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - len(TRUNCATED)] + TRUNCATED


def prompt_for_failures(failures: list[Failure], turn: int, max_turns: int) -> str:
    """The turn's prompt: each failed check with its evidence, redacted and bounded."""
    head = (f"Auto-fix turn {turn} of {max_turns}: CI failed on this pull request. "
            "Fix the cause (not the tests' expectations, unless they are wrong) and commit.")
    sections = []
    for failure in failures:
        lines = [f"## {failure.name} failed"]
        lines += [part for part in (failure.title, failure.summary) if part]
        lines += failure.details
        sections.append(_bounded(redact("\n".join(lines)), EVIDENCE_CHARS))
    return _bounded("\n\n".join([head, *sections]), PROMPT_CHARS)


def prompt_for_review(author: str, body: str, comments: list[dict[str, Any]]) -> str:
    lines = [f"@{author} requested changes in a review. Address this review (and only this "
             "review), then commit.", ""]
    if body.strip():
        lines += [body.strip(), ""]
    for c in comments:
        where = f"{c.get('path')}:{c.get('line') or c.get('original_line') or '?'}"
        lines.append(f"- {where}: {c.get('body', '')}")
    return _bounded(redact("\n".join(lines)), PROMPT_CHARS)
