"""`/`: a read-only page of what hangar is doing (after Prow's Deck and Tide).

First what needs a person (PRs waiting for a review, blocked PRs, paused credentials,
failed builds), then agents running, the queue with positions, lands in progress, recent
jobs with their outcome and links to GitHub. Server-rendered from the rows, everything
escaped. People signed in with GitHub (app/web/signin.py) see the repositories they can
read; operators see everything with a token: a browser signs in once at `/login`, which
keeps it in an HttpOnly cookie; scripts send `Authorization: Bearer …` as for the API.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import urlencode

from aiohttp import web

from app import render
from app.envbuilds import BUILD, EnvBuildRow
from app.landing import (
    AWAITING_REVIEW,
    FINAL,
    LandReason,
    LandRequest,
    LandState,
    auto_land_suggestions,
)
from app.models import Job, Run, RunKind, RunStage, RunState
from app.redact import public
from app.render import endings
from app.render import landing as render_landing
from app.render import pages as words
from app.render import usage as render_usage
from app.render.landing import land_line
from app.render.reasons import Why
from app.runs import Wait, queue_positions, usage_report
from app.web import access, signin
from app.web.api import usage_view
from app.web.keys import ENGINE, SETTINGS, STORE
from app.web.pages import escape, link, page, table

COOKIE = signin.TOKEN_COOKIE
RECENT_JOBS = 25
RECENT_BUILDS = 10
# Land requests that cannot go on until someone changes something.
BLOCKED = (LandState.CONFLICT, LandState.CI_FAILED, LandState.REJECTED, LandState.FAILED)


@dataclass
class FleetView:
    """What the page shows, as plain rows: built by `fleet_view`, a pure function."""

    running: list[dict] = field(default_factory=list)
    queued: list[dict] = field(default_factory=list)
    lands: list[dict] = field(default_factory=list)
    recent: list[dict] = field(default_factory=list)
    builds: list[dict] = field(default_factory=list)  # environment builds, newest first
    usage: dict[str, dict] = field(default_factory=dict)  # per model credential (the API's)
    # What needs a person, shown first.
    reviews: list[dict] = field(default_factory=list)  # verified PRs waiting for a review
    blocked: list[dict] = field(default_factory=list)  # PRs that cannot land as they are
    paused: list[dict] = field(default_factory=list)  # model credentials no agent starts on
    failed_builds: list[dict] = field(default_factory=list)  # the latest build failed
    suggestions: list[dict] = field(default_factory=list)  # auto-land, from the history


def elapsed(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d {seconds % 86400 // 3600}h"


def fleet_view(jobs: list[Job], runs: list[Run], lands: list[LandRequest],
               positions: dict[str, int], now: float,
               builds: Sequence[EnvBuildRow] = (), usage: dict[str, dict] | None = None,
               history: Sequence[LandRequest] = ()) -> FleetView:
    """`history`: the land requests that ended, for the approval history's suggestions."""
    view = FleetView(usage=dict(usage or {}))
    job_by_id = {j.id: j for j in jobs}
    runs_by_job: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        runs_by_job[run.job_id].append(run)
    for run in sorted(runs, key=lambda r: r.started_at or r.queued_at):
        job = job_by_id.get(run.job_id)
        if job is None or run.finished:
            continue
        where = {"repo": job.thread.repo, "issue": job.thread.number, "job": job.id,
                 "attempt": run.attempt, "turn": run.turn, "kind": run.kind}
        if run.state != RunState.QUEUED:  # the agent works, or its work is published
            view.running.append({**where, "stage": render.run_line(run),
                                 "elapsed": elapsed(now - (run.started_at or now))})
        elif run.state == RunState.QUEUED and run.id in positions:
            view.queued.append({**where, "position": positions[run.id],
                                "credential": _credential(run),
                                "waiting": elapsed(now - run.queued_at),
                                "for": _waits_for(run, view.usage, now)})
    view.queued.sort(key=lambda q: (q["credential"], q["position"]))
    land_of = {(land.repo, land.pr_number): land for land in lands}
    for land in lands:
        if land.state in FINAL:
            continue
        view.lands.append({"repo": land.repo, "pr": land.pr_number, "state": str(land.state),
                           "reason": land.reason or "", "head": (land.head_sha or "")[:7]})
    for job in sorted(jobs, key=lambda j: j.created_at, reverse=True)[:RECENT_JOBS]:
        job_runs = runs_by_job.get(job.id, [])
        view.recent.append({
            "repo": job.thread.repo, "issue": job.thread.number, "job": job.id,
            "state": str(job.state), "requested_by": job.requested_by,
            "age": elapsed(now - job.created_at),
            "prs": sorted({r.pr_number for r in job_runs if r.pr_number}),
            "outcome": _job_outcome(job, job_runs, land_of),
        })
    view.suggestions = [{"repo": s.repo, "paths": s.paths, "landed": s.landed}
                        for s in auto_land_suggestions(list(history), runs)]
    for build in sorted(builds, key=lambda b: b.created_at, reverse=True)[:RECENT_BUILDS]:
        view.builds.append({
            "repo": build.repo, "environment": build.environment, "provider": build.provider,
            "version": build.version, "state": str(build.state), "reason": build.reason,
            "age": elapsed(now - build.created_at), "error": build.error or ""})
    _needs(view, jobs, runs_by_job, land_of, builds, now)
    return view


