"""The land state machine's steps, with GitHub's I/O: each reads the PR, its reviews, checks
and rules afresh and moves the row one step (update, wait for CI, await approval, merge),
then shows where it stands in check run `hangar / land` and the status comment."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

from gidgethub import BadRequest, GitHubException

from app import render, runs
from app.commands import request_verification
from app.creates import Creating, Plan
from app.engine import PrNotes
from app.github import ci
from app.github.client import get_or_none
from app.github.ops import PAGE, read_ci
from app.landing import mirror, overlaps, worker
from app.landing.gate import (
    CODEOWNERS_PATHS,
    Facts,
    Gate,
    blockers,
    branch_gate,
    missing_for_merge,
    not_counted_sources,
    pick_method,
    required_names,
    required_results,
    team_owners,
    usable_methods,
)
from app.landing.rows import (
    FINAL,
    IN_FLIGHT,
    RESTARTABLE,
    LandRequest,
    LandState,
    ReviewRecord,
    RowChanged,
    fresh,
    get,
    head_of,
    land_id,
    move,
    save,
    set_reason,
)
from app.landing.rules import (
    LAND_CHECK,
    MAX_PR_COMMITS,
    MERGE_METHODS,
    UPDATE_PATIENCE_S,
    VERIFY_CHECK,
    AutoLandOut,
    LandReason,
    NotCounted,
    approval_refusal,
    approvals_needed,
    approvals_wanted,
    asked_update,
    auto_land_verdict,
    auto_rule,
    bypassing_rulesets,
    changed_lines,
    closing_references,
    compare_makers,
    expired,
    expires_at,
    file_list_shortfall,
    freeze,
    gate_report,
    land_check_status,
    merge_answer,
    one_line,
    policy_in_force,
    too_large,
    update_refused,
    verification_outcome,
)
from app.models import AutofixRow, JobState, RunKind, Verification, autofix_row_id
from app.pauses import pause
from app.render import landing as words
from app.render import reply_marker
from app.render.reasons import Why
from app.repoconfig import LandPolicy, parse_repo_config
from app.sensitive import COMPARE_FILES, sensitive_names

if TYPE_CHECKING:
    from app.github.ops import RepoOps
    from app.landing.context import LandingContext


log = logging.getLogger(__name__)


def give_up(engine: LandingContext, request_id: str, reason: str) -> None:
    """The step failed again and again: stop, and say so (a person can start it again)."""
    request = get(engine, request_id)
    if request is None or not request.active or request.state == LandState.FAILED:
        return
    if request.state in FINAL:  # only its showing failed, again and again: it stays ended
        request.end_unshown = False
        save(engine, request)
        return
    engine.note(request.job_id, f"land #{request.pr_number} stopped: {reason}")
    move(engine, request, LandState.FAILED, Why(LandReason.GAVE_UP, error=reason))


async def advance_land(engine: LandingContext, request_id: str) -> None:
    request = get(engine, request_id)
    if request is None or not request.active or request.due_at > time.time():
        return
    # Take the wake now: an event during the step sets due_at to 0 again and is not lost.
    request.due_at = time.time() + engine.settings.poll_interval_seconds
    save(engine, request)
    try:
        await land_step(engine, request)
    except RowChanged:
        pass
    finally:
        # Another replica's intake may write meanwhile: its wake is sooner than any due.
        with contextlib.suppress(RowChanged):
            reschedule(engine, request_id)


def reschedule(engine: LandingContext, request_id: str) -> None:
    """After a step: when the request is looked at next, if sooner than its step said."""
    request = get(engine, request_id)
    if (request is not None and request.active
            and request.state in (LandState.UPDATING, LandState.MERGING)
            and request.enqueued != request.head_sha):  # in a queue: its events wake it
        # GitHub is mid-change: look again when it has moved the head (its push wakes
        # the row) or patience runs out; else at once (after a failure, its backoff).
        due = request.updated_at_ask + UPDATE_PATIENCE_S if asked_update(request) else 0
        if request.due_at > due:
            request.due_at = due
            save(engine, request)
    if request is not None and request.active and request.policy is not None:
        # An approved request is looked at when its approval would expire.
        at = expires_at(request, LandPolicy.model_validate(request.policy))
        if at is not None and request.due_at > at:
            request.due_at = at
            save(engine, request)


# Reasons a request waits on for a person: the slow poll only reads the reviews then.
WAITING_FOR_PEOPLE = (LandReason.APPROVALS_WANTED, LandReason.GATE_WAITS,
                      LandReason.MERGE_REFUSED_WAITS, LandReason.SENSITIVE, LandReason.LARGE,
                      LandReason.AUTO_LAND_REFUSED, LandReason.FROZEN_OPERATOR)


async def land_step(engine: LandingContext, request: LandRequest) -> None:
    job = engine.existing_job(request.job_id)
    ops = await engine.github.repo_ops(job.thread)
    if request.state in FINAL:  # ended; the step that ended it failed to show it
        return await show(engine, ops, request)
    if request.policy is not None and expired(
            request, LandPolicy.model_validate(request.policy), time.time()):
        return await expire(engine, ops, request)
    if request.quiet and await auto_land_off(engine, ops, request):
        return  # nobody asked, and auto-land is off: nothing to look at until an event
    if await quiet_look(engine, ops, request):
        return
    pr = await ops.get_pr(request.pr_number)
    if pr.get("merged"):
        return await landed(engine, ops, request, pr.get("merge_commit_sha"))
    if pr.get("state") == "closed":
        move(engine, request, LandState.CANCELLED, Why(LandReason.PR_CLOSED))
        return await show(engine, ops, request)
    head = pr["head"]["sha"]
    if head != request.head_sha:
        await head_changed(engine, ops, request, head)
    if pr["base"]["ref"] != request.base:
        await base_changed(engine, ops, request, pr["base"]["ref"])
    # Head against the base as it is now (its ETag makes it free while neither moves): what
    # the base holds, the PR's commits and files, read once for the whole step.
    compare = await ops.compare(request.base, head)
    config, problems = parse_repo_config(
        await engine.github.config_text(ops, request.base, compare.get("base_sha")))
    if problems != request.problems:
        request.problems = problems
        save(engine, request)
    policy = policy_in_force(request, config.land)
    await sync_reviews(engine, ops, request)
    verdicts = await review_verdicts(engine, ops, request, policy, compare)
    approved = [r for r, why in verdicts if why is None]
    await explain_reviews(engine, ops, request, verdicts)
    if request.state in RESTARTABLE:
        return await show(engine, ops, request)
    if request.state == LandState.QUEUED and not (
            request.wished or approved or request.auto_head == head):
        if not policy.auto_land.enabled:
            if request.quiet:
                return None
            set_reason(request, approvals_wanted(request, policy, 0))
            save(engine, request)
            return await show(engine, ops, request)
        if not await auto_land(engine, ops, request, policy, pr, compare):
            return await show(engine, ops, request) if not request.quiet else None
    made(engine, request, policy, approved)
    if pr.get("draft"):  # marked ready once its verification passes
        verified = ensure_verified(engine, request)
        if verified is not None and not verified.passed and policy.require_verification:
            # it failed, or could not run: that, not the draft, is what holds it (read as
            # the merge would read it, with others' checks under hangar's names set aside)
            await wait_for_ci(engine, ops, request, policy)
            if request.state == LandState.CI_FAILED:
                return await show(engine, ops, request)
        set_reason(request, Why(LandReason.DRAFT, head=head))
        save(engine, request)
        return await show(engine, ops, request)
    # Every rule that applies to the base (all pages), and its classic protection.
    gate, rulesets = await base_gate(engine, ops, request.base)
    policy = policy.model_copy(update={
        "required_approvals": max(policy.required_approvals, gate.approvals)})
    bypass = bypassing_rulesets(rulesets, engine.settings.app_id)
    if bypass:  # GitHub would not hold hangar to the ruleset: it is no gate
        move(engine, request, LandState.REJECTED, Why(LandReason.BYPASS_ACTOR,
                                                      ruleset=bypass[0]))
        return await show(engine, ops, request)
    queue = gate.merge_queue is not None  # GitHub's queue orders the merges, not the lane
    if request.state == LandState.QUEUED:
        if not queue and lane_taken(engine, request):
            return await show(engine, ops, request)
        move(engine, request, LandState.UPDATING, None)
    if request.state == LandState.UPDATING:
        if queue:  # the queue merges it onto the base as the base is then
            move(engine, request, LandState.WAITING_CI, None)
        else:
            await update(engine, ops, request, compare, policy)
    have = len(approved) + (request.auto_head == request.head_sha)
    if request.state == LandState.WAITING_CI or (
            request.state == LandState.AWAITING_APPROVAL
            and have >= policy.required_approvals):
        # What passed while it waited for a person may have failed since (a re-run, a
        # "Verify again"): read once more in the step that would merge.
        await wait_for_ci(engine, ops, request, policy, gate)
    if request.state == LandState.AWAITING_APPROVAL:
        await await_approval(engine, ops, request, policy, approved, compare, gate=gate,
                             pr=pr)
    if request.state == LandState.MERGING:
        await merge_shown_if_slow(engine, ops, request, policy, gate, rulesets)
    await show(engine, ops, request)


async def auto_land_off(engine: LandingContext, ops: RepoOps, request: LandRequest) -> bool:
    """A quiet row (a verified PR nobody asked to land): True, and parked until an event,
    when the base's policy has auto-land off. One read of the (cached) policy file."""
    config, _ = parse_repo_config(await engine.github.config_text(ops, request.base))
    if config.land.auto_land.enabled:
        return False
    request.due_at = time.time() + engine.settings.idle_pr_look_seconds
    save(engine, request)
    return True


