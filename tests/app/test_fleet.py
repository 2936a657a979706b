"""The fleet page's pure parts: what it shows from the rows, and that it escapes."""

from __future__ import annotations

import pytest

from app.landing import LandRequest, LandState
from app.models import Job, Run, RunStage, RunState, Thread, Verification
from app.web.fleet import elapsed, fleet_view, render_fleet

NOW = 1_000_000.0


def job(number: int, repo: str = "acme/widgets", **fields) -> Job:
    return Job(id=f"job-{number}", thread=Thread(repo=repo, number=number, installation_id=1),
               requested_by="mona", prompt="fix", clone_url="x", base_branch="main",
               created_at=NOW - 100 * number, **fields)


def run(job_id: str, **fields) -> Run:
    return Run(job_id=job_id, branch="hangar/1", base_branch="main", queued_at=NOW - 50,
               **fields)


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0s"), (59, "59s"), (61, "1m 01s"), (3600, "1h 00m"), (90061, "1d 1h"), (-5, "0s")])
def test_elapsed(seconds, text):
    assert elapsed(seconds) == text


def test_the_view_sorts_runs_into_running_queued_and_finished():
    jobs = [job(1), job(2), job(3)]
    running = run("job-1", state=RunState.RUNNING, started_at=NOW - 75)
    waiting = run("job-2", env={"model_credential_env": "ANTHROPIC_API_KEY"})
    finished = run("job-3", state=RunState.EXITED, stage=RunStage.DONE, outcome="pr",
                   pr_number=7, verification=Verification(command="t", head_sha="a",
                                                          passed=True))
    view = fleet_view(jobs, [running, waiting, finished], [], {waiting.id: 1}, NOW)
    assert [(r["issue"], r["elapsed"]) for r in view.running] == [(1, "1m 15s")]
    assert [(q["issue"], q["position"], q["credential"]) for q in view.queued] == [
        (2, 1, "ANTHROPIC_API_KEY")]
    assert [(j["issue"], j["outcome"], j["prs"]) for j in view.recent] == [
        (1, "working", []), (2, "working", []), (3, "pr, verified", [7])]


def test_landed_and_cancelled_lands_are_not_in_progress():
    def land(pr: int, state: LandState) -> LandRequest:
        return LandRequest(id=f"l{pr}", job_id="job-1", repo="acme/widgets", installation_id=1,
                           pr_number=pr, base="main", branch="b", requested_by="mona",
                           state=state)
    view = fleet_view([], [], [land(1, LandState.WAITING_CI), land(2, LandState.LANDED),
                               land(3, LandState.CANCELLED)], {}, NOW)
    assert [(x["pr"], x["state"]) for x in view.lands] == [(1, "waiting_ci")]


def test_everything_shown_is_escaped():
    hostile = "<script>alert(1)</script>"
    lands = [LandRequest(id="l", job_id="j", repo="acme/widgets", installation_id=1,
                         pr_number=3, base="main", branch="b", requested_by="m",
                         state=LandState.CONFLICT, reason=hostile)]
    view = fleet_view([job(1).model_copy(update={"requested_by": hostile})], [], lands, {}, NOW)
    html = render_fleet(view, 'https://github.com/"onmouseover=x', NOW)
    assert "<script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert '"onmouseover' not in html


def test_environment_builds_have_a_section_only_when_there_are_some():
    from app.envbuilds.rows import EnvBuildRow

    assert "Environment builds" not in render_fleet(fleet_view([], [], [], {}, NOW), "w", NOW)
    build = EnvBuildRow(id="b1", version=3, repo="acme/widgets", environment="default",
                        provider="docker", key_digest="k", image_id="i", config_digest="c",
                        state="failed", error="<b>pip</b> failed", created_at=NOW - 30)
    html = render_fleet(fleet_view([], [], [], {}, NOW, [build]), "w", NOW)
    assert "<h2>Environment builds</h2>" in html
    assert "default (docker)" in html and "&lt;b&gt;pip&lt;/b&gt; failed" in html


def test_model_usage_per_credential_is_shown_when_there_is_some():
    from app.web.api import usage_view

    assert "Model usage" not in render_fleet(fleet_view([], [], [], {}, NOW), "w", NOW)
    runs = [run("job-1", state=RunState.RUNNING, started_at=NOW - 5,
                env={"model_credential_env": "ANTHROPIC_API_KEY"},
                agent={"turns": 4, "cost_usd": 0.5, "rate_limit": {"status": "<allowed>"}}),
            run("job-2", env={"model_credential_env": "ANTHROPIC_API_KEY"})]
    usage = usage_view(runs, 3)["credentials"]
    html = render_fleet(fleet_view([], runs, [], {}, NOW, usage=usage), "w", NOW)
    assert "<h2>Model usage per credential</h2>" in html
    assert "<td>ANTHROPIC_API_KEY</td><td>1 of 3</td><td>1</td><td>4</td><td>$0.50</td>" in html
    assert "status: &lt;allowed&gt;" in html


