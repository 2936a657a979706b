"""What people see: status comments, PR bodies, check-run outputs and replies.

Everything here is built from hangar's own fields. Whatever comes from the agent or the
repository (its words, git's error text, commit subjects, file names, another App's
names) is data, never markup: it goes into a code span (`code_span`) or a fenced block
(`fenced`) that nothing can break out of, with bidi and zero-width characters written out
(`<U+202E>`) and issue references defused so that no closing keyword closes anything.

Every sentence hangar shows is worded here. Concerns decide and hand over a reason code
with the facts it names (`render.reasons.Why`); one module per concern words them:
`render.landing`, `render.replies` (the commands), `render.autofix`, `render.verify`.
This module words jobs and runs; `render.text` holds the markup-safe pieces.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime

from app.models import Job, Run, RunKind, RunOutcome, RunStage, RunState, Verification
from app.redact import redact
from app.render import endings, fanout, pages, progress
from app.render.landing import impostors_note, land_line, land_title  # noqa: F401
from app.render.reasons import Sentences, Why, word
from app.render.replies import fork_pr_reply, gate_words  # noqa: F401
from app.render.text import (  # noqa: F401 (callers know them as render.code_span etc.)
    BODY_LIMIT_CHARS,
    MAX_AGENT_TEXT,
    OUTPUT_LIMIT_BYTES,
    PR_MARKER,
    REPLY_MARKER,
    STATUS_MARKER,
    clock,
    code_span,
    fenced,
    fit_body,
    fit_output,
    inert,
    person,
    reply_marker,
    short,
    status_marker,
    visible,
)
from app.render.usage import cost_text, pause_line, percent, reading_note, when, window_name
from app.render.verify import step_lines as verify_steps


def quote_prompt(prompt: str, limit: int = 300) -> str:
    short = prompt if len(prompt) <= limit else prompt[:limit] + "…"
    return fenced(short, "text")


def agent_says(summary: str | None) -> str:
    if not summary:
        return ""
    text = summary if len(summary) <= MAX_AGENT_TEXT else summary[-MAX_AGENT_TEXT:]
    return (
        "<details><summary>Agent says (unverified)</summary>\n\n"
        "_The agent's own words. hangar has not checked them; the facts above come from "
        "GitHub and from hangar's clean sandbox._\n\n"
        f"{fenced(text, 'text')}\n</details>"
    )


def verification_line(v: Verification | None) -> str:
    if v is None:
        return "⏳ verification has not run yet"
    where = f"on `{short(v.head_sha)}` in a clean sandbox"
    if v.passed is None:
        return (f"⚠️ verification did not run {where}, so it is not a pass: "
                f"{code_span(v.error or 'unknown error')}")
    if v.passed:
        flaky = " (flaky: passed on retry)" if v.flaky else ""
        return f"✅ {code_span(v.command)} passed {where}{flaky}"
    if v.exit_code is None and v.error:  # it was stopped: it never said pass or fail
        return f"❌ {code_span(v.command)} {v.error} {where}, so it is not a pass"
    return (f"❌ {code_span(v.command)} failed {where} (exit {v.exit_code}, "
            f"{v.attempts} attempt(s))")


def diff_stat(compare: dict | None) -> str:
    if not compare:
        return "no changes"
    files = compare.get("files", [])
    adds = sum(f.get("additions", 0) for f in files)
    dels = sum(f.get("deletions", 0) for f in files)
    more = " (at least; GitHub truncated the list)" if compare.get("truncated") else ""
    commits = len(compare.get("commits", []))
    return f"{commits} commit(s), {len(files)} file(s) changed, +{adds} −{dels}{more}"


def run_line(run: Run, queue_position: int | None = None, *, paused: Why | None = None,
             reading: tuple[str, float] | None = None) -> str:
    """One sentence for where a run is now. `paused`: what a queued run's model credential
    waits for (app.runs.PauseWhy); `reading`: a running agent's credential's most used
    window (name, utilization)."""
    if run.finished and run.ending and run.ending["code"] not in ("changes", "lost_after_push"):
        return f"{ENDING_MARKS.get(run.ending['code'], '❌')} {ending_cause(run)}"
    if run.state == RunState.QUEUED and paused is not None and not run.finished:
        return pause_line(paused)
    if run.state == RunState.QUEUED and not run.finished:
        wait = (Why("sandbox") if (run.waiting or {}).get("code") == "sandbox"
                else Why("slot", position=queue_position))
        return "⏳ " + endings.waiting(wait)
    if run.state == RunState.RUNNING and not run.finished:
        started = time.strftime("%H:%M:%S UTC", time.gmtime(run.started_at or time.time()))
        usage = f"; {reading_note(*reading)}" if reading else ""
        again = (f" ({endings.restarted(run.restarted_after[-1])})"
                 if run.restarted_after else "")
        return f"🛠️ the agent is working in a sandbox (since {started}){again}{usage}"
    stage_lines = {
        RunStage.PENDING: "📤 the agent stopped; publishing its branch",
        RunStage.PUBLISHING: "📤 publishing the branch through hangar's push proxy",
        RunStage.COLLECTING: "🔎 collecting commits and the diff from GitHub",
        RunStage.VERIFYING: "🧪 verifying in a clean sandbox",
    }
    if run.stage == RunStage.VERIFYING and (run.waiting or {}).get("code") == "sandbox":
        return "⏳ verification is " + endings.waiting(Why("sandbox"))
    if run.stage in stage_lines:
        return stage_lines[run.stage]
    if run.stage == RunStage.HELD and run.held:
        return held_line(run)
    if run.stage == RunStage.ERROR:
        return "❌ hangar failed and stopped trying; the cause is in hangar's log"
    failure = model_failure(run)
    if failure and run.stage == RunStage.DONE:
        return f"❌ the agent could not work: {failure}"
    if run.outcome == RunOutcome.NO_CHANGES:
        return "➖ the agent made no commits, so there is no pull request"
    if run.outcome == RunOutcome.CANCELLED:
        return "🚫 cancelled"
    return f"✅ done: {diff_stat(run.compare)}; {verification_line(run.verification)}"


def model_failure(run: Run) -> str | None:
    """The agent's model failure in a sentence with what to do, or None."""
    agent = run.agent or {}
    kind = agent.get("failure")
    if not kind or run.ending:
        return None
    # Older rows, from before a run kept how it ended: the same words, without the free
    # text of the endpoint's or the CLI's error (it may name an operator's address).
    status = agent.get("http_status")
    reset_at = (agent.get("model") or {}).get("reset_at")
    code = {"rate_limit": Why("model_rate_limited", reset_at=reset_at),
            "auth": Why("model_refused", status=status),
            "unreachable": Why("model_unreachable"),
            "resume_failed": Why("session_not_resumed")}.get(
        kind, Why("model_failed", status=status))
    return f"{endings.ending_cause(code)}. Next: {endings.ending_next(code)}"