def made(engine: LandingContext, request: LandRequest, policy: LandPolicy,
         approved: list[ReviewRecord]) -> None:
    """The request is made (asked for, approved, or approved by auto-land): the policy in
    force now is kept with it; its approvals' time is kept for their expiry."""
    have = bool(approved) or request.auto_head == request.head_sha
    changed = False
    if request.policy is None:
        request.policy = policy.model_dump(mode="json")
        changed = True
    if request.quiet:
        request.quiet = False
        changed = True
    if have and request.approved_at is None:
        request.approved_at = time.time()
        changed = True
    elif not have and request.approved_at is not None:
        request.approved_at = None  # the approvals lapsed (a new head): none to expire
        changed = True
    if changed:
        save(engine, request)


async def auto_land(engine: LandingContext, ops: RepoOps, request: LandRequest,
                    policy: LandPolicy, pr: dict, compare: dict) -> bool:
    """Auto-land's look at a head nobody approved: True when its rule approves it (the
    approval is recorded as the policy's, with the rule's text); else False, the reason
    set when auto-land does not apply (and nothing said while it waits for the head's
    verification or checks to finish)."""
    head = pr["head"]["sha"]
    files = compare.get("files") or []
    complete = bool(compare.get("base_sha")) and len(files) < COMPARE_FILES
    verified = ensure_verified(engine, request)
    check_runs, statuses = await read_ci(ops, head)
    checks = ci.ci_summary(ci.read(check_runs, statuses, own_app_id=engine.settings.app_id))
    why = auto_land_verdict(
        policy, files=files, complete=complete, lines=changed_lines(pr),
        verified=bool(verified and verified.passed), checks_passed=checks in ("passed", "none"))
    if why is not None:
        waiting = ((why.code == AutoLandOut.NOT_VERIFIED and verified is None)
                   or (why.code == AutoLandOut.CHECKS and checks == "pending"))
        if waiting:  # its end wakes the request: only then is there something to say
            if request.quiet:
                request.due_at = time.time() + engine.settings.idle_pr_look_seconds
                save(engine, request)
            return False
        other_than = request.requested_by if policy.forbid_self_approval else None
        set_reason(request, Why(LandReason.AUTO_LAND_REFUSED, why=why, head=head,
                                other_than=other_than))
        request.quiet = False
        save(engine, request)
        return False
    request.auto_head, request.auto_rule = head, auto_rule(policy)
    move(engine, request, request.state, Why(LandReason.AUTO_LAND, head=head,
                                              rule=request.auto_rule))
    return True


async def expire(engine: LandingContext, ops: RepoOps, request: LandRequest) -> None:
    """Approved, not landed within land.approval_ttl_minutes: the request ends expired,
    its approvals spent; the PR stays open and a new approval starts it again."""
    policy = LandPolicy.model_validate(request.policy or {})
    request.expired_reviews = sorted({*request.expired_reviews, *(
        r.id for r in request.reviews if r.state == "approved")})
    request.auto_head, request.approved_at = None, None
    move(engine, request, LandState.EXPIRED, Why(
        LandReason.EXPIRED, minutes=policy.approval_ttl_minutes, head=request.head_sha))
    await show(engine, ops, request)