def _needs(view: FleetView, jobs: list[Job], runs_by_job: dict[str, list[Run]],
           land_of: dict[tuple[str, int], LandRequest], builds: Sequence[EnvBuildRow],
           now: float) -> None:
    """What waits for a person: a verified PR for a review, a PR that cannot land as it is
    (conflicts, failing checks or verification, a rule hangar cannot meet), a paused
    model credential, an environment whose latest build failed."""
    for job in sorted(jobs, key=lambda j: j.created_at):
        latest: dict[int, Run] = {}
        for run in runs_by_job.get(job.id, []):
            if run.pr_number and run.kind != RunKind.VERIFY and (
                    run.pr_number not in latest
                    or (run.turn, run.queued_at) > (latest[run.pr_number].turn,
                                                    latest[run.pr_number].queued_at)):
                latest[run.pr_number] = run
        for pr, run in sorted(latest.items()):
            if job.winner is not None and run.attempt != job.winner:
                continue  # a discarded attempt needs nobody
            land = land_of.get((job.thread.repo, pr))
            where = {"repo": job.thread.repo, "pr": pr, "issue": job.thread.number,
                     "job": job.id}
            if land is not None and land.state in FINAL:
                continue
            if land is not None and (land.state in BLOCKED
                                     or land.reason_code == LandReason.GATE_CANNOT):
                view.blocked.append({**where, "why": land_line(land)})
            elif not run.finished:
                continue
            elif run.verification is not None and run.verification.passed is not True:
                view.blocked.append({**where,
                                     "why": render.verification_line(run.verification)})
            elif run.verification is not None and (
                    land is None or land.state in AWAITING_REVIEW):
                view.reviews.append({**where, "why": words.REVIEW_WAITS,
                                     "waiting": elapsed(now - (run.finished_at or now))})
    for name, usage in sorted(view.usage.items()):
        if usage.get("paused"):
            view.paused.append({"credential": name,
                                "why": _pause_text(usage["paused"], now)})
    newest: dict[tuple[str, str, str], EnvBuildRow] = {}
    for build in sorted(builds, key=lambda b: b.created_at):
        newest[(build.repo, build.environment, build.provider)] = build
    for build in newest.values():
        if str(build.state) == "failed":
            view.failed_builds.append({
                "repo": build.repo, "environment": build.environment,
                "provider": build.provider, "version": build.version,
                "error": build.error or "", "age": elapsed(now - build.created_at)})


def _job_outcome(job: Job, runs: list[Run], land_of: dict[tuple[str, int], LandRequest]
                 ) -> str:
    """What happened: landed, closed, failed with its reason, else the latest turn."""
    if job.winner is not None:
        runs = [r for r in runs if r.attempt == job.winner]
    for pr in sorted({r.pr_number for r in runs if r.pr_number}):
        land = land_of.get((job.thread.repo, pr))
        if land is not None and land.state == LandState.LANDED:
            return _picked(job, words.OUTCOME_LANDED)
        if land is not None and land.reason_code == LandReason.PR_CLOSED:
            return _picked(job, words.OUTCOME_CLOSED)
    done = [r for r in runs if r.finished and r.kind != RunKind.VERIFY]
    if done:
        last = max(done, key=lambda r: (r.attempt, r.turn))
        if last.ending and last.ending.get("code") not in ("changes", "no_changes",
                                                           "cancelled"):
            return _picked(job, words.outcome_failed(render.ending_cause(last)))
        if last.stage == RunStage.ERROR:
            return _picked(job, words.outcome_failed(render.run_line(last)))
    return _picked(job, _outcome(runs))


