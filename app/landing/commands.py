"""`/hangar land` (with `--ack-sensitive`, `--ack-large`), `/hangar land cancel` and
`/hangar resolve`: a person asks hangar to land a PR, or to stop trying, or for a turn
that merges the base and resolves the conflicts."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from app.commands import Busy, hangar_pr_job, reply, start_followup
from app.creates import CreateInFlight
from app.landing.rows import (
    RESTARTABLE,
    LandRequest,
    LandState,
    ReviewRecord,
    RowChanged,
    ensure_request,
    get,
    move,
    save,
    wake_request,
)
from app.landing.rules import LandReason, approval_refusal
from app.landing.steps import show, who_made
from app.models import DEFERRED, Deferred, Intent, RunKind
from app.render import landing as words
from app.render.reasons import Why
from app.repoconfig import CONFIG_PATH, parse_repo_config

if TYPE_CHECKING:
    from app.github.ops import RepoOps
    from app.landing.context import LandingContext

# An acknowledgement an approver gives on the head: its flag, and the row's field.
ACKS = {"ack_sensitive": ("--ack-sensitive", "ack_sensitive_sha"),
        "ack_large": ("--ack-large", "ack_large_sha")}


async def handle_command(engine: LandingContext, ops: RepoOps, intent: Intent) -> str:
    job = await hangar_pr_job(engine, ops, intent)
    if job is None:
        return "not a hangar PR"
    request = ensure_request(engine, job, intent.thread.number)
    if intent.command == "land_cancel":
        return await cancel(engine, ops, intent, request)
    acks = [arg for arg in ACKS if intent.args.get(arg)]
    if acks:
        config, _ = parse_repo_config(await ops.get_text(CONFIG_PATH, ref=request.base))
        pr = await ops.get_pr(intent.thread.number)
        # An acknowledgement is an approver's: the same people may not give it.
        as_review = ReviewRecord(id=0, user=intent.author, user_type=intent.author_type,
                                 state="approved", commit_id=pr["head"]["sha"])
        why = approval_refusal(as_review, head_sha=pr["head"]["sha"],
                               requester=request.requested_by, permission="write",
                               policy=config.land, **await who_made(engine, ops, request))
        if why:
            flag = ACKS[acks[0]][0]
            await reply(ops, intent, words.ack_refused(why, flag),
                        key=f"ack-refused-{intent.author}-{request.pr_number}")
            return "ack refused"
        request = get(engine, request.id) or request
        for arg in acks:
            setattr(request, ACKS[arg][1], pr["head"]["sha"])
    request.wished = True
    request.quiet = False
    wake_request(request)
    if request.state in (*RESTARTABLE, LandState.CANCELLED):
        if request.state in (LandState.CANCELLED, LandState.EXPIRED):
            request.policy = None  # a new request: the policy in force now is kept with it
        move(engine, request, LandState.QUEUED, Why(LandReason.ASKED_TO_LAND, login=intent.author))
    save(engine, request)
    engine.wake()
    return "land requested"


async def cancel(engine: LandingContext, ops: RepoOps, intent: Intent, request: LandRequest) -> str:
    if request.state in (LandState.LANDED, LandState.MERGING):
        await reply(ops, intent, words.nothing_to_cancel(request.pr_number, request.state.value))
        return f"too late to cancel: {request.state.value}"
    request.wished = False
    request.quiet = False
    move(engine, request, LandState.CANCELLED, Why(LandReason.WITHDRAWN, login=intent.author))
    save(engine, request)
    await show_now(engine, ops, request)
    return "land cancelled"


async def resolve(engine: LandingContext, ops: RepoOps, intent: Intent) -> str | Deferred:
    """A turn on the PR's branch that merges its base and resolves the conflicts; the new
    head is verified like any turn's, and needs its own approval."""
    job = await hangar_pr_job(engine, ops, intent)
    if job is None:
        return "not a hangar PR"
    pr_number = intent.thread.number
    request = get(engine, ensure_request(engine, job, pr_number).id)
    base = request.base if request else job.base_branch
    files = conflicts_of(request)
    outcome = await start_followup(
        engine, job, pr_number, words.resolve_prompt(base, files, intent.args.get("prompt")),
        kind=RunKind.FOLLOWUP, requested_by=intent.author,
        label=words.resolve_label(intent.author, base))
    if isinstance(outcome, Busy):
        if not intent.waiting:
            await reply(ops, intent, words.resolve_waits(), key=f"waiting-{intent.id}")
        return DEFERRED
    if request is not None and request.state == LandState.CONFLICT:
        request.quiet = False
        move(engine, request, LandState.CONFLICT, Why(LandReason.RESOLVING, base=base))
        await show_now(engine, ops, request)
    return str(outcome)


async def show_now(engine: LandingContext, ops: RepoOps, request: LandRequest) -> None:
    """Show what the command changed at once; when another replica may still be creating
    the check run, the request's own step shows it (the command is done, and is not
    taken again for a check run)."""
    try:
        await show(engine, ops, request)
    except CreateInFlight:
        wake_request(request)
        with contextlib.suppress(RowChanged):  # written since: its writer's wake stands
            save(engine, request)
        engine.wake(request.id)


def conflicts_of(request: LandRequest | None) -> list[str]:
    """The files the request's last conflict with its base named, or none known."""
    return list(request.conflicts) if request is not None else []