async def head_changed(engine: LandingContext, ops: RepoOps, request: LandRequest,
                       head: str) -> None:
    """The PR has a new head: hangar's own update of the old one (kept, so an approval of
    the old head may carry over when the policy says so), or anyone's push, which is
    checked again from the start."""
    moved_from = request.head_sha
    if (moved_from and request.state == LandState.UPDATING
            and request.updated_from == moved_from and head not in request.updated_heads
            and await is_clean_update(engine, request, head, moved_from)):
        request.updated_heads = {**dict(list(request.updated_heads.items())[-9:]),
                                 head: moved_from}
    request.head_sha = head
    request.ci_since = None
    save(engine, request)
    if moved_from and request.state in (LandState.WAITING_CI, LandState.AWAITING_APPROVAL,
                                        LandState.MERGING):
        move(engine, request, LandState.QUEUED, Why(LandReason.HEAD_MOVED_TO, head=head))


async def is_clean_update(engine: LandingContext, request: LandRequest, head: str,
                          old: str) -> bool:
    """Whether `head` is GitHub's clean merge of the base into `old` and nothing else
    (read from hangar's mirror; only when the policy lets approvals survive one)."""
    policy = LandPolicy.model_validate(request.policy) if request.policy else None
    if policy is None or not policy.approval_survives_clean_update:
        return False
    job = engine.existing_job(request.job_id)
    try:
        path = await mirror.fetched(engine, repo=request.repo, clone_url=job.clone_url,
                                    installation_id=request.installation_id,
                                    refs=[request.base, request.branch])
        return await mirror.clean_update_of(path, head, old, f"refs/heads/{request.base}")
    except Exception:  # an approval that cannot be shown to carry over does not
        log.warning("could not read the update from the mirror", exc_info=True,
                    extra={"land": request.id})
        return False


async def quiet_look(engine: LandingContext, ops: RepoOps, request: LandRequest) -> bool:
    """A look of the slow poll at a request that waits for a person: read only the reviews
    (an approval whose webhook was missed); True when nothing else is to be done. Events
    (a push, a close, a check, a review, a command) make the next look a full one, and a
    missed one comes back through the redelivery catch-up; a full look comes at least
    every `idle_pr_look_seconds` (6 hours)."""
    waiting = (request.state in (LandState.QUEUED, LandState.AWAITING_APPROVAL)
               and request.reason_code in WAITING_FOR_PEOPLE
               # the operator's freeze ends with a restart: look at once then
               and not (request.reason_code == LandReason.FROZEN_OPERATOR
                        and engine.settings.land))
    if (request.woken or not waiting
            or time.time() - request.looked_at > engine.settings.idle_pr_look_seconds):
        request.woken, request.looked_at = False, time.time()
        save(engine, request)
        return False
    known = [(r.id, r.dismissed) for r in request.reviews]
    await sync_reviews(engine, ops, request)
    if [(r.id, r.dismissed) for r in request.reviews] != known:
        request.looked_at = time.time()
        save(engine, request)
        return False
    return True


async def base_changed(
    engine: LandingContext, ops: RepoOps, request: LandRequest, base: str
) -> None:
    """The PR was retargeted: it lands into the base GitHub has now, checked against it,
    and an approval (or acknowledgement) given for the old base says nothing about the new
    one. Every review GitHub lists now is older than this look, so it lapses."""
    await sync_reviews(engine, ops, request)
    old = request.base
    for review in request.reviews:
        if review.before_base is None:
            review.before_base = old
    request.base, request.ack_sensitive_sha, request.ci_since = base, None, None
    save(engine, request)
    if request.state not in RESTARTABLE:
        move(engine, request, LandState.QUEUED, Why(LandReason.BASE_CHANGED, old=old, new=base))


async def sync_reviews(engine: LandingContext, ops: RepoOps, request: LandRequest) -> None:
    """Read the PR's reviews from GitHub: a review whose webhook was missed (hangar was
    down, a delivery failed) still counts, and a dismissal is seen."""
    changed = False
    known = {r.id: r for r in request.reviews}
    url = f"{ops.base}/pulls/{request.pr_number}/reviews?per_page=100"
    async for review in ops.gh.getiter(url):
        state = (review.get("state") or "").lower()
        existing = known.get(review["id"])
        if existing is not None:
            if state == "dismissed" and not existing.dismissed:
                existing.dismissed = changed = True
            continue
        user = review.get("user") or {}
        request.reviews.append(ReviewRecord(
            id=review["id"], user=user.get("login", ""), user_type=user.get("type", "User"),
            state=state, commit_id=review.get("commit_id"), dismissed=state == "dismissed"))
        changed = True
    if changed:
        save(engine, request)


def lane_taken(engine: LandingContext, request: LandRequest) -> bool:
    """Whether another request on this repo and base is updating, waiting for CI or
    merging; if so, say so on this one. (No await: the check and the move are one.)"""
    busy = [r for r in engine.store.all("land", LandRequest, active=True)
            if r.id != request.id and r.repo == request.repo and r.base == request.base
            and r.state in IN_FLIGHT
            and r.enqueued != r.head_sha]  # GitHub's merge queue orders those it holds
    if busy:
        set_reason(request, Why(LandReason.LANE_TAKEN, pr=busy[0].pr_number))
        save(engine, request)
    return bool(busy)


async def review_verdicts(
    engine: LandingContext, ops: RepoOps, request: LandRequest, policy: LandPolicy,
    compare: dict | None = None,
) -> list[tuple[ReviewRecord, Why | str | None]]:
    latest: dict[str, ReviewRecord] = {}
    # A person's latest review is their word (GitHub's review ids grow with time).
    for review in sorted(request.reviews, key=lambda r: r.id):
        if review.state in ("approved", "changes_requested", "dismissed"):
            latest[review.user] = review
    verdicts: list[tuple[ReviewRecord, Why | str | None]] = []
    approvals = [r for r in latest.values() if r.state == "approved"]
    if not approvals:
        return verdicts
    made = await who_made(engine, ops, request, compare)
    carried = carried_from(request) if policy.approval_survives_clean_update else []
    for review in approvals:
        is_bot = review.user_type == "Bot" or review.user.endswith("[bot]")
        permission = "none" if is_bot else await engine.github.permission(ops, review.user)
        verdicts.append((review, approval_refusal(
            review, head_sha=request.head_sha, requester=request.requested_by,
            permission=permission, policy=policy, carried_from=carried,
            expired=request.expired_reviews, **made)))
    return verdicts


def carried_from(request: LandRequest) -> list[str]:
    """The heads hangar's clean updates made the head from, newest first."""
    heads: list[str] = []
    head = request.head_sha
    while head in request.updated_heads and len(heads) < len(request.updated_heads):
        head = request.updated_heads[head]
        heads.append(head)
    return heads


