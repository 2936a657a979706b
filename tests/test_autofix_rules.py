"""The pure rules of auto-fix: what counts as the same failure, when a turn may start,
and what the turn's prompt says; and the evidence read from GitHub's answers (GitHub
Actions logs are beyond fakehub, so gidgethub's one I/O method is faked here)."""

from __future__ import annotations

import json

import pytest
from gidgethub.abc import GitHubAPI

from app.autofix import (
    EVIDENCE_CHARS,
    PROMPT_CHARS,
    TRUNCATED,
    AutofixRow,
    Failure,
    collect_failures,
    failing_lines,
    failure_signature,
    prompt_for_failures,
    prompt_for_review,
    why_not,
)
from app.github.ops import RepoOps
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


# -- evidence, from GitHub's answers (a recording fake of gidgethub's one I/O method) -------

OWN_APP, CI_APP = 1, 2
HEAD = "a" * 40
BASE = f"/repos/acme/widgets/commits/{HEAD}"
LOG = "2026-11-29T23:00:00Z ##[group]Run pytest\nE   assert 4 == 5\nusing ghp_" + "k" * 36


def suite(app_id: int, status: str, runs: int = 1) -> dict:
    return {"app": {"id": app_id}, "status": status, "latest_check_runs_count": runs}


def check(name: str, status: str, conclusion: str | None, *, slug: str = "fakehub-ci",
          run_id: int = 10, annotations: int = 0, text: str | None = None,
          app_id: int | None = None) -> dict:
    if app_id is None:
        app_id = OWN_APP if name.startswith("hangar / ") else CI_APP
    return {"id": run_id, "name": name, "status": status, "conclusion": conclusion,
            "app": {"slug": slug, "id": app_id},
            "output": {"title": f"{name}: {conclusion}", "summary": "exit 1", "text": text,
                       "annotations_count": annotations}}


class RecordingGitHub(GitHubAPI):
    def __init__(self, answers: dict[str, tuple[int, str, object]]):
        super().__init__("hangar-tests")
        self.answers = answers
        self.calls: list[str] = []

    async def _request(self, method, url, headers, body=b""):
        path = url.removeprefix("https://api.github.com")
        self.calls.append(path)
        status, content_type, data, *link = self.answers[path]
        raw = data.encode() if isinstance(data, str) else json.dumps(data).encode()
        headers = {"content-type": content_type}
        if link:  # the next page, as GitHub's Link header names it
            headers["link"] = f'<https://api.github.com{link[0]}>; rel="next"'
        return status, headers, raw

    async def sleep(self, seconds):  # pragma: no cover - never retried here
        pass


def answers(suites: list, runs: list, statuses: list, **extra) -> dict:
    found = {
        f"{BASE}/check-suites?per_page=100": (200, "application/json",
                                              {"check_suites": suites}),
        f"{BASE}/check-runs?filter=latest&per_page=100": (200, "application/json",
                                                          {"check_runs": runs}),
        f"{BASE}/status?per_page=100": (200, "application/json", {"statuses": statuses}),
    }
    found.update(extra)
    return found


CI_DONE = [suite(CI_APP, "completed"), suite(OWN_APP, "in_progress"),
           suite(99, "queued", runs=0)]  # hangar's own suite holds `hangar / land`
LAND = check("hangar / land", "in_progress", None)

EVIDENCE = [
    # (case, suites, runs, statuses, extra answers, finished, failed names)
    ("everything green; hangar's land run and an App that never reports are not waited for",
     CI_DONE, [LAND, check("ci / test", "completed", "success")], [], {}, True, []),
    ("a check still running", [suite(CI_APP, "in_progress")],
     [check("ci / test", "in_progress", None)], [], {}, False, []),
    ("a status still pending", CI_DONE, [check("ci / test", "completed", "success")],
     [{"context": "deploy", "state": "pending"}], {}, False, []),
    ("hangar / agent's neutral is no failure", CI_DONE,
     [check("hangar / agent", "completed", "neutral"),
      check("hangar / verify", "completed", "failure", text="FAIL: test_adds")],
     [], {}, True, ["hangar / verify"]),
    ("another App's failed `hangar / verify` is no evidence, nor waited for", CI_DONE,
     [check("hangar / verify", "in_progress", None, app_id=CI_APP),
      check("hangar / verify", "completed", "failure", app_id=CI_APP),
      check("ci / test", "completed", "success")],
     [{"context": "hangar / verify", "state": "failure"}], {}, True, []),
    ("a verification that did not run starts no turn", CI_DONE,
     [check("hangar / verify", "completed", "action_required")], [], {}, True, []),
    ("cancelled, stale and action_required are for a person, not a turn", CI_DONE,
     [check("a", "completed", "cancelled"), check("b", "completed", "stale"),
      check("c", "completed", "action_required"), check("d", "completed", "startup_failure"),
      check("e", "completed", "timed_out")], [], {}, True, ["d", "e"]),
    ("an Actions run waiting is not finished", [suite(CI_APP, "completed")],
     [check("ci / test", "waiting", None)], [], {}, False, []),
    ("a failed status with its description and link", CI_DONE, [],
     [{"context": "deploy", "state": "error", "description": "quota exceeded",
       "target_url": "https://ci.example/42"}], {}, True, ["deploy"]),
]


