"""Landing hangar's pull requests: a human approves the exact head, hangar merges as the
App, and the branch ruleset is the gate.

A land request is a durable row per PR:
queued → updating → waiting_ci → awaiting_approval → merging → landed, or conflict,
ci_failed, rejected, cancelled, failed — each with a reason and an append-only history.
GitHub decides what may merge; hangar only ever asks it, with the approved head pinned.

The whole concern lives in this folder, one kind of thing a file:

- rows.py      the land request row and its persistence: states, reviews, save/get/move
- gate.py      GitHub's merge decision before hangar asks: every rule on the base branch
               (rulesets, every page, and classic protection) and what is still missing
- rules.py     the pure decisions: does an approval count, what the checks and the
               branch's rules say, what GitHub's answer to a merge means; reason codes
- intake.py    what an event recorded by the engine does to a row: note it, wake it
- steps.py     the state machine's steps, with GitHub's I/O: update, wait for CI, await
               approval, merge, give up; and what they show (check run `hangar / land`,
               the notes in the status comment)
- queue.py     GitHub's merge queue: a merge group's `hangar / verify` (its row and step)
- commands.py  `/hangar land` (and its acknowledgements), `/hangar land cancel`,
               `/hangar resolve`
- overlaps.py  open hangar PRs on one base that change the same files, and git's
               prediction of a conflict if one lands first (a row per base)
- mirror.py    hangar's bare copy of a repository: git's merge answers (merge-tree)
- worker.py    the land worker: a sandbox that rebases a branch (land.update: rebase)
- history.py   each repository's approval history: where auto-land could be suggested
- plugin.py    `register(engine)`: the three row kinds, the commands, hooks, status notes
- context.py   `LandingContext`: what landing's steps and helpers use of the engine,
               and nothing more (a test passes a small object of its own)

This file is the concern's face: code outside the folder imports from here only (the
import-graph test holds it to that). It names `register` (plugin.py: what landing asks
of the engine), the rows, and what the rest of hangar and its tests read.
"""

from app.landing.gate import (
    CODEOWNERS_PATHS,
    Cannot,
    Facts,
    Needs,
    blockers,
    branch_gate,
    missing_for_merge,
    owners_of,
    parse_codeowners,
    usable_methods,
)
from app.landing.history import suggestions as auto_land_suggestions
from app.landing.intake import (
    job_for_pr,
    record_ci,
    record_gate_changed,
    record_land_rerun,
    record_pull_request,
    record_resolve_button,
    record_review,
    record_suite_rerun,
    record_thread,
)
from app.landing.overlaps import Overlaps
from app.landing.plugin import register
from app.landing.queue import MergeGroup, record_merge_group
from app.landing.rows import (
    AWAITING_REVIEW,
    FINAL,
    RESTARTABLE,
    LandRequest,
    LandState,
    ReviewRecord,
    RowChanged,
    end_requests,
    ensure_request,
    fresh,
    get,
    land_id,
    move,
    save,
    wake_request,
)
from app.landing.rules import (
    AutoLandOut,
    GateFact,
    LandReason,
    NotCounted,
    approval_verdict,
    checks_verdict,
    closing_references,
    file_list_gap,
    gate_report,
    land_check_status,
    merge_answer,
    one_line,
    required_from_rules,
    verification_outcome,
    with_protection,
)
from app.landing.steps import (
    BaseMoved,
    advance_land,
    commit_makers,
    read_gate,
    read_protection,
    read_rules,
)

__all__ = [
    "AWAITING_REVIEW",
    "CODEOWNERS_PATHS",
    "FINAL",
    "RESTARTABLE",
    "AutoLandOut",
    "BaseMoved",
    "Cannot",
    "Facts",
    "GateFact",
    "LandReason",
    "LandRequest",
    "LandState",
    "MergeGroup",
    "Needs",
    "NotCounted",
    "Overlaps",
    "ReviewRecord",
    "RowChanged",
    "advance_land",
    "approval_verdict",
    "auto_land_suggestions",
    "blockers",
    "branch_gate",
    "checks_verdict",
    "closing_references",
    "commit_makers",
    "end_requests",
    "ensure_request",
    "file_list_gap",
    "fresh",
    "gate_report",
    "get",
    "job_for_pr",
    "land_check_status",
    "land_id",
    "merge_answer",
    "missing_for_merge",
    "move",
    "one_line",
    "owners_of",
    "parse_codeowners",
    "read_gate",
    "read_protection",
    "read_rules",
    "record_ci",
    "record_gate_changed",
    "record_land_rerun",
    "record_merge_group",
    "record_pull_request",
    "record_resolve_button",
    "record_review",
    "record_suite_rerun",
    "record_thread",
    "register",
    "required_from_rules",
    "save",
    "usable_methods",
    "verification_outcome",
    "wake_request",
    "with_protection",
]