async def who_made(engine: LandingContext, ops: RepoOps, request: LandRequest,
                   compare: dict | None = None) -> dict[str, Any]:
    """approval_verdict's askers, makers and makers_unknown for this PR, read now
    (`compare`: the base against the PR's head, read in this step)."""
    askers = {r.requested_by for r in engine.runs_of(request.job_id)
              if r.pr_number == request.pr_number and r.requested_by not in (None, "hangar")}
    makers, unknown = await read_commit_makers(ops, request, compare)
    return {"askers": askers, "makers": {*pushers(engine, request), *makers},
            "makers_unknown": unknown or pusher_unknown(engine, request)}


def status_notes(engine: LandingContext, repo: str, pr_number: int) -> PrNotes:
    """What landing says about a PR in its job's status comment, and whether it landed."""
    request = engine.store.get("land", land_id(repo, pr_number), LandRequest)
    notes = [words.overlap_note(pr_number, w["pr"], w["files"], w.get("conflicts"))
             for w in overlaps.warnings_for(engine, repo, pr_number)]
    if request is None or request.quiet:
        return PrNotes(tuple(notes))
    notes = [*words.land_notes(request), *notes]
    if request.impostors:
        notes.append(render.impostors_note(request.impostors))
    return PrNotes(tuple(notes), landed=request.state == LandState.LANDED)


def pushers(engine: LandingContext, request: LandRequest) -> list[str]:
    """People GitHub named as pushers to the branch (hangar's own pushes are its bot's)."""
    row = engine.store.get("autofix", autofix_row_id(request.repo, request.pr_number),
                           AutofixRow)
    return row.pushers if row else []


def pusher_unknown(engine: LandingContext, request: LandRequest) -> Why | None:
    """Why the head's pusher is not known yet, or None: hangar's agent pushed it, or
    GitHub's push event (synchronize) named who did. A commit's author and committer can
    be anyone's; only the event names the pusher, and it may come after an approval."""
    head = request.head_sha
    if head is None:
        return None
    row = engine.store.get("autofix", autofix_row_id(request.repo, request.pr_number),
                           AutofixRow)
    if row is not None and head in row.pushed_heads:
        return None
    # A verification's head is whatever the branch held: it says nothing of who pushed.
    if any(r.head_sha == head for r in engine.runs_of(request.job_id)
           if r.pr_number == request.pr_number and r.kind != RunKind.VERIFY):
        return None
    return Why(NotCounted.PUSHER_UNKNOWN, head=head)


async def closing_commits(ops: RepoOps, request: LandRequest) -> list[tuple[str, str]]:
    """(sha, closing words) for each commit on the PR whose message would close an issue."""
    found = []
    async for commit in ops.gh.getiter(
            f"{ops.base}/pulls/{request.pr_number}/commits?per_page=100"):
        said = closing_references((commit.get("commit") or {}).get("message") or "")
        if said:
            found.append((commit["sha"], said[0]))
    return found


async def commit_makers(ops: RepoOps, request: LandRequest,
                        compare: dict | None = None) -> tuple[set[str], str | None]:
    """read_commit_makers, with why not all are known worded."""
    people, unknown = await read_commit_makers(ops, request, compare)
    return people, words.not_counted(unknown)


async def read_commit_makers(ops: RepoOps, request: LandRequest,
                             compare: dict | None = None) -> tuple[set[str], Why | None]:
    """The people GitHub links as author or committer of a commit on the PR (hangar's
    agent commits as `agent@hangar.invalid`, which is nobody's), and why not all are
    known when the PR has more commits than GitHub lists."""
    known = compare_makers(compare)
    if known is not None:
        return known, None
    people: set[str] = set()
    count = 0
    async for commit in ops.gh.getiter(
            f"{ops.base}/pulls/{request.pr_number}/commits?per_page=100"):
        count += 1
        for role in ("author", "committer"):
            user = commit.get(role) or {}
            if user.get("login") and user.get("type") != "Bot":
                people.add(user["login"])
    if count >= MAX_PR_COMMITS:
        return people, Why(NotCounted.MAKERS_UNKNOWN, limit=MAX_PR_COMMITS)
    return people, None


async def explain_reviews(
    engine: LandingContext, ops: RepoOps, request: LandRequest,
    verdicts: list[tuple[ReviewRecord, Why | str | None]],
) -> None:
    """Say once, per review, why an approval does not count."""

    for review, why in verdicts:
        if why is None or review.id in request.explained:
            continue
        if isinstance(why, Why) and why.code == NotCounted.PUSHER_UNKNOWN:
            continue  # the push event comes within seconds: not said in a lasting reply
        marker = reply_marker(f"review-{review.id}")
        await ops.upsert_comment(request.pr_number, marker, words.review_not_counted(marker, why))
        request.explained.append(review.id)
        try:
            save(engine, request)
        except RowChanged:
            # Said: recorded on the fresh row all the same (else the next step would look
            # for the reply and write it again), and this step ends.
            fresh(record_explained, engine, request.id, review.id)
            raise


def record_explained(engine: LandingContext, request_id: str, review_id: int) -> None:
    request = get(engine, request_id)
    if request is not None and review_id not in request.explained:
        request.explained.append(review_id)
        save(engine, request)


async def update(engine: LandingContext, ops: RepoOps, request: LandRequest, compare: dict,
                 policy: LandPolicy | None = None) -> None:
    """Bring the branch up to date with the base (`compare`: base against head, now): a
    merge of the base by GitHub's update-branch, or (land.update: rebase) a rebase in the
    land worker's sandbox."""
    if compare["behind_by"] == 0:
        request.updated_from = None
        return move(engine, request, LandState.WAITING_CI, None)
    if asked_update(request):
        set_reason(request, Why(LandReason.UPDATE_PENDING))
        save(engine, request)
        return None
    if policy is not None and policy.update == "rebase":
        return await rebase(engine, ops, request)
    try:
        await ops.gh.put(f"{ops.base}/pulls/{request.pr_number}/update-branch",
                         data={"expected_head_sha": request.head_sha})
    except BadRequest as exc:
        status = int(exc.status_code)
        if status in (403, 404):  # a refusal that asking again will not change
            return move(engine, request, LandState.FAILED, update_refused(request, str(exc)))
        if status != 422:
            raise  # not GitHub's word on the branch: the step is tried again, backing off
        if await head_moved(ops, request):
            return None  # the next pass sees the new head
        files = await conflicting_files(engine, request)
        request.conflicts = files
        return move(engine, request, LandState.CONFLICT,
                    Why(LandReason.CONFLICT, base=request.base, files=files))
    # The update makes a new head: earlier approvals lapse, verification runs again on it.
    request.updated_from, request.updated_at_ask = request.head_sha, time.time()
    try:
        save(engine, request)
    except RowChanged:
        # A review or an event was recorded while GitHub answered: the ask goes on the
        # fresh row (else the next pass would ask GitHub again), and this pass ends.
        fresh(record_update_ask, engine, request.id, request.head_sha, request.updated_at_ask)
        raise
    engine.note(request.job_id, f"land #{request.pr_number}: updating the branch from "
                                f"{request.base}")


