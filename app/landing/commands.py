"""`/hangar land` (or `/hangar land --ack-sensitive`) and `/hangar land cancel`: a person
asks hangar to land a PR, or to stop trying."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.commands import hangar_pr_job, reply
from app.landing.rows import (
    RESTARTABLE,
    LandRequest,
    LandState,
    ReviewRecord,
    ensure_request,
    get,
    move,
    save,
    wake_request,
)
from app.landing.rules import LandReason, approval_refusal
from app.landing.steps import show, who_made
from app.models import Intent
from app.render import landing as words
from app.render.reasons import Why
from app.repoconfig import CONFIG_PATH, parse_repo_config

if TYPE_CHECKING:
    from app.engine import StepContext
    from app.github.ops import RepoOps


async def handle_command(engine: StepContext, ops: RepoOps, intent: Intent) -> str:
    job = await hangar_pr_job(engine, ops, intent)
    if job is None:
        return "not a hangar PR"
    request = ensure_request(engine, job, intent.thread.number)
    if intent.command == "land_cancel":
        return await cancel(engine, ops, intent, request)
    if intent.args.get("ack_sensitive"):
        config, _ = parse_repo_config(await ops.get_text(CONFIG_PATH, ref=request.base))
        pr = await ops.get_pr(intent.thread.number)
        # The acknowledgement is an approver's: the same people may not give it.
        as_review = ReviewRecord(id=0, user=intent.author, user_type=intent.author_type,
                                 state="approved", commit_id=pr["head"]["sha"])
        why = approval_refusal(as_review, head_sha=pr["head"]["sha"],
                               requester=request.requested_by, permission="write",
                               policy=config.land, **await who_made(engine, ops, request))
        if why:
            await reply(ops, intent, words.ack_refused(why),
                        key=f"ack-refused-{intent.author}-{request.pr_number}")
            return "ack refused"
        request = get(engine, request.id) or request
        request.ack_sensitive_sha = pr["head"]["sha"]
    request.wished = True
    wake_request(request)
    if request.state in (*RESTARTABLE, LandState.CANCELLED):
        move(engine, request, LandState.QUEUED, Why(LandReason.ASKED_TO_LAND, login=intent.author))
    save(engine, request)
    engine.wake()
    return "land requested"


async def cancel(engine: StepContext, ops: RepoOps, intent: Intent, request: LandRequest) -> str:
    if request.state in (LandState.LANDED, LandState.MERGING):
        await reply(ops, intent, words.nothing_to_cancel(request.pr_number, request.state.value))
        return f"too late to cancel: {request.state.value}"
    request.wished = False
    move(engine, request, LandState.CANCELLED, Why(LandReason.WITHDRAWN, login=intent.author))
    save(engine, request)
    await show(engine, ops, request)
    return "land cancelled"
