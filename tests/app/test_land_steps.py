"""The land step against a recording GitHub: one table row per case, milliseconds each.

Each row sets what GitHub holds (the PR, how far behind its base, reviews, checks, rules)
and how GitHub answers update-branch and merge, runs one step of the land request, and
names the state it ends in and the writes that change the branch: update-branch and
merge, with the head pinned. The end-to-end tests walk a few of these through fakehub;
here every answer GitHub may give is one row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from app import landing
from app.engine import Engine
from app.landing import LandRequest, LandState, ReviewRecord
from app.models import Job, Run, RunStage, RunState, Thread, Verification
from tests.recording_github import (
    HEAD,
    MERGED,
    OWN_APP,
    PR_NUMBER,
    REPO,
    RecordingGitHub,
    check,
)

OLD = "d" * 40
ISSUE = Thread(repo=REPO, number=1, installation_id=1)
REQUIRED = [{"type": "required_status_checks", "ruleset_id": 11,
             "parameters": {"required_status_checks": [{"context": "ci / test"}]}}]
GATE = {11: {"id": 11, "name": "main", "bypass_actors": [],
             "current_user_can_bypass": "never"}}
GREEN = [check("ci / test", "success"),
         check("hangar / verify", "success", app_id=OWN_APP, run_id=501)]
APPROVED = [{"id": 41, "state": "APPROVED", "commit_id": HEAD,
             "user": {"login": "rita", "type": "User"}}]
UPDATE = "update-branch"
MERGE = "merge"
SQUASH = {"sha": HEAD, "merge_method": "squash"}


def refusal(status: int, message: str) -> list[tuple[int, Any]]:
    return [(status, {"message": message})]


@dataclass
class Case:
    name: str
    state: LandState = LandState.QUEUED  # the request before the step
    behind_by: int = 0
    reviews: list[dict] = field(default_factory=lambda: list(APPROVED))
    checks: list[dict] = field(default_factory=lambda: list(GREEN))
    rules: list[dict] = field(default_factory=lambda: list(REQUIRED))
    rulesets: dict = field(default_factory=lambda: dict(GATE))
    github: dict[str, Any] = field(default_factory=dict)  # other RecordingGitHub fields
    script: dict[tuple[str, str], list] = field(default_factory=dict)
    # what the step does
    ends: LandState = LandState.LANDED
    reason: str | None = None  # a fragment of the request's reason
    puts: list[tuple[str, dict]] = field(default_factory=list)  # (update-branch|merge, body)
    raises: type[Exception] | None = None
    comment: str | None = None  # a fragment of a reply hangar posts on the PR
    enqueued: str | None = None  # the head hangar put in the merge queue before the step
    verified: bool | None = True  # hangar's verification of the head: passed, failed, not run


WORKFLOW = [{"filename": ".github/workflows/ci.yml", "status": "modified", "additions": 1,
             "deletions": 0, "changes": 1}]
HANGAR_YML = ".github/hangar.yml"

CASES = [
    Case("a sensitive change, sensitive_extra_approvals: 1: one approval is not enough",
         github={"files": WORKFLOW,
                 "contents": {HANGAR_YML: "land: {sensitive_extra_approvals: 1}\n"}},
         ends=LandState.AWAITING_APPROVAL, reason="waiting for 1 approval(s)"),
    Case("a sensitive change with no extra approvals asked: its acknowledgement is",
         github={"files": WORKFLOW}, ends=LandState.AWAITING_APPROVAL,
         reason="--ack-sensitive"),
    Case("an approved draft waits for hangar to mark it ready, and says so",
         github={"draft": True}, checks=[check("ci / test", "success")],
         ends=LandState.QUEUED, reason="is a draft (land.draft_pr) until hangar / verify"),
    Case("an approved draft whose verification failed: that is what holds it",
         github={"draft": True}, verified=False, ends=LandState.CI_FAILED,
         reason="required check(s) failed on `aaaaaaa`: hangar / verify"),
    Case("approved, up to date and green: one squash merge of the approved head",
         puts=[(MERGE, SQUASH)], reason=f"merged as `{MERGED[:7]}`"),
    Case("behind its base: update the branch, pinned to the head, and no merge",
         behind_by=2, ends=LandState.UPDATING, puts=[(UPDATE, {"expected_head_sha": HEAD})]),
    # Which files conflict is git's word, from hangar's mirror (tests/app/test_land_mirror.py
    # asks a real one); a file both sides changed is no conflict by itself.
    Case("update-branch refused for a conflict: conflict, offering the turn that resolves "
         "it; the files are git's to name, and without a mirror to ask none are guessed",
         behind_by=1,
         script={("PUT", UPDATE): refusal(422, "merge conflict between base and head")},
         github={"files": [{"filename": "calc.py"}, {"filename": "docs.md"}],
                 "base_files": [{"filename": "calc.py"}]},
         ends=LandState.CONFLICT,
         reason="conflicts with main in files git did not name; hangar does not resolve "
                "conflicts silently: comment `/hangar resolve`",
         puts=[(UPDATE, {"expected_head_sha": HEAD})]),
    Case("update-branch refused because a workflow changed: failed, saying which permission",
         behind_by=1, script={("PUT", UPDATE): refusal(
             403, "refusing to allow a GitHub App to create or update workflow "
                  "`.github/workflows/ci.yml` without `workflows` permission")},
         ends=LandState.FAILED, reason="`workflows: write`",
         puts=[(UPDATE, {"expected_head_sha": HEAD})]),
    Case("a required check failed: ci_failed naming it, and no merge",
         checks=[check("ci / test", "failure"), GREEN[1]],
         ends=LandState.CI_FAILED, reason="failed on `aaaaaaa`: ci / test"),
    Case("a required check still running: waiting for it, and no merge",
         checks=[check("ci / test", None), GREEN[1]],
         ends=LandState.WAITING_CI, reason="waiting for ci / test"),
    Case("another App's `hangar / verify` is no pass of hangar's own",
         checks=[GREEN[0], check("hangar / verify", "success")],
         ends=LandState.WAITING_CI, reason="waiting for hangar / verify"),
    Case("checks passed, then hangar's verification failed on the same head before the "
         "approval came: ci_failed, and no merge",
         state=LandState.AWAITING_APPROVAL,
         checks=[GREEN[0], check("hangar / verify", "failure", app_id=OWN_APP, run_id=501)],
         ends=LandState.CI_FAILED, reason="hangar / verify"),
    Case("checks passed, then a required check was run again and is still running: "
         "waiting for it, and no merge",
         state=LandState.AWAITING_APPROVAL, checks=[check("ci / test", None), GREEN[1]],
         ends=LandState.WAITING_CI, reason="waiting for ci / test"),
    Case("another App's look-alike `Hangar / Verify` is no pass of hangar's own either",
         checks=[GREEN[0], check("Hangar / Verify", "success")],
         ends=LandState.WAITING_CI, reason="waiting for hangar / verify"),
    Case("no approval: nothing moves",
         reviews=[], ends=LandState.QUEUED, reason="waiting for 1 approval(s) of `aaaaaaa`"),
    Case("an approval of an older head does not count, and hangar says why once",
         reviews=[{**APPROVED[0], "commit_id": OLD}],
         ends=LandState.QUEUED, reason="waiting for 1 approval(s) of `aaaaaaa`",
         comment="does not count for landing: @rita approved `ddddddd`, but the head is now"),
    Case("the requester's own approval does not count",
         reviews=[{**APPROVED[0], "user": {"login": "mona", "type": "User"}}],
         ends=LandState.QUEUED, reason="other than @mona", comment="asked for this work"),
    Case("hangar's App may bypass the ruleset: rejected, not merged around it",
         rulesets={11: {**GATE[11], "current_user_can_bypass": "always"}},
         ends=LandState.REJECTED, reason="bypass actor of ruleset 'main'"),
    Case("merge refused by a rule hangar's reading missed: it waits with GitHub's words, "
         "asking again only when something changes",
         script={("PUT", MERGE): refusal(
             405, "Repository rule violations found\n\nA conversation must be resolved")},
         ends=LandState.AWAITING_APPROVAL,
         reason="GitHub refused the merge: Repository rule violations found: A conversation",
         puts=[(MERGE, SQUASH)]),
    Case("GitHub still computes mergeability (405 not mergeable): read the PR, ask again",
         script={("PUT", MERGE): [*refusal(405, "Pull Request is not mergeable"),
                                  (200, {"sha": MERGED})]},
         puts=[(MERGE, SQUASH), (MERGE, SQUASH)]),
    Case("a ruleset asks for 2 approvals, 1 given: it waits, and no merge",
         rules=[*REQUIRED, {"type": "pull_request", "ruleset_id": 11, "parameters": {
             "required_approving_review_count": 2, "dismiss_stale_reviews_on_push": True,
             "require_code_owner_review": False, "require_last_push_approval": False,
             "required_review_thread_resolution": False}}],
         ends=LandState.AWAITING_APPROVAL, reason="waiting for 1 approval(s) of `aaaaaaa`"),
    Case("code owners' review required: waits for one of `src/auth/`'s owners, no merge",
         state=LandState.AWAITING_APPROVAL,
         rules=[*REQUIRED, {"type": "pull_request", "ruleset_id": 11, "parameters": {
             "required_approving_review_count": 1, "dismiss_stale_reviews_on_push": True,
             "require_code_owner_review": True, "require_last_push_approval": False,
             "required_review_thread_resolution": False}}],
         github={"contents": {".github/CODEOWNERS": "* @rita\n/src/auth/ @alice @acme/sec\n"},
                 "files": [{"filename": "src/auth/login.py"}, {"filename": "README.md"}]},
         ends=LandState.AWAITING_APPROVAL,
         reason="1 more approval from a code owner of `/src/auth/` (@alice or @acme/sec)"),
    Case("conversations must be resolved and one is not: it waits, no merge",
         state=LandState.AWAITING_APPROVAL,
         rules=[*REQUIRED, {"type": "pull_request", "ruleset_id": 11, "parameters": {
             "required_approving_review_count": 1, "dismiss_stale_reviews_on_push": True,
             "require_code_owner_review": False, "require_last_push_approval": False,
             "required_review_thread_resolution": True}}],
         github={"threads": [{"isResolved": True}, {"isResolved": False}]},
         ends=LandState.AWAITING_APPROVAL, reason="1 unresolved conversation(s)"),
    Case("a check bound to the CI App is not met by a person's commit status of that name",
         rules=[{"type": "required_status_checks", "ruleset_id": 11, "parameters": {
             "required_status_checks": [{"context": "ci / test", "integration_id": 2}],
             "strict_required_status_checks_policy": False}}],
         checks=[GREEN[1]],
         github={"statuses": [{"context": "ci / test", "state": "success",
                               "creator": {"login": "eve"}}]},
         ends=LandState.WAITING_CI, reason="waiting for ci / test"),
    Case("linear history asked, squash forbidden by the repository: rebase, never a merge",
         rules=[*REQUIRED, {"type": "required_linear_history", "ruleset_id": 11}],
         github={"repo_settings": {"allow_squash_merge": False}},
         puts=[(MERGE, {"sha": HEAD, "merge_method": "rebase"})]),
    Case("signatures required, only merge commits allowed: hangar cannot, and says which rule",
         rules=[*REQUIRED, {"type": "required_signatures", "ruleset_id": 11}],
         github={"repo_settings": {"allow_squash_merge": False, "allow_rebase_merge": False}},
         ends=LandState.REJECTED, reason="main requires signed commits"),
    Case("only bypass actors may update the branch: hangar cannot, and says which rule",
         rules=[*REQUIRED, {"type": "update", "ruleset_id": 11,
                            "parameters": {"update_allows_fetch_and_merge": False}}],
         ends=LandState.REJECTED, reason="main lets only its bypass actors update"),
    Case("a ruleset's allowed_merge_methods leaves out squash: merged with one it allows",
         rules=[*REQUIRED, {"type": "pull_request", "ruleset_id": 11, "parameters": {
             "required_approving_review_count": 1, "dismiss_stale_reviews_on_push": True,
             "require_code_owner_review": False, "require_last_push_approval": False,
             "required_review_thread_resolution": False, "allowed_merge_methods": ["merge"]}}],
         puts=[(MERGE, {"sha": HEAD, "merge_method": "merge"})]),
    Case("merge refused because the head moved: updating again, no second merge",
         script={("PUT", MERGE): refusal(409, "Head branch was modified. Review and try the "
                                              "merge again.")},
         ends=LandState.UPDATING, reason="the head moved", puts=[(MERGE, SQUASH)]),
    Case("merge refused because the base moved, again and again: asked again after reading "
         "the PR, a bounded number of times, then the step fails and is tried again",
         script={("PUT", MERGE): refusal(405, "Base branch was modified. Review and try the "
                                              "merge again.")},
         ends=LandState.MERGING, raises=landing.BaseMoved, puts=[(MERGE, SQUASH)] * 4),
    Case("squash not allowed by the repository's settings: merged again with one they allow",
         script={("PUT", MERGE): [
             *refusal(405, "Squash merges are not allowed on this repository."),
             (200, {"sha": MERGED})]},
         github={"repo_settings": {"allow_squash_merge": False}},
         puts=[(MERGE, SQUASH), (MERGE, {"sha": HEAD, "merge_method": "merge"})]),
    Case("a rule narrows the methods: the settings are read first, one merge is asked",
         rules=[*REQUIRED, {"type": "required_linear_history", "ruleset_id": 11}],
         github={"repo_settings": {"allow_squash_merge": False}},
         puts=[(MERGE, {"sha": HEAD, "merge_method": "rebase"})]),
    Case("no method allowed that hangar may use: rejected, saying how to set land.method",
         script={("PUT", MERGE): refusal(405, "Squash merges are not allowed on this "
                                              "repository.")},
         github={"repo_settings": {"allow_squash_merge": False, "allow_merge_commit": False,
                                   "allow_rebase_merge": False}},
         ends=LandState.REJECTED, reason="set `land.method`", puts=[(MERGE, SQUASH)]),
    Case("no method the rules and settings leave: rejected before asking, saying why",
         rules=[*REQUIRED, {"type": "required_linear_history", "ruleset_id": 11}],
         github={"repo_settings": {"allow_squash_merge": False,
                                   "allow_rebase_merge": False}},
         ends=LandState.REJECTED, reason="no merge method meets this branch's rules"),
    Case("GitHub answers the merge with its merge queue: the head is enqueued instead",
         script={("PUT", MERGE): refusal(405, "Changes must be made through the merge queue")},
         ends=LandState.MERGING, reason="in main's merge queue (position 1)",
         puts=[(MERGE, SQUASH)]),
    Case("the base's rules require a merge queue: enqueued, never merged through REST",
         rules=[*REQUIRED, {"type": "merge_queue", "ruleset_id": 11, "parameters": {
             "merge_method": "SQUASH"}}],
         ends=LandState.MERGING, reason="in main's merge queue (position 1)"),
    Case("a head in the queue that left it unmerged: said, with the queue's reason",
         state=LandState.MERGING,
         rules=[*REQUIRED, {"type": "merge_queue", "ruleset_id": 11, "parameters": {}}],
         github={"queue_entry": None}, enqueued=HEAD,
         ends=LandState.REJECTED, reason="merge queue of main removed it without merging"),
    Case("the merge would change a workflow: failed, saying which permission",
         script={("PUT", MERGE): refusal(
             403, "refusing to allow a GitHub App to create or update workflow "
                  "`.github/workflows/ci.yml` without `workflows` permission")},
         ends=LandState.FAILED, reason="`workflows: write`", puts=[(MERGE, SQUASH)]),
    Case("merged while hangar was not looking (a crash, a person): landed once, no merge",
         state=LandState.MERGING, github={"merged": True}),
    Case("the PR was closed: cancelled",
         github={"state": "closed"}, ends=LandState.CANCELLED, reason="closed"),
    # A stopped request stays stopped on the next look, approved and green as it may be:
    # only a person (a new approval, a push, `/hangar land`) starts it again.
    *(Case(f"{state.value} stays {state.value} on the next look, and asks GitHub nothing",
           state=state, behind_by=1, ends=state) for state in landing.RESTARTABLE),
]


def rows(engine: Engine, gh: RecordingGitHub, state: LandState,
         verified: bool | None = True) -> LandRequest:
    """A job whose run opened PR #7 and verified its head, and the PR's land request."""
    job = engine.save_job(Job(thread=ISSUE, requested_by="mona", prompt="fix add()",
                              clone_url="x", base_branch="main"))
    engine.save_run(Run(job_id=job.id, branch="hangar/1-abc", base_branch="main",
                        state=RunState.EXITED, stage=RunStage.DONE, outcome="pr",
                        pr_number=PR_NUMBER, head_sha=HEAD,
                        verification=Verification(command="pytest", head_sha=HEAD,
                                                  passed=verified)))
    request = LandRequest(
        id=landing.land_id(REPO, PR_NUMBER), job_id=job.id, repo=REPO, installation_id=1,
        pr_number=PR_NUMBER, base="main", branch="hangar/1-abc", requested_by="mona",
        state=state, head_sha=HEAD,
        reviews=[ReviewRecord(id=r["id"], user=r["user"]["login"], state=r["state"].lower(),
                              commit_id=r["commit_id"]) for r in gh.reviews])
    return landing.save(engine, request)