def record_update_ask(engine: LandingContext, request_id: str, head: str, at: float) -> None:
    request = get(engine, request_id)
    if request is not None and request.head_sha == head:
        request.updated_from, request.updated_at_ask = head, at
        save(engine, request)


async def rebase(engine: LandingContext, ops: RepoOps, request: LandRequest) -> None:
    """land.update: rebase. The land worker rebases the branch onto the base in a sandbox
    and pushes it with a lease on the head; a clean rebase's head is hangar's update."""
    job = engine.existing_job(request.job_id)
    old = head_of(request)
    engine.note(request.job_id, f"land #{request.pr_number}: rebasing the branch onto "
                                f"{request.base}")
    outcome = await worker.rebase(engine, ops, request, job.clone_url)
    # Events may have written the row while the worker ran: what it did goes on the fresh one.
    request = get(engine, request.id) or request
    if request.state != LandState.UPDATING and not isinstance(outcome, worker.Rebased):
        return None  # cancelled or moved on meanwhile: nothing pushed to say
    if isinstance(outcome, worker.Rebased):
        request.updated_from, request.updated_at_ask = old, time.time()
        request.updated_heads = {**dict(list(request.updated_heads.items())[-9:]),
                                 outcome.head: old}
        save(engine, request)
        return engine.note(request.job_id, f"land #{request.pr_number}: rebased onto "
                                           f"{request.base} as {outcome.head[:7]}")
    if isinstance(outcome, worker.HeadMoved):
        return None  # the next pass sees the new head
    if isinstance(outcome, worker.Conflicts):
        request.conflicts = list(outcome.files)
        return move(engine, request, LandState.CONFLICT, Why(
            LandReason.CONFLICT, base=request.base, files=list(outcome.files)))
    return move(engine, request, LandState.FAILED, Why(
        LandReason.REBASE_FAILED, base=request.base, said=outcome.said))


async def head_moved(ops: RepoOps, request: LandRequest) -> bool:
    pr = await ops.get_pr(request.pr_number)
    return pr["head"]["sha"] != request.head_sha


async def conflicting_files(engine: LandingContext, request: LandRequest) -> list[str]:
    """The files in which the PR's head conflicts with its base now, as git's own merge
    (merge-ort, GitHub's) finds them in hangar's mirror: exactly those, not every file
    both sides changed. Empty when git could not be asked (the reason then says so)."""
    job = engine.existing_job(request.job_id)
    try:
        path = await mirror.fetched(engine, repo=request.repo, clone_url=job.clone_url,
                                    installation_id=request.installation_id,
                                    refs=[request.base, request.branch])
        merged = await mirror.merge(path, request.head_sha or "", f"refs/heads/{request.base}")
    except Exception:  # the conflict is GitHub's word; the names are git's, when it answers
        log.warning("could not name the conflicting files", exc_info=True,
                    extra={"land": request.id})
        return []
    return list(merged.conflicts)


async def wait_for_ci(
    engine: LandingContext, ops: RepoOps, request: LandRequest, policy: LandPolicy,
    gate: Gate | None = None,
) -> None:
    """The required checks on the head: each counted only from the sources its rule takes
    (a check bound to an App by `integration_id` only from that App's check run), with
    hangar's own `hangar / verify` and the repository's `land.required_checks`."""
    if gate is None:
        gate, _ = await base_gate(engine, ops, request.base)
    extra = [*policy.required_checks]
    if policy.require_verification:
        extra.append(VERIFY_CHECK)
    required = required_names(gate, extra)
    verified = ensure_verified(engine, request)
    check_runs, statuses = await read_ci(ops, head_of(request))
    results = required_results(gate, extra, check_runs, statuses,
                               own_app_id=engine.settings.app_id)
    if VERIFY_CHECK in required:
        results.outcomes[VERIFY_CHECK] = verification_outcome(
            results.outcomes.get(VERIFY_CHECK), verified)
    set_aside = [*results.impostors, *(words.source_not_taken(*found) for found in
                                       not_counted_sources(gate, check_runs, statuses))]
    if set(set_aside) - set(request.impostors):
        request.impostors = list(dict.fromkeys([*request.impostors, *set_aside]))
        save(engine, request)
    verdict, names = ci.verdict(required, results)
    if verdict == "failed":
        return move(engine, request, LandState.CI_FAILED,
                    Why(LandReason.CHECKS_FAILED, head=request.head_sha, checks=names))
    if verdict == "pending":
        if request.ci_since is None:
            request.ci_since = time.time()
            save(engine, request)
        waited = time.time() - request.ci_since
        if waited > policy.ci_timeout_minutes * 60:
            late = names[0]
            return move(engine, request, LandState.CI_FAILED, Why(
                LandReason.CHECK_LATE, check=late, running=late in results.outcomes,
                head=request.head_sha, minutes=policy.ci_timeout_minutes))
        if request.state == LandState.AWAITING_APPROVAL:  # a check runs again
            return move(engine, request, LandState.WAITING_CI,
                        Why(LandReason.WAITING_FOR_CHECKS, checks=names))
        set_reason(request, Why(LandReason.WAITING_FOR_CHECKS, checks=names))
        save(engine, request)
        return None
    if request.state != LandState.AWAITING_APPROVAL:
        request.ci_since = None  # a later re-run of a check is waited for afresh
        move(engine, request, LandState.AWAITING_APPROVAL, None)


def ensure_verified(engine: LandingContext, request: LandRequest) -> Verification | None:
    """hangar's latest verification of exactly this head with the environment of the base
    it lands into; None while there is none (one is asked for when nothing runs)."""

    runs = [r for r in engine.runs_of(request.job_id) if r.pr_number == request.pr_number]
    # Every turn (auto-fix ones too) verifies its own head on its way to done.
    here = [r for r in runs if r.head_sha == request.head_sha and r.base_branch == request.base]
    done = [r.verification for r in here
            if r.verification is not None and r.verification.head_sha == request.head_sha]
    if done:
        return max(done, key=lambda v: v.at)
    if here or any(not r.finished for r in runs):
        return None
    job = engine.existing_job(request.job_id)
    request_verification(engine, job, request.pr_number, base=request.base)
    return None


