"""Each repository's approval history, read from its land requests: which class of change
(the one top-level folder all of a PR's files are in, `docs/**`) landed as the agent made
it, approved as first made, and how often. Where a class landed unchanged every time, at
least SUGGEST_AFTER times, the fleet page suggests auto-land for it. A suggestion only:
hangar never turns auto-land on itself. Pure: built from the rows handed to it."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from app.landing.rows import LandRequest, LandState
from app.models import Run, RunKind

SUGGEST_AFTER = 5  # landed unchanged at least this many times, and every time


@dataclass(frozen=True)
class Suggestion:
    repo: str
    paths: str  # the class of change, as an only_paths pattern: `docs/**`
    landed: int  # how many landed, every one unchanged


def change_class(files: list[str]) -> str | None:
    """The one top-level folder every file is in, as a pattern; None when they spread
    over more than one, or touch the root."""
    tops = {f.split("/", 1)[0] for f in files if "/" in f}
    if len(tops) != 1 or any("/" not in f for f in files):
        return None
    return f"{tops.pop()}/**"


def landed_unchanged(request: LandRequest, runs: list[Run]) -> bool:
    """It landed as the agent's one turn made it, approved at that head by a person (or
    updated cleanly by hangar since): no follow-up, auto-fix or resolve turn."""
    turns = [r for r in runs if r.pr_number == request.pr_number and r.kind != RunKind.VERIFY]
    if len(turns) != 1 or "policy" in request.approved_by or not request.approved_by:
        return False
    made, head, seen = turns[0].head_sha, request.approved_head, set()
    while head is not None and head != made and head not in seen:
        seen.add(head)  # back through hangar's own clean updates of the branch
        head = request.updated_heads.get(head)
    return head is not None and head == made


def suggestions(lands: list[LandRequest], runs: list[Run]) -> list[Suggestion]:
    runs_by_job: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        runs_by_job[run.job_id].append(run)
    tally: dict[tuple[str, str], list[bool]] = defaultdict(list)
    for land in lands:
        if land.state != LandState.LANDED:
            continue
        job_runs = runs_by_job.get(land.job_id, [])
        mine = [r for r in job_runs if r.pr_number == land.pr_number and r.compare]
        if not mine:
            continue
        last = max(mine, key=lambda r: r.queued_at)
        files = [f["filename"] for f in (last.compare or {}).get("files", [])]
        kind = change_class(files) if files else None
        if kind is not None:
            tally[(land.repo, kind)].append(landed_unchanged(land, job_runs))
    return [Suggestion(repo, paths, len(seen)) for (repo, paths), seen in sorted(tally.items())
            if len(seen) >= SUGGEST_AFTER and all(seen)]
