"""What people see: status comments, PR bodies, check-run outputs and replies.

Everything here is built from hangar's own fields. The agent's words appear only inside
the block labelled "Agent says (unverified)", fenced so that nothing in them renders,
mentions anyone or closes the block.
"""

from __future__ import annotations

import re
import time
from typing import Any

from app.models import Job, Run, RunStage, RunState, Verification

STATUS_MARKER = "<!-- hangar:status {job} -->"
PR_MARKER = "<!-- hangar:pr {job} {branch} -->"
REPLY_MARKER = "<!-- hangar:reply {key} -->"
MAX_AGENT_TEXT = 4000


def status_marker(job_id: str) -> str:
    return STATUS_MARKER.format(job=job_id)


def reply_marker(key: str) -> str:
    return REPLY_MARKER.format(key=key)


def fenced(text: str, lang: str = "") -> str:
    """A code block no content can break out of."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{lang}\n{text}\n{fence}"


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


def short(sha: str | None) -> str:
    return (sha or "")[:7]


def verification_line(v: Verification | None) -> str:
    if v is None:
        return "⏳ verification has not run yet"
    where = f"on `{short(v.head_sha)}` in a clean sandbox"
    if v.passed is None:
        return f"⚠️ verification could not run {where}: {v.error or 'unknown error'}"
    if v.passed:
        flaky = " (flaky: passed on retry)" if v.flaky else ""
        return f"✅ `{v.command}` passed {where}{flaky}"
    return f"❌ `{v.command}` failed {where} (exit {v.exit_code}, {v.attempts} attempt(s))"


def diff_stat(compare: dict | None) -> str:
    if not compare:
        return "no changes"
    files = compare.get("files", [])
    adds = sum(f.get("additions", 0) for f in files)
    dels = sum(f.get("deletions", 0) for f in files)
    more = " (at least; GitHub truncated the list)" if compare.get("truncated") else ""
    commits = len(compare.get("commits", []))
    return f"{commits} commit(s), {len(files)} file(s) changed, +{adds} −{dels}{more}"


def run_line(run: Run, queue_position: int | None = None) -> str:
    """One sentence for where a run is now."""
    if run.state == RunState.QUEUED:
        where = f" (position {queue_position} in the queue)" if queue_position else ""
        return f"⏳ queued{where}: waiting for a free agent slot"
    if run.state == RunState.RUNNING:
        started = time.strftime("%H:%M:%S UTC", time.gmtime(run.started_at or time.time()))
        return f"🛠️ the agent is working in a sandbox (since {started})"
    stage_lines = {
        RunStage.PENDING: "📤 the agent stopped; publishing its branch",
        RunStage.PUBLISHING: "📤 publishing the branch through hangar's push proxy",
        RunStage.COLLECTING: "🔎 collecting commits and the diff from GitHub",
        RunStage.VERIFYING: "🧪 verifying in a clean sandbox",
    }
    if run.stage in stage_lines:
        return stage_lines[run.stage]
    if run.stage == RunStage.ERROR:
        return f"❌ failed: {run.error or 'unknown error'}"
    if run.outcome == "no_changes":
        return "➖ the agent made no commits, so there is no pull request"
    if run.outcome == "cancelled":
        return "🚫 cancelled"
    return f"✅ done: {diff_stat(run.compare)}; {verification_line(run.verification)}"


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
    job: Job, runs: list[Run], *, queue: dict[str, int] | None = None, notes: list[str] = (),
    landed: list[int] = (),
) -> str:
    queue = queue or {}
    lines = [
        status_marker(job.id),
        f"**hangar** · `{job.id}` · asked by @{job.requested_by}",
        "",
        quote_prompt(job.prompt),
        "",
    ]
    latest = latest_turns(runs)
    if len(latest) == 1:
        run = latest[0]
        lines.append(f"**Now:** {run_line(run, queue.get(run.id))}")
        lines.append("")
        lines += _facts(run)
    else:
        lines += ["| attempt | branch | PR | now |", "|---|---|---|---|"]
        for run in latest:
            pr = f"#{run.pr_number}" if run.pr_number else "—"
            lines.append(f"| {run.attempt} | `{run.branch}` | {pr} "
                         f"| {run_line(run, queue.get(run.id))} |")
    turns = [r for r in runs if r.turn > 1 and r.kind != "verify"]
    if turns:
        lines += ["", "**Turns on the pull request:**"]
        for run in turns:
            lines.append(f"- {_inline(run.label or 'turn ' + str(run.turn))}: {run_line(run)}")
    if job.ranking:
        lines += ["", "**Ranking** (verification, then CI, then the smaller diff):", "",
                  "| place | attempt | PR | why |", "|---|---|---|---|"]
        for entry in job.ranking:
            pr = f"#{entry['pr']}" if entry.get("pr") else "—"
            kept = " ✅ picked" if job.winner == entry["attempt"] else ""
            lines.append(f"| {entry['place']} | {entry['attempt']}{kept} | {pr} "
                         f"| {entry['why']} |")
    for note in notes:
        lines += ["", note]
    lines += ["", f"**Next:** {next_step(job, latest, landed)}"]
    return "\n".join(lines)


def latest_turns(runs: list[Run]) -> list[Run]:
    by_attempt: dict[int, Run] = {}
    for run in runs:
        if run.kind == "verify":
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
    if run.verification:
        lines.append(f"- Verification: {verification_line(run.verification)}")
    if run.dirty:
        lines.append("- ⚠️ the agent left uncommitted changes; hangar did not commit them")
    if run.sensitive:
        paths = ", ".join(f"`{p}`" for p in run.sensitive[:10])
        lines.append(f"- ⚠️ sensitive paths changed: {paths}")
    for warning in run.warnings[-3:]:
        lines.append(f"- ⚠️ {warning}")
    return lines


def _agent_numbers(run: Run) -> str:
    parts = []
    if run.started_at and run.finished_at:
        parts.append(f"{run.finished_at - run.started_at:.0f}s")
    if run.agent.get("turns") is not None:
        parts.append(f"{run.agent['turns']} turns")
    if run.agent.get("cost_usd") is not None:
        parts.append(f"${run.agent['cost_usd']:.2f}")
    return f" ({', '.join(parts)})" if parts else ""


def next_step(job: Job, latest: list[Run], landed: list[int] = ()) -> str:
    if any(not r.finished for r in latest):
        return "nothing yet; this comment updates as the work moves. `/hangar cancel` stops it."
    prs = [r for r in latest if r.pr_number]
    if landed:
        return (f"nothing: #{landed[0]} has landed. `/hangar <instruction>` on the issue "
                "starts new work.")
    if len(latest) > 1 and job.winner is None and prs:
        return ("`/hangar pick N` keeps attempt N and closes the other pull requests; "
                "the ranking above is only advice.")
    if not prs:
        return ("rephrase the request with more detail and comment `/hangar <instruction>` "
                "again, or see `/hangar help`.")
    if any(r.verification and r.verification.passed is False for r in prs):
        return ("comment `/hangar <instruction>` on the pull request for another turn, or "
                "`/hangar verify` to run verification again.")
    return ("review the pull request; an approval from someone with write access lands it. "
            "`/hangar <instruction>` on the PR asks for changes.")


def land_title(request: Any) -> str:
    titles = {
        "queued": "Waiting to land",
        "updating": "Bringing the branch up to date",
        "waiting_ci": "Waiting for required checks",
        "awaiting_approval": "Waiting for an approval of this exact commit",
        "merging": "Merging",
        "landed": "Landed",
        "conflict": "Conflicts with the base branch",
        "ci_failed": "Required checks failed",
        "rejected": "GitHub refused the merge",
        "cancelled": "Landing cancelled",
        "failed": "Landing failed",
    }
    return titles.get(str(request.state), str(request.state))


def land_line(request: Any) -> str:
    text = f"**Landing #{request.pr_number}:** {land_title(request).lower()}"
    if request.merge_sha:
        text += f" as `{short(request.merge_sha)}`"
    elif request.reason:
        text += f" — {request.reason}"
    return text


def pr_title(job: Job) -> str:
    title = job.title.strip() or job.prompt.splitlines()[0][:60]
    return f"hangar: {title}"[:120]


def pr_body(job: Job, run: Run) -> str:
    lines = [
        PR_MARKER.format(job=job.id, branch=run.branch),
        f"Closes #{job.thread.number}" if not job.thread.is_pr else "",
        "",
        f"Asked by @{job.requested_by} in #{job.thread.number}:",
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
        subject = commit.get("message", "").splitlines()[0][:100] if commit.get("message") else ""
        lines.append(f"- `{short(commit.get('sha'))}` {_inline(subject)}")
    files = compare.get("files", [])
    if files:
        lines += ["", "| file | + | − |", "|---|---|---|"]
        for f in files[:50]:
            lines.append(f"| `{_inline(f['filename'])}` | {f.get('additions', 0)} "
                         f"| {f.get('deletions', 0)} |")
    lines += ["", "### Verification", "", verification_line(run.verification), ""]
    if run.sensitive:
        lines += ["⚠️ **Sensitive paths changed:** "
                  + ", ".join(f"`{_inline(p)}`" for p in run.sensitive[:20]), ""]
    lines += [agent_says(run.agent.get("summary")), "",
              "_Approve this pull request to land it; `/hangar <instruction>` asks for "
              "another turn; `/hangar help` lists every command._"]
    return "\n".join(lines)


def _inline(text: str) -> str:
    """Text placed in Markdown outside a code block: no HTML, no mentions, no pipes."""
    return (text.replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")
            .replace("@", "@\u200b").replace("`", "'"))


def verify_check_output(v: Verification) -> dict:
    if v.passed is None:
        title = "Verification could not run"
    elif v.passed:
        title = "Verification passed" + (" (flaky)" if v.flaky else "")
    else:
        title = f"Verification failed (exit {v.exit_code})"
    summary = (
        f"{verification_line(v)}\n\n"
        f"- command: `{v.command}`\n- commit: `{v.head_sha}`\n"
        f"- attempts: {v.attempts}\n- duration: {v.duration_s:.1f}s"
    )
    if v.error:
        summary += f"\n- error: {v.error}"
    text = "Output (last lines, secrets redacted):\n\n" + fenced(v.output_tail or "(no output)")
    return {"title": title, "summary": summary[:65000], "text": text[:65000]}


def agent_check_output(run: Run) -> dict:
    title = f"Agent {agent_state_text(run)}"
    facts = [f"- state: {run.state.value}", f"- exit code: {run.exit_code}"]
    if run.started_at and run.finished_at:
        facts.append(f"- duration: {run.finished_at - run.started_at:.1f}s")
    for key, label in (("turns", "turns"), ("cost_usd", "cost (USD)"),
                       ("session_id", "session")):
        if run.agent.get(key) is not None:
            facts.append(f"- {label}: {run.agent[key]}")
    if run.dirty:
        facts.append("- uncommitted changes were left in the sandbox (not published)")
    summary = "\n".join(facts)
    text = agent_says(run.agent.get("summary")) or "The agent left no summary."
    return {"title": title[:200], "summary": summary, "text": text[:65000]}
