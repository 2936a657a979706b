"""GitHub is the backup: recover hangar's open work from what it wrote there.

A new database (a lost one, a new volume, a fresh install of an App with history) is
filled from GitHub before hangar acts on commands: each open pull request hangar opened
(the marker in its body, on a branch of the same repository, opened by its own bot) comes back
as a job with its run, its status comments, its check runs and, when someone approved
it, the land request the approval implies. Each PR is recovered once; a rebuild cut
short is simply run again.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from app import landing, render, runs
from app.commands import job_for_pr
from app.datadir import REBUILD_FLAG, rebuild_done
from app.github.ops import RepoOps
from app.models import (
    Job,
    JobState,
    Run,
    RunKind,
    RunOutcome,
    RunStage,
    RunState,
    Thread,
    Verification,
    changed,
    new_id,
)

if TYPE_CHECKING:
    from app.engine import StepContext
    from app.repositories.context import RepositoriesContext

log = logging.getLogger(__name__)

PR_MARKER = re.compile(r"<!-- hangar:pr (job-[0-9a-f]+) (\S+) -->")
ASKED = re.compile(r"^Asked by @([A-Za-z0-9-]+(?:\[bot\])?) in #(\d+):$", re.M)
FIRST_FENCE = re.compile(r"^(`{3,})text\n(.*?)\n\1$", re.M | re.S)
ATTEMPT = re.compile(r"^hangar/\d+-[0-9a-f]+-(\d+)$")  # attempts of `/hangar try N`
COMMAND = re.compile(r"^- command: `(.*)`$", re.M)


@dataclass
class Recovered:
    """What one rebuild found and recovered, for the log and the tests."""

    prs: list[str] = field(default_factory=list)
    land_requests: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class PrFacts:
    """What a hangar PR's body says about the job that opened it (pure, parsed)."""

    job_id: str
    branch: str
    thread_number: int
    requested_by: str
    prompt: str
    closes_issue: bool


def read_pr_body(body: str | None) -> PrFacts | None:
    """The job behind a PR body hangar wrote (render.pr_body); None for any other body."""
    body = body or ""
    marker = PR_MARKER.search(body)
    asked = ASKED.search(body)
    if marker is None or asked is None:
        return None
    fence = FIRST_FENCE.search(body, asked.end())
    prompt = fence.group(2) if fence else ""
    return PrFacts(job_id=marker.group(1), branch=marker.group(2),
                   thread_number=int(asked.group(2)), requested_by=asked.group(1),
                   prompt=prompt.removesuffix("…"),
                   closes_issue=f"Closes #{asked.group(2)}" in body)


def verification_from_check(check: dict | None) -> Verification | None:
    """hangar's `hangar / verify` check run on GitHub, read back as a Verification."""
    if not check or check.get("status") != "completed":
        return None
    summary = (check.get("output") or {}).get("summary") or ""
    command = COMMAND.search(summary)
    passed = {"success": True, "failure": False}.get(check.get("conclusion") or "")
    return Verification(command=command.group(1) if command else "", head_sha=check["head_sha"],
                        passed=passed,
                        error=None if passed is not None else "recovered from GitHub: "
                                                               "verification could not run")


# -- the walk ------------------------------------------------------------------------


async def rebuild_from_github(engine: RepositoriesContext) -> Recovered:
    """Every installation, every repository, every open PR hangar opened."""
    found = Recovered()
    gh = await engine.github.app_client()
    jwt = engine.github.jwt()
    # GitHub names an App's bot account `<slug>[bot]`: only its PRs are hangar's.
    bot_login = f"{(await gh.getitem('/app', jwt=jwt))['slug']}[bot]"
    async for installation in gh.getiter("/app/installations", jwt=jwt):
        client = await engine.github.client(installation["id"])
        async for repo in client.getiter("/installation/repositories",
                                         iterable_key="repositories"):
            ops = RepoOps(client, repo["full_name"], own_app_id=engine.settings.app_id)
            async for pr in client.getiter(f"{ops.base}/pulls?state=open&per_page=100"):
                await recover_pr(engine, ops, installation["id"], repo, pr, found,
                                 bot_login=bot_login)
    log.info("rebuilt from GitHub", extra={"prs": len(found.prs),
                                            "land_requests": len(found.land_requests)})
    return found


def opened_by_hangar(pr: dict, facts: PrFacts | None, *, bot_login: str) -> bool:
    """hangar's marker in the body, opened by hangar's own bot (any App, or a person, can
    copy the marker), on a branch of the same repository."""
    head = pr.get("head") or {}
    base = pr.get("base") or {}
    user = pr.get("user") or {}
    return (facts is not None and head.get("ref") == facts.branch
            and user.get("type") == "Bot"
            and (user.get("login") or "").lower() == bot_login.lower()
            and (head.get("repo") or {}).get("full_name") == (base.get("repo") or {}).get(
                "full_name"))