def test_each_credentials_windows_the_pause_and_its_end_are_shown():
    from app.web.api import usage_view

    reset = NOW + 2 * 86400
    windows = [{"window": "7d", "utilization": 0.913, "reset_at": reset, "status": None,
                "source": "anthropic headers", "at": NOW - 5},
               {"window": "5h", "utilization": 0.34, "reset_at": NOW + 600, "status": None,
                "source": "anthropic headers", "at": NOW - 5},
               {"window": "<b>odd</b>", "utilization": 0.1, "reset_at": None, "status": None,
                "source": "claude stream", "at": NOW - 5}]
    paused = {"window": "7d", "utilization": 0.913, "threshold_pct": 90.0, "until": reset,
              "refused": False, "source": "anthropic headers"}
    runs = [run("job-1", env={"model_credential_env": "PLAN"})]
    usage = usage_view(runs, 3, {"PLAN": {"windows": windows, "paused": paused,
                                          "resumed": None}})["credentials"]
    html = render_fleet(fleet_view([], runs, [], {}, NOW, usage=usage), "w", NOW)
    assert "7-day 91% (resets Wed 13:46 UTC)" in html  # within a point of 0.913
    assert "5-hour 34% (resets Mon 13:56 UTC)" in html
    assert "&lt;b&gt;odd&lt;/b&gt; 10%" in html and "<b>odd" not in html
    assert "paused: 7-day at 91% ≥ 90%, until Wed 13:46 UTC" in html
    usage["PLAN"]["paused"] = None
    html = render_fleet(fleet_view([], runs, [], {}, NOW, usage=usage), "w", NOW)
    assert "<span class=ok>start</span>" in html


def test_a_queued_run_says_what_it_waits_for():
    paused = {"window": "7d", "utilization": 0.913, "threshold_pct": 90.0,
              "until": NOW + 1800, "refused": False, "source": "anthropic headers"}
    slot = run("job-1", env={"model_credential_env": "KEY"})
    held = run("job-2", env={"model_credential_env": "PLAN"})
    from app.web.api import usage_view

    usage = usage_view([slot, held], 3, {"PLAN": {"windows": [], "paused": paused,
                                                  "resumed": None}})["credentials"]
    view = fleet_view([job(1), job(2)], [slot, held], [], {slot.id: 1, held.id: 1}, NOW,
                      usage=usage)
    said = {q["issue"]: q["for"] for q in view.queued}
    assert said[1] == "waiting for a free agent slot"
    assert said[2].startswith("the model's usage (paused: 7-day at 91% ≥ 90%, until ")
    html = render_fleet(view, "https://github.com", NOW)
    assert "usage (paused: 7-day at 91% ≥ 90%, until " in html


def _land(pr: int, state: LandState, **fields) -> LandRequest:
    return LandRequest(id=f"l{pr}", job_id=f"job-{pr}", repo="acme/widgets",
                       installation_id=1, pr_number=pr, base="main", branch="b",
                       requested_by="mona", state=state, **fields)


def _verified(number: int, pr: int, passed: bool | None = True, **fields) -> Run:
    return run(f"job-{number}", state=RunState.EXITED, stage=RunStage.DONE, outcome="pr",
               pr_number=pr, finished_at=NOW - 60,
               verification=Verification(command="pytest", head_sha="a" * 40, passed=passed),
               **fields)


def test_what_needs_a_person_comes_first_reviews_blocked_paused_and_failed_builds():
    from app.envbuilds.rows import EnvBuildRow

    jobs = [job(n) for n in range(1, 7)]
    runs = [_verified(1, 11), _verified(2, 12), _verified(3, 13, passed=False),
            _verified(4, 14), _verified(5, 15), _verified(6, 16)]
    lands = [_land(12, LandState.CONFLICT, reason="conflicts in calc.py"),
             _land(14, LandState.AWAITING_APPROVAL, reason_code="gate_cannot",
                   reason="a rule hangar cannot meet"),
             _land(15, LandState.LANDED), _land(16, LandState.AWAITING_APPROVAL)]

    def build(version: int, state: str, env: str) -> EnvBuildRow:
        return EnvBuildRow(id=f"b{version}", version=version, repo="acme/widgets",
                           environment=env, provider="docker", key_digest="k", image_id="i",
                           config_digest="c", state=state, error=f"pip {version} failed",
                           created_at=NOW - 100 + version)
    builds = [build(1, "failed", "default"), build(2, "succeeded", "default"),
              build(3, "failed", "gpu")]
    from app.web.api import usage_view

    paused = {"window": "7d", "utilization": 0.95, "threshold_pct": 90.0, "until": None,
              "refused": False}
    usage = usage_view([run("job-1", env={"model_credential_env": "PLAN"})], 3,
                       {"PLAN": {"windows": [], "paused": paused, "resumed": None}}
                       )["credentials"]
    view = fleet_view(jobs, runs, lands, {}, NOW, builds, usage)
    assert [r["pr"] for r in view.reviews] == [16, 11]  # the longest waiting first
    blocked = {b["pr"]: b["why"] for b in view.blocked}
    assert set(blocked) == {12, 13, 14}
    assert "conflicts in calc.py" in blocked[12] and "failed" in blocked[13]
    assert "cannot meet" in blocked[14]
    assert [p["credential"] for p in view.paused] == ["PLAN"]
    assert [b["environment"] for b in view.failed_builds] == ["gpu"]  # default built again
    html = render_fleet(view, "https://github.com", NOW)
    assert html.index("id=needs") < html.index("id=running")
    assert "Pull requests waiting for your review" in html and "Pull requests blocked" in html
    empty = render_fleet(fleet_view([], [], [], {}, NOW), "w", NOW)
    assert "Nothing needs you" in empty