def _picked(job: Job, outcome: str) -> str:
    return words.picked_outcome(job.winner, outcome) if job.winner is not None else outcome


def _waits_for(run: Run, usage: dict[str, dict], now: float) -> str:
    """What a queued run waits for: its credential's pause, else a free slot."""
    paused = (usage.get(_credential(run)) or {}).get("paused")
    if paused:
        return f"the model's usage ({_pause_text(paused, now)})"
    if (run.waiting or {}).get("code") == Wait.SANDBOX:
        return endings.waiting(Why(Wait.SANDBOX)).removeprefix("waiting for ")
    return endings.waiting(Why(Wait.SLOT)).removeprefix("queued: ")


def _credential(run: Run) -> str:
    return run.env.get("model_credential_env") or run.env.get("harness") or "unknown"


def _outcome(runs: list[Run]) -> str:
    """The latest turn's result in words, verification included when it ran."""
    done = [r for r in runs if r.finished and r.kind != RunKind.VERIFY]
    if not done:
        return "working" if runs else "starting"
    last = max(done, key=lambda r: (r.attempt, r.turn))
    words = (last.outcome or str(last.stage)).replace("_", " ")
    if last.verification is not None:
        passed = last.verification.passed
        words += ", verified" if passed else (", verification failed" if passed is False
                                             else ", verification did not run")
    return words


def render_fleet(view: FleetView, web_url: str, now: float) -> str:
    def issue(row: dict) -> str:
        return link(f"{web_url}/{row['repo']}/issues/{row['issue']}",
                    f"{row['repo']}#{row['issue']}")

    def pr(repo: str, number: int) -> str:
        return link(f"{web_url}/{repo}/pull/{number}", f"#{number}")

    parts = ["<h1>hangar</h1>", f"<p class=muted>{len(view.running)} running · "
             f"{len(view.queued)} queued · {len(view.lands)} landing · as of "
             f"{escape(time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(now)))}</p>"]
    parts.append(_render_needs(view, issue, pr))
    parts.append("<section id=running><h2>Agents running</h2>" + (table(
        ["issue", "attempt", "kind", "stage", "elapsed"],
        [[issue(r), f"{r['attempt']}.{r['turn']}", escape(r["kind"]), escape(r["stage"]),
          escape(r["elapsed"])] for r in view.running])
        if view.running else "<p class=muted>No agent is running.</p>") + "</section>")
    parts.append("<section id=queue><h2>Queue</h2>" + (table(
        ["#", "credential", "issue", "kind", "waiting", "for"],
        [[escape(str(q["position"])), escape(q["credential"]), issue(q), escape(q["kind"]),
          escape(q["waiting"]), escape(q["for"])] for q in view.queued])
        if view.queued else "<p class=muted>Nothing is waiting.</p>") + "</section>")
    parts.append("<section id=lands><h2>Lands in progress</h2>" + (table(
        ["pull request", "state", "head", "why"],
        [[escape(land["repo"]) + " " + pr(land["repo"], land["pr"]),
          f"<span class={_tone(land['state'])}>{escape(land['state'])}</span>",
          f"<code>{escape(land['head'])}</code>", escape(land["reason"])]
         for land in view.lands])
        if view.lands else "<p class=muted>Nothing is landing.</p>") + "</section>")
    parts.append("<section id=recent><h2>Recent jobs</h2>" + (table(
        ["issue", "state", "outcome", "PRs", "asked by", "age"],
        [[issue(j) + " · " + link(f"/jobs/{j['job']}", words.VIEW_JOB),
          f"<span class={_tone(j['state'])}>{escape(j['state'])}</span>",
          escape(j["outcome"]), " ".join(pr(j["repo"], n) for n in j["prs"]),
          escape(j["requested_by"]), escape(j["age"])] for j in view.recent])
        if view.recent else "<p class=muted>No jobs yet.</p>") + "</section>")
    if view.usage:  # a section only where there is something to show
        parts.append("<section id=usage><h2>Model usage per credential</h2>" + table(
            ["credential", "running", "queued", "turns", "cost", "usage", "new agents",
             "last rate limit"],
            [[escape(name), escape(f"{u['running']} of {u['max_concurrent']}"),
              escape(str(u["queued"])), escape(str(u["agent_turns"] or u["turns"])),
              escape(_cost(u)), _windows(u.get("windows") or [], now),
              _paused(u.get("paused"), now), escape(_rate_limit(u.get("rate_limit")))]
             for name, u in sorted(view.usage.items())]) + "</section>")
    if view.builds:
        parts.append("<section id=builds><h2>Environment builds</h2>" + table(
            ["repository", "environment", "version", "state", "why", "age"],
            [[escape(b["repo"]), escape(f"{b['environment']} ({b['provider']})"),
              escape(str(b["version"])),
              f"<span class={_tone(b['state'])}>{escape(b['state'])}</span>"
              + (f"<br><span class=muted>{escape(b['error'][:200])}</span>"
                 if b["error"] else ""),
              escape(b["reason"]), escape(b["age"])] for b in view.builds]) + "</section>")
    if view.suggestions:
        parts.append("<section id=suggestions><h2>Suggestions</h2><ul>" + "".join(
            f"<li>{escape(render_landing.auto_land_suggestion(**s))}</li>"
            for s in view.suggestions) + "</ul></section>")
    return "".join(parts)


