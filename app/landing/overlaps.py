"""Early warning of conflicts between hangar's open pull requests on one base.

Whenever an open hangar PR's files are known (a turn ended, a PR was pushed to, closed or
landed), the base's overlap row looks at every open hangar PR into that base: the pairs
that change the same files are warned of in each one's status comment, with git's answer
to whether the second conflicts once the first lands ("will conflict with #12 in
`src/sync.py` if #12 lands first"): the first's head merged onto the base as GitHub would
land it, then the second's update from that base, both in hangar's mirror (merge-tree,
no checkout, no repository code run).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from app import runs
from app.commands import job_for_pr
from app.github import ops as ghops
from app.landing import mirror
from app.models import Run, Thread, now

if TYPE_CHECKING:
    from app.landing.context import LandingContext

log = logging.getLogger(__name__)

TABLE = "land_overlap"
MAX_PREDICTED = 200  # pairs whose git answer is kept (by their two heads)


class Overlaps(BaseModel):
    """The open hangar PRs into one base, which of them change the same files, and git's
    prediction for each such pair."""

    id: str
    repo: str
    base: str
    installation_id: int
    clone_url: str
    # str(PR number) → its head and changed files (a rename's old name too)
    prs: dict[str, dict[str, Any]] = {}
    # str(PR number) → [{pr, files, conflicts: [..] | None (git could not say)}]
    warnings: dict[str, list[dict[str, Any]]] = {}
    # "<first head> <second head>" → the files the second conflicts in once the first
    # lands ([]: none), as git answered
    predicted: dict[str, list[str]] = {}
    # PRs closed since the last look, and whether anything else asked for a look: a look
    # asked only by closes of PRs that overlapped with nothing lists nothing again.
    closed: list[str] = []
    relook: bool = False
    due_at: float = 0.0
    updated_at: float = Field(default_factory=now)


def overlap_id(repo: str, base: str) -> str:
    return f"overlap-{repo.replace('/', '-')}-{base}"


def wake_overlaps(engine: LandingContext, *, repo: str, base: str, installation_id: int,
                  clone_url: str, closed: int | None = None) -> None:
    """Something about the base's open hangar PRs changed (`closed`: only that this one was
    closed or merged): look at them again."""
    row_id = overlap_id(repo, base)
    row = engine.store.get(TABLE, row_id, Overlaps) or Overlaps(
        id=row_id, repo=repo, base=base, installation_id=installation_id,
        clone_url=clone_url)
    row.due_at, row.installation_id, row.clone_url = 0.0, installation_id, clone_url
    if closed is None:
        row.relook = True
    elif str(closed) not in row.closed:
        row.closed = [*row.closed, str(closed)]
    save(engine, row)
    engine.wake(row_id)


def save(engine: LandingContext, row: Overlaps) -> None:
    row.updated_at = time.time()
    engine.store.put(TABLE, row.id, row, active=True)


def warnings_for(engine: LandingContext, repo: str, pr_number: int) -> list[dict[str, Any]]:
    """What the status comment warns of for this PR: the other open hangar PRs on its
    base that change the same files, and git's prediction for each."""
    for run in reversed(engine.store.find("run", Run, pr_number=pr_number)):
        job = engine.get_job(run.job_id)
        if job is not None and job.thread.repo == repo:
            row = engine.store.get(TABLE, overlap_id(repo, run.base_branch), Overlaps)
            return row.warnings.get(str(pr_number), []) if row else []
    return []


def names(files: list[dict]) -> list[str]:
    return list(dict.fromkeys(n for f in files
                              for n in (f.get("filename"), f.get("previous_filename")) if n))


async def advance_overlaps(engine: LandingContext, row_id: str) -> None:
    row = engine.store.get(TABLE, row_id, Overlaps)
    if row is None or row.due_at > time.time():
        return
    # Until the next wake (a turn's end, a push, a close), or the idle look's safety poll.
    row.due_at = time.time() + engine.settings.idle_pr_look_seconds
    closed, relook = row.closed, row.relook
    row.closed, row.relook = [], False
    save(engine, row)
    if closed and not relook and forget_closed(engine, row, closed):
        return
    ops = await engine.github.repo_ops(Thread(repo=row.repo, number=0,
                                       installation_id=row.installation_id))
    prs: dict[str, dict[str, Any]] = {}
    async for pr in ops.gh.getiter(
            f"{ops.base}/pulls?state=open&base={row.base}&per_page=100"):
        if not ghops.same_repository(pr) or not pr["head"]["ref"].startswith("hangar/"):
            continue
        job = job_for_pr(engine, row.repo, pr["number"])
        if job is None:
            continue
        head = pr["head"]["sha"]
        files = known_files(engine, job.id, pr["number"], head)
        if files is None:
            files = names((await ops.compare(row.base, head)).get("files") or [])
        prs[str(pr["number"])] = {"head": head, "branch": pr["head"]["ref"], "files": files,
                                  "job": job.id}
    row = engine.store.get(TABLE, row_id, Overlaps) or row
    warnings = await predict(engine, row, prs)
    before = row.warnings
    row.prs = {n: {k: v for k, v in p.items() if k != "branch"} for n, p in prs.items()}
    row.warnings = warnings
    save(engine, row)
    changed = {n for n in {*before, *warnings} if before.get(n) != warnings.get(n)}
    jobs = {prs[n]["job"] if n in prs else row.prs.get(n, {}).get("job") for n in changed}
    show(engine, {job for job in jobs if job is not None})