def test_outcomes_say_what_happened_and_picked_attempts_differ_from_discarded():
    landed, closed = job(1), job(2)
    failed, tried = job(3), job(4).model_copy(update={"winner": 2, "attempts": 2})
    runs = [_verified(1, 11), _verified(2, 12),
            run("job-3", state=RunState.EXITED, stage=RunStage.DONE, exit_code=1,
                ending={"code": "agent_failed", "exit_code": 1}),
            _verified(4, 41, attempt=1), _verified(4, 42, attempt=2)]
    lands = [_land(11, LandState.LANDED),
             _land(12, LandState.CANCELLED, reason_code="pr_closed")]
    view = fleet_view([landed, closed, failed, tried], runs, lands, {}, NOW)
    outcome = {j["issue"]: j["outcome"] for j in view.recent}
    assert outcome[1] == "landed" and outcome[2] == "closed without landing"
    assert outcome[3].startswith("failed: ") and len(outcome[3]) > len("failed: ")
    assert outcome[4].startswith("attempt 2 picked: ")
    assert [r["pr"] for r in view.reviews] == [42]  # the discarded attempt waits for nobody


def test_a_run_past_its_agent_shows_its_real_stage():
    jobs = [job(1)]
    verifying = run("job-1", state=RunState.EXITED, stage=RunStage.VERIFYING,
                    started_at=NOW - 30)
    view = fleet_view(jobs, [verifying], [], {}, NOW)
    assert "verifying in a clean sandbox" in view.running[0]["stage"]


def landed(pr: int, files: list[str], *, turns: int = 1, approved_by=("rita",),
           updated: bool = False) -> tuple[LandRequest, list[Run]]:
    """A land request that landed PR `pr`, and the job's turns on it (the last changed
    `files`); `updated`: approved at the agent's head, landed after hangar's clean update."""
    made = f"{pr:040x}"
    runs = [run(f"job-{pr}", pr_number=pr, turn=t, head_sha=f"{pr + 100 * t:040x}"
                if t > 1 else made,
                compare={"files": [{"filename": f} for f in files]})
            for t in range(1, turns + 1)]
    head = runs[-1].head_sha
    request = LandRequest(
        id=f"l{pr}", job_id=f"job-{pr}", repo="acme/widgets", installation_id=1,
        pr_number=pr, base="main", branch="b", requested_by="mona", state=LandState.LANDED,
        approved_by=list(approved_by), approved_head="f" * 40 if updated else head,
        updated_heads={"f" * 40: made} if updated else {})
    return request, runs


def history(*landings) -> tuple[list[LandRequest], list[Run]]:
    return [r for r, _ in landings], [x for _, runs in landings for x in runs]


@pytest.mark.parametrize(("landings", "suggested"), [
    # five docs changes, each landed as the agent made it: auto-land for docs is suggested
    ([landed(n, ["docs/a.md"]) for n in range(1, 6)], [("docs/**", 5)]),
    ([landed(n, ["docs/a.md"], updated=n == 3) for n in range(1, 6)], [("docs/**", 5)]),
    # four are too few; one of five needed another turn; one spread over two folders
    ([landed(n, ["docs/a.md"]) for n in range(1, 5)], []),
    ([landed(n, ["docs/a.md"], turns=2 if n == 2 else 1) for n in range(1, 6)], []),
    ([landed(n, ["docs/a.md", "src/x.py"]) for n in range(1, 6)], []),
    ([landed(n, ["README.md"]) for n in range(1, 6)], []),
    # what auto-land already landed is no person's approval to learn from
    ([landed(n, ["docs/a.md"], approved_by=("policy",)) for n in range(1, 6)], []),
])
def test_a_class_that_landed_unchanged_every_time_is_suggested_for_auto_land(
        landings, suggested):
    lands, runs = history(*landings)
    view = fleet_view([], runs, [], {}, NOW, history=lands)
    assert [(s["paths"], s["landed"]) for s in view.suggestions] == suggested
    html = render_fleet(view, "https://github.com", NOW)
    assert ("landed unchanged 5 of 5 times" in html) is bool(suggested)
    assert ("hangar turns nothing on by itself" in html) is bool(suggested)