# Refused hosts a status comment names; past them it says how many more and where every
# one is listed (a check run). An order alone (most tried, latest) could be gamed by
# decoys; a bound with the count and the full list cannot hide one.
BLOCKED_SHOWN = 20


def blocked_line(blocked: list[dict], limit: int | None = BLOCKED_SHOWN, *,
                 so_far: bool = False, listed_in: str = "the `hangar / agent` check run",
                 ) -> str | None:
    """The run's refused connections in one sentence, most refused first:
    "blocked: `example.org:443`, 3 times; …". None when nothing was refused. Past
    `limit` (None: no limit), how many more and `listed_in`, where every one is.

    `so_far`, while the agent still runs: the hosts in the order they were first refused,
    without counts, so that the comment changes (and is edited) only when a new host is
    refused, not at every try; the counts come when the agent stops."""
    if not blocked:
        return None
    if so_far:
        blocked = sorted(blocked, key=lambda entry: entry["first_at"])
    limit = len(blocked) if limit is None else limit
    parts = []
    for entry in blocked[:limit]:
        # The sandbox chose the name: shown as data.
        where = code_span(f"{entry['host']}:{entry['port']}" if entry["port"]
                          else str(entry["host"]))
        count = entry["count"]
        parts.append(where if so_far else f"{where}, {count} time{'s' if count != 1 else ''}")
    more = len(blocked) - limit
    rest = f"; and {more} more, every one listed in {listed_in}" if more > 0 else ""
    return (f"🚫 blocked{' so far' if so_far else ''}: {'; '.join(parts)}{rest} (outside this "
            "environment's egress allowlist; an operator adds hosts under `egress.allow` in "
            "envs/, see docs/egress.md)")