async def await_approval(
    engine: LandingContext, ops: RepoOps, request: LandRequest, policy: LandPolicy,
    approved: list[ReviewRecord], compare: dict | None = None, *, gate: Gate | None = None,
    pr: dict | None = None,
) -> None:
    auto = request.auto_head == request.head_sha
    if not (approved or auto) and policy.auto_land.enabled and pr and compare:
        auto = await auto_land(engine, ops, request, policy, pr, compare)
    have = len(approved) + auto
    touched, gap = await sensitive_on_pr(ops, request, policy, compare)
    need = approvals_needed(policy, bool(touched or gap))
    if have < need:
        if have or request.reason_code != LandReason.AUTO_LAND_REFUSED:
            set_reason(request, approvals_wanted(request, policy, have, need))
        save(engine, request)
        return
    if (touched or gap) and request.ack_sensitive_sha != request.head_sha:
        set_reason(request, Why(LandReason.SENSITIVE, paths=touched, gap=gap))
        save(engine, request)
        return
    large = too_large(request, policy, changed_lines(pr)) if pr else None
    if large:
        set_reason(request, large)
        save(engine, request)
        return
    if gate is not None:
        # GitHub's own decision, computed before asking: what a person must still do.
        needs = missing_for_merge(gate, await gate_facts_now(engine, ops, request, gate,
                                                             compare, pr))
        if needs:
            set_reason(request, Why(LandReason.GATE_WAITS, needs=needs))
            save(engine, request)
            return
    if request.refused == request.head_sha:
        return  # GitHub refused this head for a rule it named: an event asks again
    frozen = freeze(engine.settings.land, policy)
    if frozen:  # approved, and held: it lands once the freeze is lifted
        set_reason(request, frozen)
        save(engine, request)
        return
    if (gate is None or gate.merge_queue is None) and lane_taken(engine, request):
        return
    request.approved_by = [r.user for r in approved] + (["policy"] if auto else [])
    # the commit they approved (before hangar's clean update, when the approval carried)
    request.approved_head = approved[0].commit_id if approved else request.head_sha
    move(engine, request, LandState.MERGING, None)


async def gate_facts_now(engine: LandingContext, ops: RepoOps, request: LandRequest, gate: Gate,
                         compare: dict | None, pr: dict | None) -> Facts:
    """What the gate's rules look at, read now (only what the gate asks about)."""
    files = [name for f in (compare or {}).get("files") or []
             for name in (f["filename"], f.get("previous_filename")) if name]
    reviews = [{"user": {"login": r.user}, "commit_id": r.commit_id,
                "state": "DISMISSED" if r.dismissed else r.state.upper()}
               for r in sorted(request.reviews, key=lambda r: r.id)]
    decisive = {r.user for r in request.reviews
                if r.state in ("approved", "changes_requested")
                and r.user_type != "Bot" and not r.user.endswith("[bot]")}
    permissions = {login.lower(): await engine.github.permission(ops, login) for login in decisive}
    base_sha = (compare or {}).get("base_sha")
    codeowners = None
    teams: dict[str, list[str]] = {}
    if gate.code_owners:
        codeowners = await read_codeowners(engine, ops, request.base, base_sha)
        for team in team_owners(codeowners, files):
            teams[team] = [login for login in decisive
                           if await ops.team_member(team, login)]
    pushed = pushers(engine, request)
    return Facts(
        author=((pr or {}).get("user") or {}).get("login") or "", head_sha=head_of(request),
        reviews=reviews, permissions=permissions,
        last_pusher=pushed[-1] if pushed and pusher_unknown(engine, request) is None
        and not hangar_pushed(engine, request) else None,
        changed_files=files, codeowners=codeowners, teams=teams,
        unresolved_threads=await ops.unresolved_threads(request.pr_number)
        if gate.threads else 0,
        deployed=await ops.deployed(head_of(request), gate.deployments)
        if gate.deployments else ())


def hangar_pushed(engine: LandingContext, request: LandRequest) -> bool:
    """hangar's agent made the head (its own push, as the App)."""
    return any(r.head_sha == request.head_sha for r in engine.runs_of(request.job_id)
               if r.pr_number == request.pr_number and r.kind != RunKind.VERIFY)


async def read_codeowners(engine: LandingContext, ops: RepoOps, base: str,
                          base_sha: str | None) -> str | None:
    """The base's CODEOWNERS, where GitHub looks for it (the first found counts)."""
    await engine.github.read_at(ops, base_sha, list(CODEOWNERS_PATHS))
    for path in CODEOWNERS_PATHS:
        text = await engine.github.config_text(ops, base, base_sha, path=path)
        if text is not None:
            return text
    return None


async def sensitive_on_pr(
    ops: RepoOps, request: LandRequest, policy: LandPolicy, compare: dict | None = None,
) -> tuple[list[str], Why | None]:
    """The PR's sensitive files from its whole file list (every page), and why the list
    is incomplete when it is. A compare of the base against the PR's head lists the same
    files (renames with their old names): below GitHub's cut of it, it is the list."""
    if compare and compare.get("base_sha") and len(compare.get("files") or []) < COMPARE_FILES:
        return sensitive_names(compare["files"], policy.sensitive_paths), None
    files = [f async for f in ops.gh.getiter(
        f"{ops.base}/pulls/{request.pr_number}/files?per_page=100")]
    pr = await ops.get_pr(request.pr_number)
    return (sensitive_names(files, policy.sensitive_paths),
            file_list_shortfall(len(files), pr.get("changed_files")))