def _render_needs(view: FleetView, issue, pr) -> str:
    """The first section: what waits for a person, or a line saying nothing does."""
    parts = []
    if view.reviews:
        parts.append(f"<h2>{escape(words.NEEDS['reviews'])}</h2>" + table(
            ["pull request", "issue", "why", "waiting"],
            [[escape(r["repo"]) + " " + pr(r["repo"], r["pr"]), issue(r), escape(r["why"]),
              escape(r["waiting"])] for r in view.reviews]))
    if view.blocked:
        parts.append(f"<h2>{escape(words.NEEDS['blocked'])}</h2>" + table(
            ["pull request", "issue", "why"],
            [[escape(b["repo"]) + " " + pr(b["repo"], b["pr"]), issue(b),
              f"<span class=bad>{escape(b['why'])}</span>"] for b in view.blocked]))
    if view.paused:
        parts.append(f"<h2>{escape(words.NEEDS['paused'])}</h2>" + table(
            ["credential", "why"],
            [[escape(p["credential"]), f"<span class=bad>{escape(p['why'])}</span>"]
             for p in view.paused]))
    if view.failed_builds:
        parts.append(f"<h2>{escape(words.NEEDS['failed_builds'])}</h2>" + table(
            ["repository", "environment", "version", "why", "age"],
            [[escape(b["repo"]), escape(f"{b['environment']} ({b['provider']})"),
              escape(str(b["version"])), f"<span class=bad>{escape(b['error'][:200])}</span>",
              escape(b["age"])] for b in view.failed_builds]))
    body = "".join(parts) or f"<p class=muted>{escape(words.NOTHING_NEEDS_YOU)}</p>"
    return f"<section id=needs>{body}</section>"


def _cost(usage: dict) -> str:
    unknown = usage.get("cost_unknown_turns") or 0
    more = f" + {unknown} turn(s) of unknown cost" if unknown else ""
    return f"${usage.get('cost_usd') or 0:.2f}{more}"


def _windows(windows: list[dict], now: float) -> str:
    """Each window the model reported: '7-day 91% (resets Tue 09:12 UTC)'."""
    rows = []
    for w in sorted(windows, key=lambda w: -w["utilization"]):
        reset = (f" (resets {render_usage.when(w['reset_at'], now)})" if w.get("reset_at")
                 else "")
        name = render_usage.WINDOWS.get(w["window"], w["window"])
        rows.append(f"<span id=window-{escape(w['window'])}>{escape(name)} "
                    f"{escape(render_usage.percent(w['utilization']))}{escape(reset)}</span>")
    return "<br>".join(rows) or "<span class=muted>no reading yet</span>"


def _paused(paused: dict | None, now: float) -> str:
    if not paused:
        return "<span class=ok>start</span>"
    return f"<span class=bad id=paused>{escape(_pause_text(paused, now))}</span>"


def _pause_text(paused: dict, now: float) -> str:
    name = render_usage.WINDOWS.get(paused["window"], paused["window"])
    until = (f"until {render_usage.when(paused['until'], now)}" if paused.get("until")
             else "until a reading below the threshold or a resume")
    what = ("refused by the model" if paused.get("refused")
            else f"{name} at {render_usage.percent(paused['utilization'])} ≥ "
                 f"{paused['threshold_pct']:g}%")
    return f"paused: {what}, {until}"