def forget_closed(engine: LandingContext, row: Overlaps, closed: list[str]) -> bool:
    """Drop the closed PRs from the last look without listing the base's open PRs again,
    when that look knew them and no two of the others overlap: nothing else changed (a
    turn's end, a push or a reopen asks for a whole look), and with no pair left there is
    no prediction a moved base could change. False when a whole look is needed."""
    if not set(closed) <= set(row.prs):
        return False  # a PR the last look did not see: look at the base again
    left = {number: [w for w in warned if str(w["pr"]) not in closed]
            for number, warned in row.warnings.items() if number not in closed}
    if any(left.values()):
        return False  # the base may have moved under the pairs left: predict again
    changed = {n for n in row.warnings if row.warnings[n] != left.get(n, [])}
    jobs = {row.prs[n].get("job") for n in changed if n in row.prs}
    row.prs = {n: p for n, p in row.prs.items() if n not in closed}
    row.warnings = {}
    save(engine, row)
    show(engine, {job for job in jobs if job is not None})
    return True


def known_files(engine: LandingContext, job_id: str, pr_number: int, head: str) -> list[str] | None:
    """The PR's files as its latest turn at this head collected them (a compare GitHub
    cut short is no list of all of them)."""
    for run in sorted(engine.runs_of(job_id), key=lambda r: r.queued_at, reverse=True):
        if run.pr_number == pr_number and run.head_sha == head and run.compare:
            if run.compare.get("truncated"):
                return None
            return names(run.compare.get("files") or [])
    return None


async def predict(engine: LandingContext, row: Overlaps,
                  prs: dict[str, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """For each PR, the others that change one of its files, with git's word on whether
    it conflicts once the other lands first."""
    warnings: dict[str, list[dict[str, Any]]] = {}
    path = None
    numbers = sorted(prs, key=int)
    for number in numbers:
        for other in numbers:
            if other == number:
                continue
            shared = [f for f in prs[number]["files"] if f in set(prs[other]["files"])]
            if not shared:
                continue
            key = f"{prs[other]['head']} {prs[number]['head']}"
            if key not in row.predicted:
                try:
                    if path is None:
                        path = await mirror.fetched(
                            engine, repo=row.repo, clone_url=row.clone_url,
                            installation_id=row.installation_id,
                            refs=[row.base, *(p["branch"] for p in prs.values())])
                    row.predicted[key] = await conflicts_after(
                        path, row.base, first=prs[other]["head"], then=prs[number]["head"])
                except Exception:  # the overlap is a fact; git's prediction, when it answers
                    log.warning("could not predict a conflict", exc_info=True,
                                extra={"repo": row.repo, "prs": key})
            warnings.setdefault(number, []).append({
                "pr": int(other), "files": shared,
                "conflicts": row.predicted.get(key)})
    if len(row.predicted) > MAX_PREDICTED:
        row.predicted = dict(list(row.predicted.items())[-MAX_PREDICTED:])
    return warnings


async def conflicts_after(path: Any, base: str, *, first: str, then: str) -> list[str]:
    """The files `then` conflicts in when brought up to date with the base after `first`
    landed on it (squashed onto the base's tip, as hangar lands it)."""
    landed = await mirror.merge(path, f"refs/heads/{base}", first)
    if not landed.clean or landed.tree is None:
        return []  # `first` cannot land as it is: nothing to predict for `then`
    onto = await mirror.commit_tree(path, landed.tree, parent=f"refs/heads/{base}")
    after = await mirror.merge(path, then, onto)
    return list(after.conflicts)


def show(engine: LandingContext, job_ids: set[str]) -> None:
    """The jobs' status comments say what changed."""
    for job_id in job_ids:
        runs.ask_status_edit(engine, job_id)
