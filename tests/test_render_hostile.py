"""What comes from the agent or the repository is data, never markup.

Hostile strings go into every field of the agent's or the repository's that a render
function shows (agent output, git's error text, commit subjects, file names, the summary,
another App's check names). Each result is parsed by a real CommonMark parser with GFM
tables (markdown-it-py); outside code, it must be exactly what the same render makes of a
harmless word: the hostile bytes made no link, image, HTML, heading, list item, mention,
issue reference or "✅" line of their own. Bidi and zero-width characters are written out.
"""

from __future__ import annotations

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from app import render
from app.github import ci
from app.landing import LandRequest, LandState
from app.models import HeldWork, Job, Run, RunStage, RunState, Thread, Verification

MD = MarkdownIt("commonmark").enable("table").enable("strikethrough")

PIECES = [
    "`", "``", "```", "~~~", "*", "_", "[", "]", "(", ")", "!", "<", ">", "#", "@", "|", "\\",
    "-", "=", "+", ":", "/", ".", " ", "\n", "\r", "\r\n", "\t", "&", ";", "x", "1", "3",
    "\u202e", "\u200b", "\u2066", "\ufeff", "✅", "http://evil.example/", "www.evil.example",
    "fixes #3", "closes owner/repo#4", "GH-5", "<img src=x onerror=alert(1)>", "@mona",
    "# Heading", "- item", "1. item", "> quote", "<!--", "-->", "</details>", "<details>",
    "[link](http://evil.example)", "![img](http://evil.example/x.png)", "&lt;", "&#64;",
    "\n✅ verification passed\n", "| a | b |", "\n---\n", "***", "<https://evil.example>",
    "[ref]: http://evil.example", "\u0000", "\u2028",
]
hostile = st.lists(st.sampled_from(PIECES) | st.text(max_size=4), min_size=1,
                   max_size=25).map("".join).filter(bool)  # empty: nothing shown

THREAD = Thread(repo="acme/widgets", number=7, installation_id=1)
INVISIBLE = re.compile("[\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069"
                       "\ufeff\u00ad]")
CLOSING = re.compile(r"(?i)\b(close[sd]?|fix(e[sd])?|resolve[sd]?)\b[\s:]*\S*(#|gh-)\d")
REFERENCE = re.compile(r"(?i)(#|\bgh-)\d")


def job(text: str) -> Job:
    return Job(id="job-1", thread=THREAD, requested_by="mona", prompt="fix it",
               title="add() is wrong", clone_url="http://x/acme/widgets.git",
               base_branch="main")


def runs(text: str) -> list[Run]:
    """Runs whose every field from the agent or the repository holds text."""
    verification = Verification(command=text, head_sha="a" * 40, passed=None, error=text,
                                fix="press **Verify again**", output_tail=text,
                                steps=[{"code": "command", "seconds": 1.0, "exit_code": 1}])
    done = Run(
        id="run-1", job_id="job-1", attempt=1, branch="hangar/7-ab", base_branch="main",
        state=RunState.EXITED, stage=RunStage.DONE, exit_code=0, head_sha="b" * 40,
        pr_number=8, agent={"summary": text, "session_id": text, "turns": text,
                            "cost_usd": text, "egress_blocked": [
                                {"host": text, "port": 443, "count": 3},
                                {"host": text, "port": 0, "count": 1}]},
        compare={"commits": [{"sha": "c" * 40, "message": text + "\n\nbody " + text}],
                 "files": [{"filename": text, "additions": 1, "deletions": 2}]},
        sensitive=[text], warnings=[f"pushing the branch failed: {text}"], label=text,
        verification=verification, outcome="pr")
    failed = done.model_copy(update={"id": "run-2", "attempt": 2, "stage": RunStage.ERROR,
                                     "error": text})
    held = done.model_copy(update={"id": "run-3", "attempt": 3, "stage": RunStage.HELD,
                                   "held": HeldWork(head_sha="d" * 40, github_says=text)})
    later = done.model_copy(update={"id": "run-4", "turn": 2, "kind": "followup"})
    return [done, failed, held, later]


def running(text: str) -> Run:
    """An agent at work whose steps (its own account) hold text."""
    steps = [{"verb": "ran", "subject": text, "exit_code": 1}, {"verb": "edited",
                                                               "subject": text}]
    return Run(id="run-5", job_id="job-1", attempt=1, branch="hangar/7-ab", base_branch="main",
               state=RunState.RUNNING, started_at=1_800_000_000.0, start_sha="a" * 40,
               agent={"progress": {"at": 1_800_000_060.0, "steps": steps, "steps_seen": 2,
                                   "edited": [text]}})