def running_blocked_note(blocked: list[dict], attempt: int | None) -> str | None:
    """A running agent's refusals so far, for the status comment; `attempt` names it when
    the job has several."""
    line = blocked_line(blocked, so_far=True)
    if line is None or attempt is None:
        return line
    return f"Attempt {attempt}: {line}"


# The mark before each ending's sentence in the status comment.
ENDING_MARKS = {"no_changes": "➖", "cancelled": "🚫", "time_limit": "⏱️",
                "push_refused": "📦", "gate_refused": "📦", "branch_diverged": "📦",
                "push_failing": "📦"}


def ending_cause(run: Run) -> str:
    """How the run ended, in one sentence (its ending's cause)."""
    return endings.ending_cause(endings.as_why(run.ending)) if run.ending else ""


def ending_next(run: Run) -> str:
    return endings.ending_next(endings.as_why(run.ending)) if run.ending else ""


def output_tail_block(run: Run) -> str:
    """The agent's last lines (redacted when kept), as data in a fenced block."""
    tail = (run.agent or {}).get("output_tail")
    if not tail:
        return ""
    return ("<details><summary>The agent's last lines of output</summary>\n\n"
            f"{fenced(tail[-MAX_TAIL_CHARS:], 'text')}\n</details>")


MAX_TAIL_CHARS = 4000


def agent_state_text(run: Run) -> str:
    labels = {
        RunState.EXITED: f"exited with code {run.exit_code}",
        RunState.LOST: "lost (its process disappeared without an exit code)",
        RunState.TIMED_OUT: "stopped by hangar after its time limit",
        RunState.CANCELLED: "cancelled",
        RunState.RUNNING: "running",
        RunState.QUEUED: "queued",
    }
    return labels[run.state]


def status_comment(
    job: Job, runs: list[Run], *, queue: dict[str, int] | None = None,
    notes: Sequence[str] = (), landed: Sequence[int] = (), paused: dict[str, Why] | None = None,
    readings: dict[str, tuple[str, float]] | None = None, job_url: str | None = None,
) -> str:
    """`paused` and `readings` by run id: what a held run waits for, a running agent's
    model usage (see run_line); `job_url`: hangar's page of the job, linked as "View job"."""
    queue = queue or {}
    paused, readings = paused or {}, readings or {}

    def line(run: Run, position: int | None = None) -> str:
        return run_line(run, position, paused=paused.get(run.id), reading=readings.get(run.id))

    lines = [
        status_marker(job.id),
        f"**hangar** · `{job.id}` · asked by {person(job.requested_by)}"
        + (f" · [{pages.VIEW_JOB}]({job_url})" if job_url else ""),
        "",
        quote_prompt(job.prompt),
        "",
    ]
    latest = latest_turns(runs)
    if len(latest) == 1:
        run = latest[0]
        lines.append(f"**Now:** {line(run, queue.get(run.id))}")
        lines.append("")
        lines += _facts(run)
    else:
        lines += ["| attempt | branch | PR | now |", "|---|---|---|---|"]
        for run in latest:
            pr = f"#{run.pr_number}" if run.pr_number else "—"
            now = line(run, queue.get(run.id)).replace("|", "\\|")  # one cell, even in code
            lines.append(f"| {run.attempt} | `{run.branch}` | {pr} | {now} |")
    turns = [r for r in runs if r.turn > 1 and r.kind != RunKind.VERIFY]
    if turns:
        lines += ["", "**Turns on the pull request:**"]
        for run in turns:
            # a label may quote others' words (a check's name): shown as data
            lines.append(f"- {code_span(run.label or 'turn ' + str(run.turn))}: {line(run)}")
    if job.ranking:
        head = fanout.WEIGHED_HEAD if fanout.weighed(job.ranking) else RANKING_HEAD
        lines += ["", head, "",
                  "| place | attempt | PR | eligible | why |", "|---|---|---|---|---|"]
        for entry in job.ranking:
            pr = f"#{entry['pr']}" if entry.get("pr") else "—"
            kept = " ✅ picked" if job.winner == entry["attempt"] else ""
            lines.append(f"| {entry['place']} | {entry['attempt']}{kept} | {pr} "
                         f"| {eligible_cell(entry)} | {ranking_why(entry)} |")
        rate = pass_rate(job.ranking)
        if rate:
            lines += ["", rate]
    for said in (fanout.grading_line(job), fanout.unfinished_line(job)):
        if said:
            lines += ["", said]
    for note in notes:
        lines += ["", note]
    lines += ["", f"**Next:** {next_step(job, latest, landed)}"]
    return fit_body("\n".join(lines))