@pytest.fixture(autouse=True)
def no_merge_retry_pause(monkeypatch):
    """GitHub's transient answers are asked again 1, 2, 4 s apart; here at once."""
    monkeypatch.setattr("app.landing.steps.MERGE_RETRY_S", 0.0)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_land_step(step_engine, case: Case):
    gh = RecordingGitHub(behind_by=case.behind_by, reviews=case.reviews,
                         permissions={"rita": "write", "mona": "write"},
                         check_runs=case.checks, rules=case.rules, rulesets=case.rulesets,
                         script={k: list(v) for k, v in case.script.items()}, **case.github)
    engine = step_engine(gh)
    request = rows(engine, gh, case.state, case.verified)
    if case.enqueued:
        request.enqueued = case.enqueued
        request = landing.save(engine, request)
    if case.raises:
        with pytest.raises(case.raises):
            await landing.advance_land(engine, request.id)
    else:
        await landing.advance_land(engine, request.id)
    after = landing.get(engine, request.id)
    assert after.state == case.ends, after.reason
    if case.reason:
        assert case.reason in (after.reason or ""), after.reason
    assert [(what, {k: body[k] for k in want}) for (what, body), (_, want)
            in zip(gh.puts(), case.puts, strict=False)] == case.puts
    assert len(gh.puts()) == len(case.puts), gh.puts()
    replies = [c["body"] for c in gh.comments.values() if "hangar:reply" in c["body"]]
    if case.comment:
        assert len(replies) == 1 and case.comment in replies[0], replies
    else:
        assert replies == []