@pytest.mark.parametrize("case,suites,runs,statuses,extra,finished,names", EVIDENCE,
                         ids=[c[0] for c in EVIDENCE])
async def test_collect_failures(case, suites, runs, statuses, extra, finished, names):
    gh = RecordingGitHub(answers(suites, runs, statuses, **extra))
    failures, done = await collect_failures(RepoOps(gh, "acme/widgets"), HEAD,
                                            own_app_id=OWN_APP)
    assert done is finished
    assert [f.name for f in failures] == names


async def test_annotations_and_the_actions_job_log_are_evidence():
    runs = [check("ci / test", "completed", "failure", run_id=11, annotations=1),
            check("build", "completed", "failure", slug="github-actions", run_id=777)]
    gh = RecordingGitHub(answers(CI_DONE, runs, [], **{
        "/repos/acme/widgets/check-runs/11/annotations?per_page=100": (
            200, "application/json",
            [{"path": "calc.py", "start_line": 3, "message": "expected -5"}]),
        "/repos/acme/widgets/actions/jobs/777/logs": (200, "text/plain", LOG),
    }))
    failures, done = await collect_failures(RepoOps(gh, "acme/widgets"), HEAD,
                                            own_app_id=OWN_APP)
    assert done and [f.name for f in failures] == ["ci / test", "build"]
    assert failures[0].details == ["calc.py:3: expected -5"]
    assert "E   assert 4 == 5" in failures[1].details[0]
    prompt = prompt_for_failures(failures, turn=1, max_turns=2)
    assert "calc.py:3: expected -5" in prompt and "assert 4 == 5" in prompt
    assert "ghp_" not in prompt  # the job log's token is redacted
    # the log is fetched for the Actions run only; annotations only when there are some
    assert [c for c in gh.calls if "/actions/" in c or "/annotations" in c] == [
        "/repos/acme/widgets/check-runs/11/annotations?per_page=100",
        "/repos/acme/widgets/actions/jobs/777/logs"]


async def test_a_job_log_that_cannot_be_read_is_said_not_fatal():
    runs = [check("build", "completed", "failure", slug="github-actions", run_id=778)]
    gh = RecordingGitHub(answers(CI_DONE, runs, [], **{
        "/repos/acme/widgets/actions/jobs/778/logs": (
            403, "application/json", {"message": "Resource not accessible by integration"}),
    }))
    failures, _ = await collect_failures(RepoOps(gh, "acme/widgets"), HEAD, own_app_id=OWN_APP)
    assert failures[0].details == ["(GitHub did not give this job's log)"]
    # Without its lines, what failed is not known: no signature, so never "the same way"
    # as a failure before it (two unread logs of one check would otherwise match).
    assert failures[0].unread and failure_signature(failures) is None
    assert failure_signature(failures) != failure_signature(
        [failures[0].model_copy(update={"unread": False})])


async def test_a_failure_on_the_second_page_of_a_matrix_is_found():
    """A matrix CI has more than a page of checks: the failing one may be on the last."""
    green = [check(f"ci / test ({n})", "completed", "success") for n in range(100)]
    page_two = f"{BASE}/check-runs?filter=latest&per_page=100&page=2"
    gh = RecordingGitHub(answers(CI_DONE, green, [], **{
        f"{BASE}/check-runs?filter=latest&per_page=100": (
            200, "application/json", {"check_runs": green}, page_two),
        page_two: (200, "application/json",
                   {"check_runs": [check("ci / test (100)", "completed", "failure")]}),
    }))
    failures, done = await collect_failures(RepoOps(gh, "acme/widgets"), HEAD,
                                            own_app_id=OWN_APP)
    assert done and [f.name for f in failures] == ["ci / test (100)"]