async def merge(
    engine: LandingContext, ops: RepoOps, request: LandRequest, policy: LandPolicy,
    gate: Gate | None = None, rulesets: list[dict] | None = None,
) -> None:
    job = engine.existing_job(request.job_id)
    pr = await ops.get_pr(request.pr_number)
    if pr.get("merged"):  # a crash after GitHub merged: record it once
        return await landed(engine, ops, request, pr.get("merge_commit_sha"))
    if gate is None or rulesets is None:
        gate, rulesets = await base_gate(engine, ops, request.base)
    bypass = bypassing_rulesets(rulesets, engine.settings.app_id)
    if bypass:  # GitHub would not hold hangar to the ruleset: it is no gate
        return move(engine, request, LandState.REJECTED,
                    Why(LandReason.BYPASS_ACTOR, ruleset=bypass[0]))
    compare = await ops.compare(request.base, head_of(request))
    # The repository's settings are read when a rule narrows the methods; else GitHub's
    # 405 for a method they turn off says so (and the merge is asked again with another).
    narrowed = (set(gate.methods or MERGE_METHODS) != set(MERGE_METHODS) or gate.linear
                or gate.signatures)
    usable, out = usable_methods(
        gate, await allowed_methods(ops) if narrowed else MERGE_METHODS,
        commits_verified=bool(compare["commits"]) and all(
            c.get("verified") for c in compare["commits"]),
        merge_commits_in_pr=any(c.get("parents", 1) > 1 for c in compare["commits"]))
    cannot = blockers(gate, own_app_id=engine.settings.app_id,
                      usable=usable or (["queue"] if gate.merge_queue is not None else []),
                      methods_out=out)
    if cannot:  # said once: the request ends here until a person changes something
        return move(engine, request, LandState.REJECTED, Why(LandReason.GATE_CANNOT,
                                                             cannot=cannot))
    if gate.merge_queue is not None:  # the queue merges, with its own method
        return await through_queue(engine, ops, request, pr, gate.merge_queue)
    method = pick_method(policy.method, usable) or policy.method
    if method != policy.method:
        engine.note(request.job_id,
                    words.method_fallback_note(request.pr_number, policy.method, method))
    if method != "squash":  # the agent's own commit messages would land as written
        closing = await closing_commits(ops, request)
        if closing:
            sha, said = closing[0]
            return move(engine, request, LandState.REJECTED, Why(
                LandReason.CLOSING_COMMIT, sha=sha, said=said, method=method))
    # GitHub merges onto whatever the base is now; what was checked is head on the old base.
    if compare["behind_by"] > 0:
        return move(engine, request, LandState.UPDATING,
                    Why(LandReason.BASE_MOVED, base=request.base))
    transient = 0
    for _ in range(2 + MERGE_TRANSIENT_TRIES):  # another method, or a transient answer
        try:
            result = await ops.gh.put(
                f"{ops.base}/pulls/{request.pr_number}/merge",
                data={"sha": request.head_sha, "merge_method": method,
                      **words.merge_commit(pr["title"], request.pr_number, job.requested_by,
                                           approved=approved_text(request))},
            )
            break
        except BadRequest as exc:
            status = int(exc.status_code)
            answer = merge_answer(status, str(exc))
            if answer == "head_moved":
                return move(engine, request, LandState.UPDATING, Why(LandReason.HEAD_MOVED))
            if answer in ("base_moved", "transient"):
                # GitHub is still computing mergeability, or the base moved under the merge:
                # read the PR again and ask again, a bounded number of times.
                transient += 1
                if transient > MERGE_TRANSIENT_TRIES:
                    raise BaseMoved(one_line(str(exc))) from exc  # the engine backs off
                await pause(MERGE_RETRY_S * 2 ** (transient - 1))
                again = await ops.get_pr(request.pr_number)
                if again.get("merged"):
                    return await landed(engine, ops, request, again.get("merge_commit_sha"))
                if again["head"]["sha"] != request.head_sha:
                    return None  # the next look sees the new head
                if again.get("mergeable") is False:
                    return move(engine, request, LandState.UPDATING,
                                Why(LandReason.BASE_MOVED, base=request.base))
                continue
            if answer == "method":
                allowed = await allowed_methods(ops)
                other = next((m for m in (method, *MERGE_METHODS) if m in allowed), None)
                if other is None or other == method:
                    return move(engine, request, LandState.REJECTED, Why(
                        LandReason.METHOD_REFUSED, method=method, said=one_line(str(exc)),
                        allowed=allowed))
                engine.note(request.job_id,
                            words.method_fallback_note(request.pr_number, method, other))
                method = other
                continue
            if answer == "queue":  # a queue the rules hangar can read did not show
                return await through_queue(engine, ops, request, pr, {})
            if answer == "workflows":
                return move(engine, request, LandState.FAILED, Why(LandReason.MERGE_WORKFLOWS))
            if answer == "rejected":
                # GitHub named a rule hangar's own reading missed: wait for it to change
                # (a review, a check, a push wakes the request) rather than end.
                request.refused = request.head_sha
                return move(engine, request, LandState.AWAITING_APPROVAL,
                            Why(LandReason.MERGE_REFUSED_WAITS, said=one_line(str(exc))))
            raise
    else:
        return None
    await landed(engine, ops, request, result.get("sha"))


async def through_queue(engine: LandingContext, ops: RepoOps, request: LandRequest, pr: dict,
                        queue: dict) -> None:
    """Add the approved head to the base's merge queue (GraphQL `enqueuePullRequest`, the
    head pinned), then follow it there: GitHub merges it (its close says so), or removes
    it (a failed check on its merge group, a conflict), which is said."""
    if request.enqueued == request.head_sha:
        entry = await ops.queue_entry(request.pr_number)
        if entry is None:
            request.enqueued = None
            save(engine, request)
            return move(engine, request, LandState.REJECTED, Why(
                LandReason.QUEUE_REMOVED, base=request.base, why=request.dequeued))
        set_reason(request, Why(LandReason.IN_QUEUE, position=entry["position"],
                                base=request.base))
        save(engine, request)
        return None
    method = str(queue.get("merge_method") or "MERGE").lower()
    if method != "squash":  # the agent's own commit messages would land as written
        closing = await closing_commits(ops, request)
        if closing:
            sha, said = closing[0]
            return move(engine, request, LandState.REJECTED, Why(
                LandReason.CLOSING_COMMIT, sha=sha, said=said, method=method))
    try:
        entry = await ops.enqueue(pr["node_id"], head_of(request))
    except GitHubException as exc:  # GitHub's word on this head: wait for it to change
        request.refused = request.head_sha
        return move(engine, request, LandState.AWAITING_APPROVAL,
                    Why(LandReason.MERGE_REFUSED_WAITS, said=one_line(str(exc))))
    request.enqueued, request.dequeued = request.head_sha, None
    engine.note(request.job_id, f"land #{request.pr_number}: added to {request.base}'s "
                                "merge queue")
    move(engine, request, LandState.MERGING, Why(
        LandReason.IN_QUEUE, position=entry["position"], base=request.base))


SHOW_MERGING_AFTER_S = 2.0
# GitHub's transient refusals ("Pull Request is not mergeable" while it computes, "Base
# branch was modified") are asked again this many times, 1, 2, 4 s apart, the PR read anew.
MERGE_TRANSIENT_TRIES = 3
MERGE_RETRY_S = 1.0


async def merge_shown_if_slow(
    engine: LandingContext, ops: RepoOps, request: LandRequest, policy: LandPolicy,
    gate: Gate | None = None, rulesets: list[dict] | None = None,
) -> None:
    """Merge; the status comment says "merging" only if GitHub takes a while. A merge
    is one request: shown at once, that edit would be two writes (the issue's comment
    and the PR's) made stale a second later by the ones that say "landed"."""
    merging = asyncio.ensure_future(merge(engine, ops, request, policy, gate, rulesets))
    try:
        done, _ = await asyncio.wait({merging}, timeout=SHOW_MERGING_AFTER_S)
        if not done:
            await show(engine, ops, request, check=False)
        await merging
    finally:
        merging.cancel()  # only when this step itself was stopped: as a crash would