async def test_a_landed_request_says_so_on_the_head_and_revokes_the_branch(step_engine):
    gh = RecordingGitHub(reviews=list(APPROVED), permissions={"rita": "write"},
                         check_runs=list(GREEN), rules=list(REQUIRED), rulesets=dict(GATE))
    engine = step_engine(gh)
    request = rows(engine, gh, LandState.QUEUED)
    token = engine.tokens.issue("sandbox-1", repo=REPO, branch="hangar/1-abc",
                                installation_id=1)
    assert engine.tokens.check("sandbox-1", token) is not None
    await landing.advance_land(engine, request.id)
    assert landing.get(engine, request.id).merge_sha == MERGED
    assert gh.land_check()["conclusion"] == "success"
    assert engine.tokens.check("sandbox-1", token) is None  # the agent's push token
    merge = gh.writes("PUT")[0].body
    assert merge["commit_title"] == f"Fix add() (#{PR_NUMBER})"
    assert engine.get_job(request.job_id).state == "done"
    # a second step changes nothing: no second merge, nothing more written
    before = len(gh.writes())
    landing.save(engine, landing.get(engine, request.id).model_copy(update={"due_at": 0}))
    await landing.advance_land(engine, request.id)
    assert len(gh.writes()) == before


async def test_an_update_asked_while_a_review_was_recorded_is_not_asked_for_again(
        step_engine):
    """A review was recorded while GitHub answered the update: the step's copy of the row
    is stale, and the ask goes on the fresh row, so the next pass waits for the new head
    instead of asking GitHub to update the same head again."""
    gh = RecordingGitHub(behind_by=2, reviews=list(APPROVED), permissions={"rita": "write"},
                         check_runs=list(GREEN), rules=list(REQUIRED), rulesets=dict(GATE))
    engine = step_engine(gh)
    request = rows(engine, gh, LandState.QUEUED)
    answer = gh._scripted

    def meanwhile(method: str, path: str):
        if method == "PUT" and path.endswith(UPDATE):  # intake records a comment's review
            now = landing.get(engine, request.id)
            landing.save(engine, now.model_copy(update={"due_at": 0.0}))
        return answer(method, path)

    gh._scripted = meanwhile
    await landing.advance_land(engine, request.id)
    gh._scripted = answer
    asked = landing.get(engine, request.id)
    assert asked.updated_from == HEAD and asked.state == LandState.UPDATING
    landing.save(engine, asked.model_copy(update={"due_at": 0}))
    await landing.advance_land(engine, request.id)
    assert [what for what, _ in gh.puts()] == [UPDATE]  # asked once


