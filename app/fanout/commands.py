"""Fan-out's `/hangar` commands: `try N` starts one job with N attempts (and warns when
they will queue behind the concurrency cap or the model's usage is already high); `pick N`
keeps one attempt and closes the others' pull requests."""

from __future__ import annotations

import time
from enum import StrEnum
from typing import TYPE_CHECKING

from app import render
from app.commands import Answer, job_for_thread, job_named, reply, start_job
from app.envbuilds import environment_for
from app.github.ops import RepoOps
from app.models import Intent, Thread
from app.render import replies
from app.render import usage as usage_words
from app.render.reasons import Why
from app.runs import FANOUT_WARN_PCT, ask_status_edit, highest

if TYPE_CHECKING:
    from app.engine import StepContext


class FanoutWarning(StrEnum):
    """Why a fan-out's reply warns (worded by render.usage)."""

    OVER_CAP = "fanout_over_cap"  # more attempts than agents may run at once
    USAGE_HIGH = "fanout_usage_high"  # the model's usage is above FANOUT_WARN_PCT


def pick_refusal(ranking: list[dict], n: int, *, running: bool, force: bool) -> Why | None:
    """None when attempt n may be kept; else why it needs `--force`."""
    if force:
        return None
    if not ranking:
        return Why(Answer.PICK_NOT_RANKED, n=n) if running else None
    entry = next((e for e in ranking if e["attempt"] == n), None)
    if entry is None or entry.get("eligible", True):
        return None
    best = next((e["attempt"] for e in ranking if e.get("eligible", True)), None)
    return Why(Answer.PICK_INELIGIBLE, n=n, gates=entry.get("gates", []), best=best)


async def try_attempts(engine: StepContext, ops: RepoOps, intent: Intent) -> str:
    outcome = start_job(engine, intent, intent.args["prompt"], attempts=intent.args["n"])
    warnings = await fanout_warnings(engine, ops, intent)
    if warnings:
        await reply(ops, intent, usage_words.fanout_warnings(warnings),
                    key=f"fanout-{intent.id}")
    return outcome


async def fanout_warnings(engine: StepContext, ops: RepoOps, intent: Intent) -> list[Why]:
    """N attempts cost about N times one: say so when they queue behind the cap, or when
    the model credential they will use is already past FANOUT_WARN_PCT in a window."""
    n, cap = intent.args["n"], engine.settings.max_concurrent_agents
    warnings = [Why(FanoutWarning.OVER_CAP, n=n, cap=cap)] if n > cap else []
    models = engine.models
    if models is None or not any(r.utilization * 100 > FANOUT_WARN_PCT
                                 for rs in models.all_readings().values() for r in rs):
        return warnings  # no credential is high: no need to ask which one these use
    spec, _ = await environment_for(engine, ops, intent.default_branch)
    if spec.harness == "script":
        return warnings
    reading = highest(models.readings(spec.model_credential_env), time.time())
    if reading is not None and reading.utilization * 100 > FANOUT_WARN_PCT:
        warnings.append(Why(FanoutWarning.USAGE_HIGH, n=n, window=reading.window,
                            pct=reading.utilization * 100, warn_at=FANOUT_WARN_PCT,
                            threshold=engine.settings.pause_at_pct))
    return warnings


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
    why_not = pick_refusal(job.ranking, n, running=any(not r.finished for r in latest.values()),
                           force=bool(intent.args.get("force")))
    if why_not is not None:
        await reply(ops, intent, why_not)
        return f"attempt {n} not picked: {why_not.code}"
    for attempt, run in latest.items():
        if attempt != n and run.pr_number:
            marker = render.reply_marker(f"picked-{job.id}")
            closed = Why(Answer.PICKED_ANOTHER, login=intent.author, n=n, pr=chosen.pr_number)
            await ops.upsert_comment(run.pr_number, marker,
                                     f"{marker}\n{replies.answer(closed)}")
            await ops.update_pr(run.pr_number, state="closed")
    engine.patch_job(job.id, winner=n)
    ask_status_edit(engine, job.id)
    if intent.args.get("land"):  # the API's pick that also asks to land the kept PR
        engine.save_intent(Intent(
            id=f"{intent.id}-land", comment_id=0, author=intent.author,
            author_type=intent.author_type, command="land",
            thread=Thread(repo=job.thread.repo, number=chosen.pr_number,
                          installation_id=job.thread.installation_id, is_pr=True),
            args={"ack_sensitive": False, "job": job.id}))
        return f"picked attempt {n}; landing #{chosen.pr_number} asked"
    return f"picked attempt {n}"


ACTIONS = {"try": try_attempts, "pick": pick}
