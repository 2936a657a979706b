"""`/jobs/<id>`: one job for the people who can read its repository (signed in with GitHub)
and for operators (a token with `read`); for anyone else the job does not exist (404, so
that a private repository's work is not confirmed).

The timeline, each run (prompt and the instructions it carried, turn, harness, how it
ended, the agent's redacted output tail, model usage and cost), verification with the
time of each step, a fan-out's ranking (or what it still waits for), the land request and
what it waits for, and links to the issue, the PR and the check runs. Server-rendered,
every value escaped; the words are app/render's.
"""

from __future__ import annotations

import time

from aiohttp import web

from app import render
from app.landing import LandRequest, land_id
from app.models import Job, Run
from app.redact import public
from app.render import fanout
from app.render import pages as words
from app.render.progress import STEPS_SHOWN, step_line
from app.web import signin
from app.web.keys import ENGINE, SETTINGS
from app.web.pages import escape, link, page, table

TAIL_CHARS = 4000


def setup(app: web.Application) -> None:
    app.router.add_get("/jobs/{job_id}", job_page)


async def job_page(request: web.Request) -> web.Response:
    job_id = request.match_info["job_id"]
    who = signin.viewer(request)
    if who is None:
        raise web.HTTPFound(signin.login_url(request, f"/jobs/{job_id}"))
    engine = request.app[ENGINE]
    job = engine.store.get("job", job_id, Job)
    if job is None or not await signin.can_read(request, who, job.thread.repo,
                                                job.thread.installation_id):
        return page("hangar", f"<h1>hangar</h1>{signin.who_line(who)}"
                    f"<p>{escape(words.NOT_FOUND)}</p>", status=404)
    runs = sorted(engine.runs_of(job.id), key=lambda r: (r.attempt, r.turn, r.queued_at))
    prs = sorted({r.pr_number for r in runs if r.pr_number})
    lands = [land for n in prs
             if (land := engine.store.get("land", land_id(job.thread.repo, n), LandRequest))]
    body = render_job(job, runs, lands, engine.store.notes(job.id),
                      request.app[SETTINGS].git_base_url, time.time())
    # The page shows others' words (the agent's, git's, the prompt): masked of every secret.
    return page(f"hangar: {job.thread.repo}#{job.thread.number}",
                public(signin.who_line(who) + body), headers={"Refresh": "15"})


def render_job(job: Job, runs: list[Run], lands: list[LandRequest],
               notes: list[tuple[float, str]], web_url: str, now: float) -> str:
    """The page's body from the rows: every value escaped here, the words app/render's."""
    repo_url = f"{web_url}/{job.thread.repo}"
    kind = "pull" if job.thread.is_pr else "issues"
    issue = link(f"{repo_url}/{kind}/{job.thread.number}",
                 f"{job.thread.repo}#{job.thread.number}")
    parts = [f"<h1>{issue} {escape(job.title)}</h1>",
             f"<section id=facts><h2>{escape(words.JOB_SECTIONS['facts'])}</h2>" + _facts([
                 (words.JOB_FACTS["issue"], issue),
                 (words.JOB_FACTS["asked_by"], escape(job.requested_by)),
                 (words.JOB_FACTS["state"], escape(str(job.state))),
                 (words.JOB_FACTS["attempts"], escape(str(job.attempts))),
                 (words.JOB_FACTS["prompt"], _pre(job.prompt)),
             ]) + "</section>"]
    parts.append(f"<section id=runs><h2>{escape(words.JOB_SECTIONS['runs'])}</h2>"
                 + ("".join(_run(job, run, repo_url) for run in runs)
                    or f"<p class=muted>{escape(words.NO_RUNS)}</p>") + "</section>")
    verified = [r for r in runs if r.verification is not None]
    parts.append(f"<section id=verification><h2>{escape(words.JOB_SECTIONS['verification'])}"
                 "</h2>" + ("".join(
                     f"<h3>{escape(f'{r.attempt}.{r.turn}')}</h3>"
                     f"<p>{escape(render.verification_line(r.verification))}</p>"
                     + (_pre("\n".join(render.verify_steps(r.verification.steps,
                                                           r.verification.command)))
                        if r.verification and r.verification.steps else "")
                     + (_pre(r.verification.output_tail[-TAIL_CHARS:])
                        if r.verification and r.verification.output_tail else "")
                     for r in verified)
                     or f"<p class=muted>{escape(words.NO_VERIFICATION)}</p>") + "</section>")
    if job.attempts > 1:
        parts.append(_ranking(job))
    parts.append(f"<section id=land><h2>{escape(words.JOB_SECTIONS['land'])}</h2>" + ("".join(
        _facts([(words.RUN_FACTS["pr"], link(f"{repo_url}/pull/{land.pr_number}",
                                             f"#{land.pr_number}")),
                (words.JOB_FACTS["state"], escape(str(land.state))),
                ("", escape(words.land_text(land)))]
               + ([("", escape(words.land_awaits(str(land.state))))]
                  if words.land_awaits(str(land.state)) else []))
        for land in lands) or f"<p class=muted>{escape(words.NO_LAND)}</p>") + "</section>")
    parts.append(f"<section id=timeline><h2>{escape(words.JOB_SECTIONS['timeline'])}</h2>"
                 + (table(["UTC", ""], [[escape(_when(at)), escape(what)]
                                        for at, what in notes])
                    if notes else f"<p class=muted>{escape(words.NO_TIMELINE)}</p>")
                 + "</section>")
    return "".join(parts)