RANKING_HEAD = ("**Ranking** (eligible first: a pull request, verification and CI not "
                "failed; then CI, verification, the smaller diff, the fewer files, the "
                "shorter run):")

def eligible_cell(entry: dict) -> str:
    if entry.get("eligible", True):
        return "yes"
    return f"no: {gate_words(entry.get('gates', []))}"


def ranking_why(entry: dict) -> str:
    why = entry["why"] + fanout.score_words(entry)
    ties = entry.get("tie_with") or []
    if not ties:
        return why
    others = ", ".join(str(t) for t in ties)
    order = "by attempt number" if "score" in entry else "by run time"
    return f"{why}; a tie with attempt {others}, ordered {order}"


def pass_rate(ranking: list[dict]) -> str | None:
    """Verification's pass rate across the attempts, where they were verified."""
    verified = [e["verified"] for e in ranking if e.get("verified")]
    if not verified:
        return None
    passed = sum(1 for v in verified if v in ("passed", "flaky"))
    flaky = sum(1 for v in verified if v == "flaky")
    rate = f"**Pass rate:** verification passed in {passed} of {len(verified)} attempts"
    return rate + (f" ({flaky} on a retry: flaky)" if flaky else "") + "."


def latest_turns(runs: list[Run]) -> list[Run]:
    by_attempt: dict[int, Run] = {}
    for run in runs:
        if run.kind == RunKind.VERIFY:
            continue
        if run.attempt not in by_attempt or run.turn > by_attempt[run.attempt].turn:
            by_attempt[run.attempt] = run
    return [by_attempt[a] for a in sorted(by_attempt)]


def _facts(run: Run) -> list[str]:
    lines = []
    if run.pr_number:
        lines.append(f"- Pull request: #{run.pr_number} on branch `{run.branch}`")
    elif run.branch:
        lines.append(f"- Branch: `{run.branch}`")
    if run.head_sha:
        lines.append(f"- Head: `{short(run.head_sha)}` · {diff_stat(run.compare)}")
    if run.state not in (RunState.QUEUED, RunState.RUNNING):
        lines.append(f"- Agent: {agent_state_text(run)}{_agent_numbers(run)}")
    if run.env_build:
        lines.append(f"- Environment: {environment_line(run.env_build)}")
    if run.restarted_after and run.finished:
        lines.append(f"- Started again once: {endings.restarted(run.restarted_after[-1])}")
    failure = model_failure(run)
    if failure:
        lines.append(f"- ❌ {failure}")
    model = _model_line(run)
    if model and run.ending and run.ending["code"].startswith(("model_", "hangar_restarted")):
        lines.append(f"- {model[:1].upper()}{model[1:]}")
    blocked = blocked_line((run.agent or {}).get("egress_blocked") or [])
    if blocked:
        lines.append(f"- {blocked}")
    if run.verification:
        lines.append(f"- Verification: {verification_line(run.verification)}")
        blocked = blocked_line(run.verification.egress_blocked,
                               listed_in="the `hangar / verify` check run")
        if blocked:
            lines.append(f"- During verification: {blocked}")
    if run.stage == RunStage.HELD and run.held:
        lines += held_facts(run)
    if run.dirty:
        lines.append("- ⚠️ the agent left uncommitted changes; hangar did not commit them")
    if run.sensitive:
        paths = ", ".join(code_span(p) for p in run.sensitive[:10])
        lines.append(f"- ⚠️ sensitive paths changed: {paths}")
    for warning in run.warnings[-3:]:  # they carry git's and the sandbox's words
        lines.append(f"- ⚠️ {code_span(warning)}")
    if run.finished and run.ending and run.ending["code"] in SHOW_TAIL:
        block = output_tail_block(run)
        if block:
            lines += ["", block]
    if run.state == RunState.RUNNING and not run.finished and run.agent.get("progress"):
        lines += progress.progress_facts(run)  # no running clock: it would edit each time
        block = progress.steps_block(run.agent["progress"].get("steps") or [])
        if block:
            lines += ["", block]
    return lines