async def recover_pr(engine: RepositoriesContext, ops: RepoOps, installation_id: int,
                     repo: dict, pr: dict, found: Recovered, *, bot_login: str) -> None:

    facts = read_pr_body(pr.get("body"))
    name = f"{ops.full_name}#{pr['number']}"
    if facts is None or not opened_by_hangar(pr, facts, bot_login=bot_login):
        return
    if job_for_pr(engine, ops.full_name, pr["number"]) is not None:
        found.skipped.append(name)
        return
    head = pr["head"]["sha"]
    checks = await hangar_checks(engine, ops, head)
    raw = await ops.gh.getitem(f"{ops.base}/compare/{pr['base']['ref']}...{head}")
    compare = await ops.compare(pr["base"]["ref"], head)
    attempt = ATTEMPT.match(facts.branch)
    attempt_no = int(attempt.group(1)) if attempt else 1
    agent = checks.get(AGENT_NAME)
    run = Run(
        id=(agent or checks.get(VERIFY_NAME) or {}).get("external_id") or new_id("run"),
        job_id=facts.job_id, attempt=attempt_no, kind=RunKind.AGENT, prompt=facts.prompt,
        branch=facts.branch, base_branch=pr["base"]["ref"],
        base_sha=raw["merge_base_commit"]["sha"], state=RunState.EXITED, stage=RunStage.DONE,
        outcome=RunOutcome.PR, head_sha=head, compare=compare, pr_number=pr["number"],
        verification=verification_from_check(checks.get(VERIFY_NAME)),
        check_ids={f"{n}@{head}": c["id"] for n, c in checks.items()},
        label=render.recovered_label(),
    )
    job = engine.get_job(facts.job_id) or await recovered_job(
        ops, installation_id, repo, pr, facts)
    status_comments = dict(job.status_comments)
    for number in (facts.thread_number, pr["number"]):
        own = await ops.find_own_comment(number, render.status_marker(facts.job_id))
        if own:
            status_comments[number] = own["id"]
    # The run first: a job is found through its runs' PRs.
    engine.save_run(run)
    engine.save_job(changed(job, **{"status_comments": status_comments,
                                           "attempts": max(job.attempts, attempt_no)}))
    engine.note(job.id, f"recovered #{pr['number']} ({run.id}) from GitHub")
    found.prs.append(name)
    if await approved(ops, pr["number"]):
        await imply_land_request(engine, job, pr["number"])
        found.land_requests.append(name)


AGENT_NAME = "hangar / agent"
VERIFY_NAME = "hangar / verify"


async def hangar_checks(engine: RepositoriesContext, ops: RepoOps,
                        head: str) -> dict[str, dict]:
    """hangar's own check runs on head, newest of each name."""
    mine: dict[str, dict] = {}
    for check in await ops.check_runs(head):  # every page: a matrix CI has many
        app_id = (check.get("app") or {}).get("id")
        if check.get("name") in (AGENT_NAME, VERIFY_NAME) and app_id in (None,
                                                                          engine.settings.app_id):
            current = mine.get(check["name"])
            if current is None or check["id"] > current["id"]:
                mine[check["name"]] = check
    return mine


async def recovered_job(ops: RepoOps, installation_id: int, repo: dict, pr: dict,
                        facts: PrFacts) -> Job:
    issue = await ops.gh.getitem(f"{ops.base}/issues/{facts.thread_number}")
    return Job(
        id=facts.job_id,
        thread=Thread(repo=ops.full_name, number=facts.thread_number,
                      installation_id=installation_id, is_pr=not facts.closes_issue),
        requested_by=facts.requested_by, prompt=facts.prompt or pr.get("title", ""),
        title=issue.get("title", ""), body=issue.get("body") or "",
        clone_url=repo.get("clone_url") or "", base_branch=pr["base"]["ref"],
        state=JobState.DONE,
    )


async def approved(ops: RepoOps, number: int) -> bool:
    async for review in ops.gh.getiter(f"{ops.base}/pulls/{number}/reviews"):
        if (review.get("state") or "").upper() == "APPROVED":
            return True
    return False


async def imply_land_request(engine: RepositoriesContext, job: Job, pr_number: int) -> None:
    """An approval asks hangar to land the PR: the land step reads the reviews itself."""

    request = landing.ensure_request(engine, job, pr_number)
    landing.wake_request(request)
    landing.save(engine, request)
    engine.wake()


async def run_pending_rebuild(engine: StepContext) -> Recovered:
    """The rebuild a new database is owed; then the reaper may report unknown sandboxes.
    It takes the whole StepContext: it hands the engine on to runs' reaper."""

    found = await rebuild_from_github(engine)
    rebuild_done(engine.settings.data_dir)
    engine.store.clear_flag(REBUILD_FLAG)  # every replica's, on a shared database
    engine.rebuilding = False
    # The commands that came meanwhile wait for no timer: the engine looks at every row.
    engine.wake()
    await runs.reap_orphans(engine)
    return found