def approved_text(request: LandRequest) -> str | None:
    """Who approved the head being merged, for its commit message."""
    if not request.approved_by:
        return None
    return (f"{words.approvers(request.approved_by, request.auto_rule)} at "
            f"{(request.approved_head or '')[:7]}")


class BaseMoved(Exception):
    """GitHub's 405 "Base branch was modified": the merge is asked again, after a wait."""


async def allowed_methods(ops: RepoOps) -> list[str]:
    """The merge methods the repository's settings allow, in hangar's order of liking."""
    repo = await ops.gh.getitem(ops.base)
    flags = {"squash": "allow_squash_merge", "merge": "allow_merge_commit",
             "rebase": "allow_rebase_merge"}
    return [m for m in MERGE_METHODS if repo.get(flags[m], True)]


async def landed(
    engine: LandingContext, ops: RepoOps, request: LandRequest, merge_sha: str | None
) -> None:
    if request.state == LandState.LANDED:
        return
    request.merge_sha = merge_sha
    move(engine, request, LandState.LANDED, Why(LandReason.LANDED, sha=merge_sha))
    engine.tokens.revoke_branch(request.repo, request.branch)
    job = engine.existing_job(request.job_id)
    if all(r.finished for r in engine.runs_of(job.id)):
        engine.patch_job(job.id, state=JobState.DONE)
    await show(engine, ops, request)


async def show(engine: LandingContext, ops: RepoOps, request: LandRequest, *,
               check: bool = True) -> None:
    """The land state in check run `hangar / land` on the head (unless not `check`), and
    in the status comment. The status comment is asked for even when GitHub refuses
    the check run: a person reads the landing there whatever the check says."""

    try:
        if request.head_sha and check:
            status, conclusion = land_check_status(request.state)
            # What guards the base, as the check shows it: kept (rules change by events).
            gate = await engine.github.kept(
                (ops.full_name, request.base, "gate report"),
                lambda: read_gate(ops, request.base, engine.settings.app_id))
            summary = render.fit_output(words.land_check_summary(request, gate))
            title = render.land_title(request)
            shown = f"{request.head_sha} {status} {conclusion} {title}\n{summary}"
            if shown != request.shown:
                # A conflict offers the turn that resolves it (its button sends
                # requested_action).
                actions = (words.land_actions() if request.state == LandState.CONFLICT
                           else [] if status == "completed" else None)
                await show_check(engine, ops, request, shown, status=status,
                                 conclusion=conclusion,
                                 output={"title": title, "summary": summary}, actions=actions)
            elif request.end_unshown:
                request.end_unshown = False
                with contextlib.suppress(RowChanged):  # the next step sees the fresh row
                    save(engine, request)
    finally:
        runs.ask_status_edit(engine, request.job_id)


async def show_check(engine: LandingContext, ops: RepoOps, request: LandRequest, shown: str,
                     **fields: Any) -> None:
    """Write check run `hangar / land` on the head: by its id once known; otherwise
    created once (app.creates: marked on the row first, looked for when it may exist)."""
    head = head_of(request)
    known = request.check_ids.get(head)
    plan = Plan.LOOK
    try:
        if known is None:
            request.check_posting, plan = engine.creating(request.job_id).claim(
                request.check_posting, head, keep=10)
            if plan != Plan.LOOK_ONLY:
                save(engine, request)
    except RowChanged:
        return  # the next step shows it again from the fresh row
    check_id = await ops.upsert_check_run(LAND_CHECK, head, request.id, known_id=known,
                                          look_first=plan != Plan.CREATE,
                                          create=plan != Plan.LOOK_ONLY, **fields)
    if check_id is None:
        raise Creating.in_flight(f"check run {LAND_CHECK}", request.check_posting.get(head))
    try:
        save(engine, shown_on(request, head, check_id, shown, request.state))
    except RowChanged:
        # Another writer came first, often intake hearing of this very merge: what GitHub
        # answered is kept on the fresh row all the same, or the next step would look for
        # the check run again and write it again, unchanged.
        def keep() -> None:
            row = get(engine, request.id)
            if row is not None:
                save(engine, shown_on(row, head, check_id, shown, request.state))

        with contextlib.suppress(RowChanged):
            fresh(keep)


def shown_on(request: LandRequest, head: str, check_id: int, shown: str,
             state: LandState) -> LandRequest:
    """The request, with check run `hangar / land` on `head` known by its id and showing
    `shown`, which says `state` (a final one: its end is shown)."""
    request.check_ids = {**dict(list(request.check_ids.items())[-9:]), head: check_id}
    request.check_posting = {h: m for h, m in request.check_posting.items() if h != head}
    request.shown = shown
    request.end_unshown = request.end_unshown and not (
        request.state == state and state in FINAL)
    return request


async def read_gate(
    ops: RepoOps, branch: str, app_id: int | None, *, classic: bool = False
) -> list[tuple[bool, str]]:
    """gate_report for a branch, read from GitHub: its rules and their rulesets (and with
    `classic`, its classic protection too)."""
    rules, rulesets = await read_rules(ops, branch)
    protection = await read_protection(ops, branch) if classic else None
    return gate_report(rules, rulesets, app_id, protection)


async def read_protection(ops: RepoOps, branch: str) -> dict | None:
    """The branch's classic protection; None when it has none (404 "Branch not
    protected") or the installation may not read it (no administration: read)."""
    return await ops.protection(branch)


async def base_gate(engine: LandingContext, ops: RepoOps, branch: str
                    ) -> tuple[Gate, list[dict]]:
    """What every rule on `branch` asks of a merge (its rulesets' rules, every page, and
    its classic protection, whose absence is kept), and the rulesets they come from."""
    rules, rulesets = await read_rules(ops, branch)
    classic = await engine.github.branch_protection(ops, branch)
    names = {rs["id"]: rs.get("name") or str(rs["id"]) for rs in rulesets if rs.get("id")}
    return branch_gate(rules, classic, names), rulesets


async def read_rules(ops: RepoOps, branch: str) -> tuple[list[dict], list[dict]]:
    """The active rules for a branch (every page: GitHub lists 30 by default), and the
    rulesets they come from."""

    rules = [rule async for rule in ops.gh.getiter(
        f"{ops.base}/rules/branches/{branch}?per_page={PAGE}")]
    rulesets = []
    for ruleset_id in sorted({r["ruleset_id"] for r in rules if r.get("ruleset_id")}):
        found = await get_or_none(ops.gh, f"{ops.base}/rulesets/{ruleset_id}")
        if found:
            rulesets.append(found)
    return rules, rulesets