# Endings where what the agent printed last is the best clue a person has.
SHOW_TAIL = ("agent_failed", "agent_killed", "build_missing", "time_limit")


def _model_line(run: Run) -> str | None:
    """What hangar's gateway saw of the run's model requests, in one line."""
    model = (run.agent or {}).get("model") or {}
    if not model:
        return None
    outcomes = model.get("outcomes") or {}
    said = ", ".join(f"{n} {OUTCOME_WORDS.get(k, k)}" for k, n in sorted(outcomes.items())
                     if k != "ok")
    cost = (f", ${model['cost_usd']:.4f}" if model.get("cost_usd") is not None
            else ", cost unknown (no price for the model)")
    return (f"model traffic through hangar: {model.get('requests', 0)} request(s)"
            + (f" ({said})" if said else "")
            + f", {model.get('input_tokens', 0)} tokens in, "
              f"{model.get('output_tokens', 0)} out{cost}")


OUTCOME_WORDS = {"status": "answered with an error status", "error_event": "ended by an "
                 "error event", "cut": "cut off", "stalled": "stalled", "aborted": "ended by "
                 "the agent's side", "open": "still open", "restart": "cut by a restart of "
                 "hangar", "unreachable": "not reached"}


def environment_line(facts: dict) -> str:
    """What the run's sandbox started from: a build of the repository's environment, or the
    environment's own image and why."""
    if facts.get("missing"):
        return ("hangar's environment build for this repository is missing; it is being "
                "rebuilt, and this run starts without it (the environment's own image, "
                "dependencies not installed)")
    if facts.get("fallback"):
        return ("the environment's own image, dependencies not installed "
                f"({code_span(str(facts.get('reason')))})")
    built = (datetime.fromtimestamp(facts["built_at"], UTC).strftime("%Y-%m-%d %H:%M UTC")
             if facts.get("built_at") else "?")
    line = (f"build v{facts.get('version')} (`{facts.get('id')}`) of `{short(facts.get('commit'))}`"
            f", built {built}, config `{facts.get('config_digest')}`")
    if facts.get("stale"):
        line += "; behind the default branch, a newer build is on its way"
    differ = facts.get("lockfiles_differ") or []
    if differ:
        line += "; the branch's lockfiles differ: " + ", ".join(code_span(p) for p in differ[:5])
    return line


def held_line(run: Run) -> str:
    """Where a run stands whose push GitHub did not take."""
    held = run.held
    assert held is not None
    where = ("in a bundle in hangar's data directory" if held.bundle
             else "in its sandbox, which hangar keeps")
    what = ("git declined the push (the branch on GitHub has moved)" if held.diverged
            else f"{endings.refuser(held.by_hangar)} refused the push" if held.refused
            else "the push did not go through")
    return (f"📦 {what} of `{run.branch}`; the agent's commits up to "
            f"`{short(held.head_sha)}` are kept safe {where}")


def held_facts(run: Run) -> list[str]:
    held = run.held
    assert held is not None
    said = ("git declined the push: the branch on GitHub has commits the agent's work "
            "does not build on; git said:" if held.diverged
            else f"{endings.refuser(held.by_hangar)} refused the push and said:"
            if held.refused
            else f"the push did not go through after {held.attempts} attempt(s); git said:")
    return [f"- {said}", "", fenced(held.github_says or "(nothing)", "text"), ""]


def held_next_step(run: Run) -> str:
    held = run.held
    assert held is not None
    if held.refused and held.diverged:
        return endings.ending_next(Why("branch_diverged"))
    if held.refused and held.by_hangar:
        return endings.ending_next(Why("gate_refused"))
    if held.refused:
        return ("fix the cause GitHub names above (a secret: allow it with GitHub's link if "
                "it is safe to publish; a large file or a rule: change the repository's "
                "settings), then comment `/hangar retry` and hangar pushes the kept commits "
                "again.")
    return ("nothing: hangar pushes the kept commits again every "
            f"{HELD_RETRY_MINUTES} minutes; `/hangar retry` pushes them now.")


HELD_RETRY_MINUTES = 10


