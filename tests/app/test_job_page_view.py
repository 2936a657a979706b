"""The job page's body from rows (app/web/jobpage.render_job): what a reader of the page
learns that the status comment says too — verification's timed steps, a fan-out's ranking
and what it still waits for. The signed-in flow is tests/e2e/test_job_page.py."""

from __future__ import annotations

from app.models import Job, Run, RunState, Thread, Verification
from app.web.jobpage import render_job

NOW = 1_000_000.0


def job(**fields) -> Job:
    return Job(id="job-1", thread=Thread(repo="acme/widgets", number=7, installation_id=1),
               requested_by="mona", prompt="fix", clone_url="x", base_branch="main",
               created_at=NOW - 100, **fields)


def run(attempt: int, **fields) -> Run:
    return Run(job_id="job-1", attempt=attempt, branch=f"hangar/{attempt}",
               base_branch="main", queued_at=NOW - 50, **fields)


def page(the_job: Job, runs: list[Run]) -> str:
    return render_job(the_job, runs, [], [], "http://hub.test", NOW)


def test_verification_lists_each_step_with_its_time():
    verified = run(1, state=RunState.EXITED, head_sha="a" * 40, verification=Verification(
        command="make test", head_sha="a" * 40, passed=False, exit_code=2, steps=[
            {"code": "sandbox", "seconds": 0.4}, {"code": "install", "seconds": 12.25},
            {"code": "command", "seconds": 3.0, "exit_code": 2}]))
    body = page(job(), [verified])
    assert "clean sandbox started, head checked out: 0.4s" in body
    assert "the environment&#x27;s install step: 12.2s" in body
    assert "(attempt 1): 3.0s, exit 2" in body


def test_a_fan_out_that_waits_for_ci_says_so_and_until_when():
    waiting = job(attempts=2, grading={"waiting": {"2": "b" * 40}, "until": NOW + 600})
    body = page(waiting, [run(1), run(2)])
    assert "id=ranking" in body
    assert "waits for the repository&#x27;s CI, still running on attempt 2&#x27;s head" in body
    assert "**" not in body  # the status comment's emphasis is not shown as stars


def test_a_ranked_fan_out_shows_its_table_and_the_picked_attempt():
    ranked = job(attempts=2, winner=2, ranking=[
        {"place": 1, "attempt": 2, "run": "r2", "pr": 12, "why": "verified", "eligible": True},
        {"place": 2, "attempt": 1, "run": "r1", "pr": None, "why": "no pull request",
         "eligible": False, "gates": ["no_pr"]}])
    body = page(ranked, [run(1), run(2)])
    table = body[body.index("id=ranking"):body.index("id=land")]
    assert table.index("<td>2 (picked)</td>") < table.index("<td>1</td><td>—</td>")
    assert "<td>#12</td>" in table and "<td>verified</td>" in table
    assert "<td>no: " in table


def test_a_fan_out_not_yet_ranked_says_when_it_will_be_and_a_single_job_has_no_section():
    assert "ranked once every one of them has ended" in page(job(attempts=3), [run(1)])
    assert "id=ranking" not in page(job(), [run(1)])


def test_the_instructions_a_prompt_carried_are_shown_never_hidden():
    told = run(1, prompt="fix the flaky test", instructions={
        "environment": "Run `make lint` before you finish.",
        "repository": "Never touch <migrations/>."})
    body = page(job(), [told])
    assert "Instructions from hangar&#x27;s operator" in body
    assert "Run `make lint` before you finish." in body
    assert "Instructions from the repository&#x27;s .github/hangar.yml" in body
    assert "Never touch &lt;migrations/&gt;." in body  # escaped, as every value
    assert "Instructions from" not in page(job(), [run(1, prompt="fix")])