async def test_why_an_approval_does_not_count_is_said_once(step_engine):
    gh = RecordingGitHub(reviews=[{**APPROVED[0], "commit_id": OLD}],
                         permissions={"rita": "write"}, check_runs=list(GREEN),
                         rules=list(REQUIRED), rulesets=dict(GATE))
    engine = step_engine(gh)
    request = rows(engine, gh, LandState.QUEUED)
    for _ in range(3):
        landing.save(engine, landing.get(engine, request.id).model_copy(update={"due_at": 0}))
        await landing.advance_land(engine, request.id)
    replies = [c for c in gh.comments.values() if "hangar:reply" in c["body"]]
    assert len(replies) == 1 and "does not count for landing" in replies[0]["body"]
    said = [c for c in gh.writes() if "hangar:reply" in str(c.body)]
    assert len(said) == 1, said  # not edited again on every look either
    assert gh.puts() == []


async def test_an_approval_given_before_the_base_was_changed_does_not_land_it(step_engine):
    """Retargeted after the approval: rita approved merging into main, not into release.
    hangar lands into the base GitHub has now, checked against that base, and only on an
    approval given after the change."""
    gh = RecordingGitHub(reviews=list(APPROVED), permissions={"rita": "write"},
                         check_runs=list(GREEN), rules=list(REQUIRED), rulesets=dict(GATE),
                         base_ref="release")
    engine = step_engine(gh)
    request = rows(engine, gh, LandState.AWAITING_APPROVAL)
    await landing.advance_land(engine, request.id)
    after = landing.get(engine, request.id)
    assert gh.puts() == []
    assert after.base == "release"
    assert after.state == LandState.QUEUED, after.reason
    compares = [c.path for c in gh.calls if "/compare/" in c.path]
    assert compares and all("/compare/release..." in p for p in compares), compares
    said = [c["body"] for c in gh.comments.values() if "hangar:reply" in c["body"]]
    assert len(said) == 1 and "base" in said[0], said