def held_check_output(run: Run) -> dict:
    summary = "\n".join([held_line(run), "", *held_facts(run), f"**Next:** {held_next_step(run)}"])
    held = run.held
    assert held is not None
    who = endings.refuser(held.by_hangar) if held.refused else None
    title = ("the branch moved on GitHub; hangar kept the agent's commits" if held.diverged
             else f"{who} refused the agent's commits; hangar kept them" if who
             else "the agent's commits were not pushed; hangar kept them")
    return {"title": title,
            "summary": fit_output(summary)}


def recovered_label() -> str:
    """The name of a turn hangar rebuilt from GitHub's records after losing its data."""
    return "recovered from GitHub"


# A run's warnings, by `RunWarning` code (app.models); the facts are others' words.
RUN_WARNINGS: Sentences = {
    "retrying": lambda attempt, attempts: (
        f"a step of hangar's failed ({attempt} of {attempts} tries); it tries again"),
    # The sandbox's own words (redacted) may follow; hangar's side is for its log.
    "session_not_saved": lambda said=None: (
        "the agent's session could not be saved" + (f": {said}" if said else "")),
    "stop_failed": lambda: "stopping the agent failed; hangar's log says why",
    "publish_failed": lambda: (
        "could not publish from the sandbox; collecting what reached GitHub"),
}


def run_warning(why: Why) -> str:
    return word(RUN_WARNINGS, why)


def push_not_taken(exit_code: int, head: str) -> str:
    """What stands for GitHub's words on a held push when git printed nothing."""
    return f"git push exited {exit_code} and GitHub's branch does not hold {short(head)}"


def found_unpushed() -> str:
    """What stands for GitHub's words on commits found unpushed at a sandbox's clean-up."""
    return "hangar found these commits unpushed when it cleaned up the sandbox"


def held_actions() -> list[dict]:
    """The button on check run `hangar / agent` of a run whose push GitHub did not take."""
    return [{"label": "Push again", "identifier": "retry",
             "description": "Push the commits hangar kept"}]


def _agent_numbers(run: Run) -> str:
    parts = []
    if run.started_at and run.finished_at:
        parts.append(f"{run.finished_at - run.started_at:.0f}s")
    if isinstance(run.agent.get("turns"), int):
        parts.append(f"{run.agent['turns']} turns")
    cost = turn_cost(run)
    if cost:
        parts.append(cost)
    return f" ({', '.join(parts)})" if parts else ""


def turn_cost(run: Run) -> str | None:
    """This turn's own cost (app/runs/costs.py), or 'cost unknown' with its tokens."""
    agent = run.agent or {}
    cost = agent.get("cost_usd")
    return cost_text(cost if isinstance(cost, int | float) else None,
                     _count(agent.get("input_tokens")), _count(agent.get("output_tokens")))


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def usage_windows_line(windows: list[dict]) -> str | None:
    """A credential's windows as a turn ended: '7-day 91% (resets Tue 09:12 UTC), …'."""
    parts = []
    for entry in sorted(windows, key=lambda w: -float(w.get("utilization") or 0))[:4]:
        reset = f" (resets {when(entry['reset_at'])})" if entry.get("reset_at") else ""
        parts.append(f"{window_name(str(entry.get('window')))} "
                     f"{percent(float(entry.get('utilization') or 0))}{reset}")
    return ", ".join(parts) or None


def next_step(job: Job, latest: list[Run], landed: Sequence[int] = ()) -> str:
    held = [r for r in latest if r.stage == RunStage.HELD and r.held]
    if held:
        return held_next_step(held[0])
    if any(not r.finished for r in latest):
        return "nothing yet; this comment updates as the work moves. `/hangar cancel` stops it."
    prs = [r for r in latest if r.pr_number]
    if landed:
        return (f"nothing: #{landed[0]} has landed. `/hangar <instruction>` on the issue "
                "starts new work.")
    if len(latest) > 1 and job.winner is None and prs and fanout.grading_line(job):
        return ("the ranking, once CI has finished or at the time above; `/hangar pick N` "
                "keeps attempt N meanwhile.")
    if len(latest) > 1 and job.winner is None and prs:
        return ("`/hangar pick N` keeps attempt N and closes the other pull requests; "
                "the ranking above is only advice.")
    ended = [r for r in latest if r.ending and r.ending["code"] not in (
        "changes", "lost_after_push", "no_changes")]
    if ended:
        return ending_next(ended[0])
    failed = [said for r in latest if (said := model_failure(r))]
    if failed:
        return failed[0]
    if not prs:
        return ("rephrase the request with more detail and comment `/hangar <instruction>` "
                "again, or see `/hangar help`.")
    if any(r.verification and r.verification.passed is False for r in prs):
        return ("comment `/hangar <instruction>` on the pull request for another turn, or "
                "`/hangar verify` to run verification again.")
    return ("review the pull request; an approval from someone with write access lands it. "
            "`/hangar <instruction>` on the PR asks for changes.")


