"""The pure rules of auto-fix: what counts as the same failure, when a turn may start,
and what the turn's prompt says."""

from __future__ import annotations

import pytest

from app.autofix import (
    EVIDENCE_CHARS,
    PROMPT_CHARS,
    TRUNCATED,
    AutofixRow,
    Failure,
    failing_lines,
    failure_signature,
    prompt_for_failures,
    prompt_for_review,
    why_not,
)
from app.repoconfig import AutofixPolicy

UNITTEST_OUTPUT = """```
F
======================================================================
FAIL: test_negative (ci_test.NegativeTest.test_negative)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "{root}/repo/ci_test.py", line 8, in test_negative
    self.assertEqual(add(-2, -3), -5)
AssertionError: {value} != -5

----------------------------------------------------------------------
Ran 2 tests in {seconds}s

FAILED (failures=1)
```"""


def ci_failure(value: int = 5, root: str = "/tmp/fakehub-ci-a1b2c3", seconds: str = "0.001",
               name: str = "ci / test") -> Failure:
    text = UNITTEST_OUTPUT.format(value=value, root=root, seconds=seconds)
    return Failure(name=name, title=f"{name}: failure", summary="`make test` exited with code 1",
                   details=[text])


# -- failure_signature ---------------------------------------------------------------------

SAME = [
    ("another checkout directory and duration",
     [ci_failure()], [ci_failure(root="/home/runner/work/x9y8", seconds="2.417")]),
    ("the failures in another order",
     [ci_failure(), Failure(name="lint", title="3 problems")],
     [Failure(name="lint", title="3 problems"), ci_failure()]),
    ("another commit sha and time in the log",
     [Failure(name="build", details=["error: build of 4f2a9c1e failed at 2026-11-29T23:01:02Z"])],
     [Failure(name="build", details=["error: build of 9b8e7d6c failed at 2026-11-30T01:00:00Z"])]),
    ("lines after the first failing ones",
     [Failure(name="t", details=["FAIL: a\nAssertionError: 1\n" + "x\n" * 5 + "tail 1"])],
     [Failure(name="t", details=["FAIL: a\nAssertionError: 1\n" + "x\n" * 5 + "tail 2"])]),
]

DIFFERENT = [
    ("another assertion", [ci_failure(5)], [ci_failure(15)]),
    ("another check failed", [ci_failure()], [ci_failure(name="ci / lint")]),
    ("one more check failed", [ci_failure()], [ci_failure(), Failure(name="lint", title="x")]),
    ("a status with another description",
     [Failure(name="deploy", title="quota exceeded")], [Failure(name="deploy", title="timeout")]),
]


@pytest.mark.parametrize("case,first,second", SAME, ids=[c[0] for c in SAME])
def test_the_same_failure_has_the_same_signature(case, first, second):
    assert failure_signature(first) == failure_signature(second)


@pytest.mark.parametrize("case,first,second", DIFFERENT, ids=[c[0] for c in DIFFERENT])
def test_a_different_failure_has_another_signature(case, first, second):
    assert failure_signature(first) != failure_signature(second)


def test_failing_lines_skip_fences_and_context():
    lines = failing_lines(UNITTEST_OUTPUT.format(value=5, root="/tmp/x1", seconds="0.1"))
    assert lines[0] == "FAIL: test_negative (ci_test.NegativeTest.test_negative)"
    assert "AssertionError: 5 != -5" in lines
    assert not any(line.startswith("```") or line.startswith("Ran ") for line in lines)
    # with no failing line, the first lines stand in
    assert failing_lines("step one\nstep two") == ["step one", "step two"]


# -- why_not ---------------------------------------------------------------------------------

NOW = 1_000_000.0
SIG = "abc123"
ON = AutofixPolicy()

WHY_NOT = [
    # (case, row fields, policy, signature, landing, requested, expected reason fragment)
    ("a first failure starts a turn", {}, ON, SIG, False, False, None),
    ("a new failure after one turn", {"turns": 1, "last_signature": "other"}, ON, SIG,
     False, False, None),
    ("the bound of two", {"turns": 2}, ON, SIG, False, False, "used its 2 turn(s)"),
    ("a bound from the repo's config", {"turns": 1}, AutofixPolicy(max_turns=1), SIG, False,
     False, "used its 1 turn(s)"),
    ("max_turns 0 never starts", {}, AutofixPolicy(max_turns=0), SIG, False, False,
     "used its 0 turn(s)"),
    ("the same failure as the last turn", {"turns": 1, "last_signature": SIG}, ON, SIG, False,
     False, "failed the same way"),
    ("off for the PR", {"enabled": False}, ON, SIG, False, False, "`/hangar autofix on`"),
    ("off for the repository", {}, AutofixPolicy(enabled=False), SIG, False, False,
     "off for this repository"),
    ("a human pushed a minute ago", {"last_human_push_at": NOW - 60}, ON, SIG, False, False,
     "someone pushed"),
    ("a human pushed long ago", {"last_human_push_at": NOW - 3600}, ON, SIG, False, False, None),
    ("quiet_minutes 0", {"last_human_push_at": NOW - 1}, AutofixPolicy(quiet_minutes=0), SIG,
     False, False, None),
    ("the PR is being merged", {}, ON, SIG, True, False, "being merged"),
    # a person pressed the button: only the bound and a merge hold
    ("button: off for the PR", {"enabled": False}, ON, SIG, False, True, None),
    ("button: same failure", {"turns": 1, "last_signature": SIG}, ON, SIG, False, True, None),
    ("button: human pushed", {"last_human_push_at": NOW - 5}, ON, SIG, False, True, None),
    ("button: past the bound", {"turns": 2}, ON, SIG, False, True, "used its 2 turn(s)"),
    ("button: being merged", {}, ON, SIG, True, True, "being merged"),
]