async def test_an_approval_of_a_push_whose_pusher_github_has_not_named_yet_waits(step_engine):
    """Webhook disorder: rita pushes a commit made to look like the agent's (no GitHub
    account behind its author or committer) and approves it before GitHub's push event
    names her. Her approval must not land it; once the event names her it never counts,
    and someone else's approval of her push does."""
    from app import autofix

    pushed = "e" * 40
    gh = RecordingGitHub(head=pushed, reviews=[{**APPROVED[0], "commit_id": pushed}],
                         permissions={"rita": "write", "sam": "write"},
                         check_runs=[check("ci / test", "success", head_sha=pushed),
                                     check("hangar / verify", "success", app_id=OWN_APP,
                                           run_id=501, head_sha=pushed)],
                         rules=list(REQUIRED), rulesets=dict(GATE))
    engine = step_engine(gh)
    request = rows(engine, gh, LandState.QUEUED)
    # hangar verified the pushed head ("Verify again"): that says nothing of who pushed it
    engine.save_run(Run(job_id=request.job_id, kind="verify", branch="hangar/1-abc",
                        base_branch="main", state=RunState.EXITED, stage=RunStage.DONE,
                        pr_number=PR_NUMBER, head_sha=pushed,
                        verification=Verification(command="pytest", head_sha=pushed,
                                                  passed=True)))

    async def look() -> LandRequest:
        landing.save(engine, landing.get(engine, request.id).model_copy(update={"due_at": 0}))
        await landing.advance_land(engine, request.id)
        return landing.get(engine, request.id)

    after = await look()
    assert gh.puts() == [] and after.state == LandState.QUEUED, after.reason
    # GitHub's synchronize event arrives: rita pushed it
    job = engine.get_job(request.job_id)
    row = autofix.ensure_row(engine, job, PR_NUMBER)
    autofix.patch(engine, row.id, pushed_heads=[pushed], pushers=["rita"])
    after = await look()
    assert gh.puts() == [] and after.state == LandState.QUEUED, after.reason
    gh.reviews.append({**APPROVED[0], "id": 43, "commit_id": pushed,
                       "user": {"login": "sam", "type": "User"}})
    after = await look()
    assert [what for what, _ in gh.puts()] == [MERGE], after.reason
    assert gh.puts()[0][1]["sha"] == pushed