def pr_title(job: Job) -> str:
    title = job.title.strip() or job.prompt.splitlines()[0][:60]
    # The title may be anyone's: it lands in the squash commit, so it must not
    # close an issue or hide characters.
    return f"hangar: {inert(' '.join(redact(title).split()))}"[:120]


def pr_body(job: Job, run: Run) -> str:
    lines = [
        PR_MARKER.format(job=job.id, branch=run.branch),
        f"Closes #{job.thread.number}" if not job.thread.is_pr else "",
        "",
        f"Asked by {person(job.requested_by)} in #{job.thread.number}:",
        "",
        quote_prompt(job.prompt, 1000),
        "",
        "### What changed (from GitHub)",
        "",
        diff_stat(run.compare),
        "",
    ]
    compare = run.compare or {}
    for commit in compare.get("commits", [])[:30]:
        message = (commit.get("commit") or {}).get("message") or commit.get("message") or ""
        subject = (message.splitlines() or [""])[0][:100]
        lines.append(f"- `{short(commit.get('sha'))}` {code_span(subject)}")
    files = compare.get("files", [])
    if files:
        lines += ["", "| file | + | − |", "|---|---|---|"]
        for f in files[:50]:
            lines.append(f"| {code_span(f['filename'], in_table=True)} "
                         f"| {int(f.get('additions', 0))} | {int(f.get('deletions', 0))} |")
    lines += ["", "### Verification", "", verification_line(run.verification), ""]
    if run.sensitive:
        lines += ["⚠️ **Sensitive paths changed:** "
                  + ", ".join(code_span(p) for p in run.sensitive[:20]), ""]
    lines += [agent_says(run.agent.get("summary")), "",
              "_Approve this pull request to land it; `/hangar <instruction>` asks for "
              "another turn; `/hangar help` lists every command._"]
    return fit_body("\n".join(lines), "the Files changed tab and the `hangar / agent` check run")


def verify_check_output(v: Verification) -> dict:
    if v.passed is None:
        title = "Verification did not run: it is not a pass"
    elif v.passed:
        title = "Verification passed" + (" (flaky)" if v.flaky else "")
    else:
        title = f"Verification failed (exit {v.exit_code})"
    summary = (
        f"{verification_line(v)}\n\n"
        f"- command: {code_span(v.command)}\n- commit: {code_span(v.head_sha)}\n"
        f"- attempts: {v.attempts}\n- duration: {v.duration_s:.1f}s"
    )
    if v.restored:
        summary += (f"\n- restored from the base (`{short(v.restored_from)}`) before the "
                    "command ran: " + ", ".join(code_span(p) for p in v.restored))
    if v.error:
        summary += f"\n- error: {code_span(v.error)}"
    blocked = blocked_line(v.egress_blocked, None)  # every one: the status comment points here
    if blocked:
        summary += f"\n- {blocked}"
    if v.steps:
        summary += "\n\n**Steps, in order:**\n" + "\n".join(verify_steps(v.steps, v.command))
    if v.fix:
        summary += f"\n\n**To fix:** {v.fix}"
    text = "Output (last lines, secrets redacted):\n\n" + fenced(v.output_tail or "(no output)")
    see = f"the output of {code_span(v.command)} run on `{short(v.head_sha)}`"
    return {"title": title, "summary": fit_output(summary, see), "text": fit_output(text, see)}


def agent_check_started(run: Run) -> dict:
    """`hangar / agent` while the agent works (the check run exists from its start)."""
    again = (f" ({endings.restarted(run.restarted_after[-1])})" if run.restarted_after
             else "")
    return {"title": "The agent is working",
            "summary": f"The agent started on `{short(run.start_sha)}` in a sandbox{again}; "
                       "this check run completes with how its turn ends."}