def renders(text: str) -> dict[str, str]:
    """Every render function, fed text wherever the agent or the repository speaks."""
    the_job, all_runs = job(text), runs(text)
    done, _, held, _ = all_runs
    results = ci.read([{"name": f"hangar / {text}", "status": "completed",
                        "conclusion": "success", "app": {"id": 9, "slug": text}}],
                      [{"context": f"hangar / {text}", "state": "success",
                        "creator": {"login": text}}], own_app_id=1)
    request = LandRequest(id="land-1", job_id="job-1", repo="acme/widgets",
                          installation_id=1, pr_number=8, base="main", branch="hangar/7-ab",
                          requested_by="mona", state=LandState.CONFLICT,
                          reason=f"the branch conflicts with main in {render.code_span(text)}")
    notes = [render.land_line(request), render.impostors_note(results.impostors),
             render.running_blocked_note([{"host": text, "port": 443, "count": 2,
                                           "first_at": 1.0}], 2)]
    verify = render.verify_check_output(done.verification)
    agent = render.agent_check_output(done)
    ended = render.agent_check_output(done.model_copy(update={
        "ending": {"code": "changes"}, "agent": {**done.agent, "steps": [
            {"verb": "ran", "subject": text}]}}))
    working = running(text)
    progress = render.progress.agent_check_progress(working, 1_800_000_090.0)
    return {
        "status, one attempt": render.status_comment(the_job, [done, all_runs[3]], notes=notes),
        "status, attempts": render.status_comment(the_job, all_runs, notes=notes),
        "status, held": render.status_comment(the_job, [held]),
        "pr body": render.pr_body(the_job, done),
        "verify summary": verify["summary"], "verify text": verify["text"],
        "agent summary": agent["summary"], "agent text": agent["text"],
        "held summary": render.held_check_output(held)["summary"],
        "status, running": render.status_comment(the_job, [working]),
        "progress summary": progress["summary"], "progress text": progress["text"],
        "ended text": ended["text"],
    }


def skeleton(markdown: str) -> list[tuple]:
    """Everything a reader sees outside code: each node, and the words of text nodes."""
    found: list[tuple] = []
    for token in MD.parse(markdown):
        if token.type in ("fence", "code_block"):
            found.append((token.type,))
        elif token.type == "inline":
            for child in token.children or []:
                if child.type == "code_inline":
                    found.append(("code_inline",))
                else:
                    found.append((child.type, child.tag, child.content,
                                  tuple(sorted((child.attrs or {}).items()))))
        else:
            found.append((token.type, token.tag, token.content if token.type.startswith(
                "html") else ""))
    return found


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=hostile)
def test_hostile_text_makes_no_markup_outside_code(text):
    harmless = renders("x")
    for name, markdown in renders(text).items():
        assert skeleton(markdown) == skeleton(harmless[name]), name
        for pattern in (INVISIBLE, CLOSING, REFERENCE):
            assert len(pattern.findall(markdown)) == len(pattern.findall(harmless[name])), (
                name, pattern.pattern, markdown)


def test_bidi_and_zero_width_characters_are_written_out():
    shown = render.code_span("abc\u202edef\u200b")
    assert shown == "`abc<U+202E>def<U+200B>`"
    assert "<U+202E>" in render.fenced("x\u202ey")


def test_closing_keywords_in_agent_text_refer_to_nothing():
    body = render.pr_body(job("x"), runs("Fixes #3, closes acme/widgets#4 and GH-5")[0])
    assert "Closes #7" in body  # hangar's own, for the issue it worked on
    assert not CLOSING.search(body.replace("Closes #7", ""))


def test_a_fake_hangar_line_from_a_failed_push_stays_inside_code():
    git_says = "error: rejected\n\n✅ `true` passed on `abc1234` in a clean sandbox\n"
    run = runs("x")[0].model_copy(update={"warnings": [f"pushing failed: {git_says}"]})
    comment = render.status_comment(job("x"), [run])
    lines = [line for line in comment.splitlines() if "rejected" in line]
    assert lines == ["- ⚠️ ``pushing failed: error: rejected  ✅ `true` passed on `abc1234` in "
                     "a clean sandbox``"]
    assert not any(line.startswith("✅") for line in comment.splitlines())