def _ranking(job: Job) -> str:
    """A fan-out's ranking as the status comment has it, or what it still waits for."""
    said = [line for line in (fanout.grading_line(job), fanout.unfinished_line(job)) if line]
    rows = [[escape(str(entry["place"])),
             escape(str(entry["attempt"])
                    + (f" ({words.PICKED})" if job.winner == entry["attempt"] else "")),
             escape(f"#{entry['pr']}" if entry.get("pr") else "—"),
             escape(render.eligible_cell(entry)), escape(render.ranking_why(entry))]
            for entry in job.ranking]
    return (f"<section id=ranking><h2>{escape(words.JOB_SECTIONS['ranking'])}</h2>"
            + "".join(f"<p>{escape(line.replace('**', ''))}</p>" for line in said)
            + (table(words.RANKING_COLUMNS, rows) if rows
               else "" if said else f"<p class=muted>{escape(words.NO_RANKING)}</p>")
            + "</section>")


def _run(job: Job, run: Run, repo_url: str) -> str:
    agent = run.agent or {}
    picked = ""
    if job.winner is not None:
        picked = words.PICKED if run.attempt == job.winner else words.DISCARDED
    checks = [link(f"{repo_url}/runs/{check_id}", words.check_label(*key.partition("@")[::2]))
              for key, check_id in sorted(run.check_ids.items())]
    rows = [
        (words.RUN_FACTS["where"], escape(f"{run.attempt}.{run.turn}")
         + (f" <span class=muted>({escape(picked)})</span>" if picked else "")),
        (words.RUN_FACTS["kind"], escape(str(run.kind))),
        (words.RUN_FACTS["harness"], escape(str(run.env.get("harness") or ""))),
        (words.RUN_FACTS["now"], escape(render.run_line(run))),
    ]
    if run.ending:
        rows.append((words.RUN_FACTS["ended"], escape(render.ending_cause(run))))
    if run.branch:
        rows.append((words.RUN_FACTS["branch"], f"<code>{escape(run.branch)}</code>"))
    if run.pr_number:
        rows.append((words.RUN_FACTS["pr"], link(f"{repo_url}/pull/{run.pr_number}",
                                                 f"#{run.pr_number}")))
    if checks:
        rows.append((words.RUN_FACTS["checks"], " · ".join(checks)))
    if agent:
        rows.append((words.RUN_FACTS["usage"], escape(words.usage_text(agent))))
        rows.append((words.RUN_FACTS["cost"], escape(render.turn_cost(run) or "")))
    if run.prompt:
        rows.append((words.RUN_FACTS["prompt"], _pre(run.prompt)))
    for source in ("environment", "repository"):  # what the agent was told besides
        if run.instructions.get(source):
            rows.append((words.RUN_FACTS[f"told_{source}"], _pre(run.instructions[source])))
    if agent.get("output_tail"):  # redacted when the run kept it (app/runs/agent.py)
        rows.append((words.RUN_FACTS["tail"], _pre(str(agent["output_tail"])[-TAIL_CHARS:])))
    steps = agent.get("steps") or (agent.get("progress") or {}).get("steps") or []
    if steps:  # redacted when the run kept them (app/runs/progress.py)
        rows.append((words.RUN_FACTS["steps"], _pre("\n".join(
            step_line(s) for s in steps[-STEPS_SHOWN:]))))
    if agent.get("summary"):
        rows.append((words.RUN_FACTS["says"], _pre(str(agent["summary"])[-TAIL_CHARS:])))
    return f"<div class=run id=run-{escape(run.id)}>{_facts(rows)}</div>"


def _facts(rows: list[tuple[str, str]]) -> str:
    """A two-column table: a label (text) and a value (already HTML)."""
    return "<table>" + "".join(f"<tr><th>{escape(label)}</th><td>{value}</td></tr>"
                               for label, value in rows) + "</table>"


def _pre(text: str) -> str:
    return f"<pre>{escape(text)}</pre>"


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at))