def agent_check_output(run: Run) -> dict:
    if run.ending:
        return _ending_check_output(run)
    title = f"Agent {agent_state_text(run)}"
    facts = [f"- state: {run.state.value}", f"- exit code: {run.exit_code}"]
    if run.started_at and run.finished_at:
        facts.append(f"- duration: {run.finished_at - run.started_at:.1f}s")
    for key, label in (("turns", "turns"), ("session_id", "session")):
        if run.agent.get(key) is not None:  # the agent's own report: data
            facts.append(f"- {label}: {code_span(str(run.agent[key]))}")
    cost = turn_cost(run)
    if cost:
        facts.append(f"- this turn's cost: {cost}")
    if run.env_build:
        facts.append(f"- environment: {environment_line(run.env_build)}")
    if run.dirty:
        facts.append("- uncommitted changes were left in the sandbox (not published)")
    model = run.agent.get("model") or {}
    if model:
        cost = (f", ${model['cost_usd']:.4f}" if model.get("cost_usd") is not None
                else ", cost unknown (no price for the model)")
        facts.append(f"- model traffic through hangar: {model.get('requests', 0)} request(s), "
                     f"{model.get('input_tokens', 0)} tokens in, "
                     f"{model.get('output_tokens', 0)} out{cost}")
    blocked = blocked_line(run.agent.get("egress_blocked") or [], None)  # every one
    if blocked:
        facts.append(f"- {blocked}")
    windows = usage_windows_line(run.agent.get("usage_windows") or [])
    if windows:
        facts.append(f"- the model's usage as this turn ended: {windows}")
    failure = model_failure(run)
    if failure:
        title = "The agent could not work"
        facts.insert(0, f"**{failure}**\n")
    summary = "\n".join(facts)
    text = agent_says(run.agent.get("summary")) or "The agent left no summary."
    see = "the pull request's Files changed tab and hangar's status comment"
    return {"title": title[:200], "summary": fit_output(summary, see),
            "text": fit_output(text, see)}


def _ending_check_output(run: Run) -> dict:
    """`hangar / agent` once the turn ended: how, what to do, the facts, the last lines."""
    cause = ending_cause(run)
    facts = [f"**{cause[:1].upper()}{cause[1:]}.**", "", f"**Next:** {ending_next(run)}", ""]
    if run.state not in (RunState.QUEUED, RunState.RUNNING):
        facts.append(f"- agent: {agent_state_text(run)}{_agent_numbers(run)}")
    if run.restarted_after:
        facts.append(f"- started again once: {endings.restarted(run.restarted_after[-1])}")
    if run.env_build:
        facts.append(f"- environment: {environment_line(run.env_build)}")
    if run.pr_number:
        facts.append(f"- pull request: #{run.pr_number}")
    if run.held is not None:
        facts.extend(held_facts(run))
    if run.head_sha and run.head_sha != run.start_sha:
        facts.append(f"- the agent's commits: `{short(run.head_sha)}` · {diff_stat(run.compare)}")
    if run.dirty:
        facts.append("- uncommitted changes were left in the sandbox (not published)")
    model = _model_line(run)
    if model:
        facts.append(f"- {model}")
    blocked = blocked_line(run.agent.get("egress_blocked") or [])
    if blocked:
        facts.append(f"- {blocked}")
    for key, label in (("turns", "turns"), ("session_id", "session")):
        if run.agent.get(key) is not None:  # the agent's own report: data
            facts.append(f"- {label}: {code_span(str(run.agent[key]))}")
    cost = turn_cost(run)
    if cost:
        facts.append(f"- this turn's cost: {cost}")
    windows = usage_windows_line(run.agent.get("usage_windows") or [])
    if windows:
        facts.append(f"- the model's usage as this turn ended: {windows}")
    tail = (run.agent or {}).get("output_tail")
    text = "\n\n".join(part for part in (
        "The agent's last lines of output (secrets redacted):\n\n" + fenced(tail)
        if tail else "The agent printed nothing.",
        progress.steps_block(run.agent.get("steps") or []),
        agent_says(run.agent.get("summary"))) if part)
    see = "the pull request's Files changed tab and hangar's status comment"
    return {"title": f"{cause[:1].upper()}{cause[1:]}"[:200],
            "summary": fit_output("\n".join(facts), see), "text": fit_output(text, see)}
