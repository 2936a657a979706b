"""A running agent's progress as people read it: hangar's facts outside, the agent's
steps only inside the labelled block, bounded; the status comment's lines hold no clock
that would make every reading an edit."""

from __future__ import annotations

from app import render
from app.models import Job, Run, RunState, Thread
from app.render.progress import STEPS_SHOWN, agent_check_progress, step_line, steps_block
from app.runs.progress import EDITED_KEPT, progress_of
from sandbox.harness import AgentStep

THREAD = Thread(repo="acme/widgets", number=7, installation_id=1)
JOB = Job(id="job-1", thread=THREAD, requested_by="mona", prompt="fix it", title="t",
          clone_url="http://x/acme/widgets.git", base_branch="main")
START = 1_800_000_000.0


def working(steps: list[dict], **progress) -> Run:
    return Run(id="run-1", job_id="job-1", attempt=1, branch="hangar/7-ab", base_branch="main",
               state=RunState.RUNNING, started_at=START, start_sha="a" * 40, turn=2,
               agent={"progress": {"at": START + 75, "steps": steps, **progress}})


def test_a_step_line_says_hangars_verb_the_subject_and_how_it_ended():
    assert step_line({"verb": "ran", "subject": "pytest -q", "exit_code": 1}) == (
        "ran pytest -q (exit 1)")
    assert step_line({"verb": "ran", "subject": "pytest -q", "exit_code": 0}) == "ran pytest -q"
    assert step_line({"verb": "ran", "subject": "make", "running": True}) == "ran make (running)"
    assert step_line({"verb": "ran", "subject": "x", "failed": True}) == "ran x (failed)"
    assert len(step_line({"verb": "read", "subject": "y" * 5000})) < 200


def test_only_the_last_steps_are_shown_inside_the_labelled_block():
    steps = [{"verb": "printed", "subject": f"step {n}"} for n in range(20)]
    block = steps_block(steps)
    assert block.startswith("<details><summary>The agent's latest steps (unverified)</summary>")
    assert f"step {20 - STEPS_SHOWN}" in block and f"step {19 - STEPS_SHOWN}\n" not in block
    assert steps_block([]) == ""


def test_the_check_run_has_facts_in_its_summary_and_steps_in_its_text():
    run = working([{"verb": "edited", "subject": "src/login.py"},
                   {"verb": "ran", "subject": "pytest -q", "exit_code": 1}],
                  steps_seen=9, edited=["src/login.py", "tests/test_login.py"])
    out = agent_check_progress(run, START + 75)
    assert out["title"] == "The agent is working"
    assert "- turn 2, working since 08:00 UTC (1 min 15 s as of 08:01 UTC)" in out["summary"]
    assert "- steps read so far: 9" in out["summary"]
    assert "- files edited so far: 2" in out["summary"]
    assert "pytest" not in out["summary"] and "login" not in out["summary"]  # agent's: text
    assert "ran pytest -q (exit 1)" in out["text"] and "(unverified)" in out["text"]


def test_a_secret_in_a_step_is_masked_and_markup_stays_in_the_block():
    secret = "ghp_" + "A" * 36
    out = agent_check_progress(working([{"verb": "ran", "subject":
                                         f"curl -H 'token {secret}' ``` </details> @mona"}]),
                               START + 5)
    assert secret not in out["text"] and "</details> @mona" in out["text"]
    assert out["text"].count("</details>") == 2  # the agent's, inside a fence, and the block's
    assert "````" in out["text"]  # a fence longer than the agent's backticks


def test_the_status_comment_shows_the_steps_while_the_agent_works_and_no_clock():
    run = working([{"verb": "ran", "subject": "pytest -q", "exit_code": 1}], steps_seen=1)
    comment = render.status_comment(JOB, [run])
    assert "ran pytest -q (exit 1)" in comment and "(unverified)" in comment
    assert "- turn 2, working since 08:00 UTC\n" in comment  # no "as of": no edit per reading
    later = run.model_copy(update={"agent": {"progress": {**run.agent["progress"],
                                                          "at": START + 600}}})
    assert render.status_comment(JOB, [later]) == comment
    done = run.model_copy(update={"state": RunState.EXITED, "finished_at": START + 700})
    assert "ran pytest -q" not in render.status_comment(JOB, [done])


def test_the_ended_check_run_keeps_the_last_steps():
    run = working([]).model_copy(update={
        "state": RunState.EXITED, "exit_code": 0, "ending": {"code": "changes"},
        "agent": {"steps": [{"verb": "wrote", "subject": "calc.py"}]}})
    assert "wrote calc.py" in render.agent_check_output(run)["text"]


def test_progress_keeps_files_edited_at_earlier_readings_bounded():
    first = progress_of([AgentStep(verb="edited", subject="a.py"),
                         AgentStep(verb="ran", subject="pytest")], {}, START)
    assert first["edited"] == ["a.py"] and first["steps_seen"] == 2
    # The next tail read lost a.py's step: it stays counted.
    second = progress_of([AgentStep(verb="wrote", subject="b.py")], first, START + 10)
    assert second["edited"] == ["a.py", "b.py"] and second["steps_seen"] == 2
    many = progress_of([AgentStep(verb="edited", subject=f"f{n}.py") for n in range(80)],
                       {}, START)
    assert len(many["edited"]) == EDITED_KEPT and many["edited_more"]
    many.pop("steps")
    assert render.progress.progress_facts(working([], **many))[-1] == (
        f"- files edited so far: {EDITED_KEPT} or more")