@pytest.mark.parametrize("case,fields,policy,signature,landing,requested,expected", WHY_NOT,
                         ids=[c[0] for c in WHY_NOT])
def test_why_not(case, fields, policy, signature, landing, requested, expected):
    row = AutofixRow(id="autofix-acme-widgets-7", job_id="job-1", repo="acme/widgets",
                     pr_number=7, **fields)
    reason = why_not(row, policy, signature, landing=landing, now_s=NOW, requested=requested)
    if expected is None:
        assert reason is None
    else:
        assert reason is not None and expected in reason


# -- prompts -----------------------------------------------------------------------------------


def test_the_prompt_names_each_failure_with_its_evidence():
    status = Failure(name="deploy-preview", title="quota exceeded",
                     details=["details: https://ci.example/deploy/42"])
    prompt = prompt_for_failures([ci_failure(), status], turn=1, max_turns=2)
    assert prompt.startswith("Auto-fix turn 1 of 2: CI failed")
    assert "## ci / test failed" in prompt and "## deploy-preview failed" in prompt
    assert "`make test` exited with code 1" in prompt
    assert "AssertionError: 5 != -5" in prompt
    assert "quota exceeded" in prompt and "https://ci.example/deploy/42" in prompt


SECRETS = [
    ("a GitHub token", "token ghp_" + "a" * 36, "ghp_"),
    ("a sandbox token", "push with hgs_" + "b" * 30, "hgs_"),
    ("a model key", "ANTHROPIC_API_KEY=sk-ant-" + "c" * 30, "sk-ant-"),
    ("credentials in a URL", "clone https://x-access-token:s3cr3tv4lue@github.com/a/b.git",
     "s3cr3tv4lue"),
    ("an Authorization header", "Authorization: Bearer abc.def.ghi", "abc.def.ghi"),
]


@pytest.mark.parametrize("case,line,secret", SECRETS, ids=[c[0] for c in SECRETS])
def test_secrets_in_evidence_are_redacted(case, line, secret):
    failure = Failure(name="ci / test", title=line, summary=line, details=[f"log: {line}"])
    prompt = prompt_for_failures([failure], turn=1, max_turns=2)
    assert secret not in prompt
    assert "[redacted]" in prompt
    review = prompt_for_review("rita", line, [{"path": "a.py", "line": 1, "body": line}])
    assert secret not in review


def test_each_failures_evidence_is_bounded_and_the_others_survive():
    flood = Failure(name="huge", details=["x" * (EVIDENCE_CHARS * 3)])
    small = Failure(name="small", title="the one that matters")
    prompt = prompt_for_failures([flood, small], turn=2, max_turns=2)
    assert TRUNCATED.strip() in prompt
    assert "## small failed" in prompt and "the one that matters" in prompt
    assert len(prompt) <= PROMPT_CHARS


def test_the_whole_prompt_is_bounded():
    many = [Failure(name=f"check {i}", details=["y" * EVIDENCE_CHARS]) for i in range(10)]
    prompt = prompt_for_failures(many, turn=1, max_turns=2)
    assert len(prompt) == PROMPT_CHARS and prompt.endswith(TRUNCATED)


def test_a_secret_cut_by_truncation_is_still_redacted():
    # Redaction runs before truncation: no prefix of a token is left to read.
    token = "ghp_" + "z" * 36
    # "## ci failed\n" then the log: the bound falls 10 characters into the token
    failure = Failure(name="ci", details=["x" * (EVIDENCE_CHARS - 41) + token])
    prompt = prompt_for_failures([failure], turn=1, max_turns=2)
    assert "zzzz" not in prompt


def test_the_review_prompt_carries_that_review_only():
    prompt = prompt_for_review("rita", "Please document add().", [
        {"path": "calc.py", "line": 2, "body": "say what it returns"},
        {"path": "calc.py", "line": None, "original_line": 1, "body": "and the types"},
    ])
    assert "@rita requested changes" in prompt and "only this review" in prompt
    assert "Please document add()." in prompt
    assert "- calc.py:2: say what it returns" in prompt
    assert "- calc.py:1: and the types" in prompt