def _rate_limit(report) -> str:
    if not report:
        return ""
    if isinstance(report, dict):
        return ", ".join(f"{k}: {v}" for k, v in report.items())[:200]
    return str(report)[:200]


def _tone(state: str) -> str:
    if state in ("done", "landed", "succeeded"):
        return "ok"
    if state in ("failed", "ci_failed", "conflict", "rejected", "cancelled"):
        return "bad"
    return "wait"


# -- the routes --------------------------------------------------------------------------


def setup(app: web.Application) -> None:
    app.router.add_get("/", fleet_page)
    app.router.add_get("/login", login_page)
    app.router.add_post("/login", login)


def _pages_off(request: web.Request) -> web.Response | None:
    """The pages answer once people can sign in with GitHub or an API token exists."""
    if request.app[signin.SIGNIN].enabled or access.api_enabled(request.app[STORE],
                                                                 request.app[SETTINGS]):
        return None
    return page("hangar", "<h1>hangar</h1><p>The fleet page is off, as is the API: set "
                "HANGAR_CLIENT_ID, HANGAR_CLIENT_SECRET and HANGAR_PUBLIC_URL for sign-in with "
                "GitHub, or HANGAR_API_TOKEN to a long random string, or make a token with "
                "<code>hangar token create NAME --scope read</code>.</p>", status=503)


async def fleet_page(request: web.Request) -> web.Response:
    if (off := _pages_off(request)) is not None:
        return off
    who = signin.viewer(request)
    if who is None:
        raise web.HTTPFound(signin.login_url(request, "/"))
    engine = request.app[ENGINE]
    store = engine.store
    now = time.time()
    jobs, runs = store.all("job", Job), store.all("run", Run)
    # Every land request, finished ones too: a job's outcome says it landed or was closed.
    lands, builds = store.all("land", LandRequest), store.all(BUILD, EnvBuildRow)
    if not who.operator:  # a person sees the repositories they can read on GitHub
        readable = {repo for repo, installation in {(j.thread.repo, j.thread.installation_id)
                                                    for j in jobs}
                    if await signin.can_read(request, who, repo, installation)}
        jobs = [j for j in jobs if j.thread.repo in readable]
        shown = {j.id for j in jobs}
        runs = [r for r in runs if r.job_id in shown]
        lands = [land for land in lands if land.repo in readable]
        builds = [b for b in builds if b.repo in readable]
    settings = request.app[SETTINGS]
    view = fleet_view(jobs, runs, lands, queue_positions(engine), now, builds,
                      usage_view(runs, settings.max_concurrent_agents,
                                 usage_report(engine))["credentials"],
                      history=lands)
    # The page shows others' words (an agent's, git's): masked of every secret.
    return page("hangar", public(signin.who_line(who)
                                 + render_fleet(view, settings.git_base_url, now)),
                headers={"Refresh": "15"})


async def login_page(request: web.Request, problem: str = "") -> web.Response:
    warning = f"<p class=bad>{escape(problem)}</p>" if problem else ""
    next_path = signin.local_path(request.query.get("next"))
    github = (f"<section><p>{escape(words.SIGN_IN_HINT)}</p><p>"
              + link("/login/github?" + urlencode({"next": next_path}),
                     words.SIGN_IN_WITH_GITHUB).replace("<a ", "<a id=sign-in-github ", 1)
              + "</p></section>") if request.app[signin.SIGNIN].enabled else ""
    return page("hangar: sign in", (
        f"<h1>hangar</h1>{github}<form class=card method=post action="
        f"\"/login?{escape(urlencode({'next': next_path}))}\">"
        f"{warning}<label for=token>{escape(words.SIGN_IN_TOKEN)}</label>"
        "<input type=password id=token name=token autocomplete=current-password>"
        "<button type=submit id=sign-in>Sign in</button></form>"),
        status=401 if problem else 200)


async def login(request: web.Request) -> web.Response:
    if (off := _pages_off(request)) is not None:
        return off
    token = str((await request.post()).get("token", ""))
    principal = access.authenticate(request.app[STORE], request.app[SETTINGS],
                                    f"Bearer {token}")
    if principal is None or not principal.allows("read"):
        return await login_page(request, "That is not a live hangar token with the read "
                                         "scope.")
    response = web.HTTPFound(signin.local_path(request.query.get("next")))
    response.set_cookie(COOKIE, token, httponly=True, samesite="Strict", path="/",
                        secure=request.secure, max_age=12 * 3600)
    raise response