async def test_a_retargeted_pr_lands_only_on_a_verification_against_its_new_base(step_engine):
    """hangar verified the head with the old base's environment; its `hangar / verify`
    success on the head says nothing of the new base's. A new approval waits for a
    verification against the base the PR now goes into."""
    gh = RecordingGitHub(reviews=list(APPROVED), permissions={"rita": "write"},
                         check_runs=list(GREEN), rules=list(REQUIRED), rulesets=dict(GATE),
                         base_ref="release")
    engine = step_engine(gh)
    request = rows(engine, gh, LandState.AWAITING_APPROVAL)

    async def look() -> LandRequest:
        landing.save(engine, landing.get(engine, request.id).model_copy(update={"due_at": 0}))
        await landing.advance_land(engine, request.id)
        return landing.get(engine, request.id)

    await look()
    gh.reviews.append({**APPROVED[0], "id": 42})
    after = await look()
    assert gh.puts() == [], after.reason
    assert after.state == LandState.WAITING_CI, after.reason
    assert "hangar / verify" in (after.reason or ""), after.reason
    asked = [r for r in engine.runs_of(request.job_id) if r.kind == "verify"]
    assert [r.base_branch for r in asked] == ["release"]
    # the verification against release ran and passed on the head
    engine.patch_run(asked[0].id, state=RunState.EXITED, stage=RunStage.DONE, head_sha=HEAD,
                     verification=Verification(command="make check", head_sha=HEAD,
                                               passed=True))
    after = await look()
    assert [what for what, _ in gh.puts()] == [MERGE], after.reason
