"""Fan-out's `/hangar` commands: `try N` starts one job with N attempts; `pick N` keeps
one attempt and closes the others' pull requests."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app import render
from app.ghops import RepoOps
from app.intents import Answer, job_for_thread, job_named, reply, start_job
from app.models import Intent
from app.render import replies
from app.render.reasons import Why
from app.runs import refresh_status

if TYPE_CHECKING:
    from app.engine import StepContext


async def try_attempts(engine: StepContext, ops: RepoOps, intent: Intent) -> str:
    return start_job(engine, intent, intent.args["prompt"], attempts=intent.args["n"])


async def pick(engine: StepContext, ops: RepoOps, intent: Intent) -> str:
    """Keep one attempt of `/hangar try N`: close the other attempts' pull requests."""
    job = job_named(engine, intent) or job_for_thread(engine, intent.thread.repo,
                                                      intent.thread.number)
    n = intent.args["n"]
    if job is None or job.attempts < 2:
        await reply(ops, intent, Why(Answer.NOTHING_TO_PICK))
        return "nothing to pick from"
    latest = {r.attempt: r for r in render.latest_turns(engine.runs_of(job.id))}
    chosen = latest.get(n)
    if chosen is None or chosen.pr_number is None:
        have = [a for a, r in sorted(latest.items()) if r.pr_number]
        await reply(ops, intent, Why(Answer.NO_SUCH_ATTEMPT, n=n, have=have))
        return "no such attempt"
    for attempt, run in latest.items():
        if attempt != n and run.pr_number:
            marker = render.reply_marker(f"picked-{job.id}")
            closed = Why(Answer.PICKED_ANOTHER, login=intent.author, n=n, pr=chosen.pr_number)
            await ops.upsert_comment(run.pr_number, marker,
                                     f"{marker}\n{replies.answer(closed)}")
            await ops.update_pr(run.pr_number, state="closed")
    engine.patch_job(job.id, winner=n)
    await refresh_status(engine, job.id)
    return f"picked attempt {n}"


ACTIONS = {"try": try_attempts, "pick": pick}
