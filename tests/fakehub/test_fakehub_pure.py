"""The pure parts of fakehub: signatures, rule matching, review counting, check states."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from fakehub import rulesets
from fakehub.state import CheckRun, Identity, Repo, Review, Status, User
from fakehub.webhooks import signature

NOW = datetime(2026, 1, 1, tzinfo=UTC)
AUTHOR = User("author", 1, "t1")
WRITER = User("writer", 2, "t2")
READER = User("reader", 3, "t3")
OWNER = User("acme", 9, "t9")


def test_signature_matches_githubs_test_vector():
    assert signature("It's a Secret to Everybody", b"Hello, World!") == (
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17")


def _repo(default_branch: str = "main") -> Repo:
    return Repo(1, OWNER, "widgets", False, default_branch, Path("."), NOW, NOW)


@pytest.mark.parametrize(
    ("include", "exclude", "branch", "applies"),
    [
        (["~DEFAULT_BRANCH"], [], "main", True),
        (["~DEFAULT_BRANCH"], [], "dev", False),
        (["~ALL"], ["refs/heads/hangar/*"], "hangar/1-x", False),
        (["~ALL"], ["refs/heads/hangar/*"], "release", True),
        (["refs/heads/release/*"], [], "release/1.0", True),
    ],
)
def test_ruleset_conditions(include, exclude, branch, applies):
    repo = _repo()
    ruleset = rulesets.normalize_ruleset(
        {"conditions": {"ref_name": {"include": include, "exclude": exclude}},
         "rules": [{"type": "deletion"}]}, 7, repo)
    assert rulesets.applies_to(ruleset, repo, branch) is applies


def test_disabled_and_evaluate_rulesets_do_not_apply():
    repo = _repo()
    for enforcement in ("disabled", "evaluate"):
        ruleset = rulesets.normalize_ruleset({"enforcement": enforcement, "rules": []}, 1, repo)
        assert not rulesets.applies_to(ruleset, repo, "main")


def _review(user: User, state: str, commit: str, ident: int) -> Review:
    return Review(ident, 1, 5, user, state, "", commit, NOW)


@pytest.mark.parametrize(
    ("reviews", "only_current", "approvals", "changes"),
    [
        ([("writer", "APPROVED", "head")], True, 1, False),
        ([("author", "APPROVED", "head")], True, 0, False),  # authors do not count
        ([("reader", "APPROVED", "head")], True, 0, False),  # readers do not count
        ([("writer", "APPROVED", "old")], True, 0, False),  # stale
        ([("writer", "APPROVED", "old")], False, 1, False),
        ([("writer", "APPROVED", "head"), ("writer", "CHANGES_REQUESTED", "head")], True, 0,
         True),
        ([("writer", "CHANGES_REQUESTED", "head"), ("writer", "COMMENTED", "head"),
          ("writer", "APPROVED", "head")], True, 1, False),  # comments do not override
        ([("writer", "APPROVED", "head"), ("writer", "DISMISSED", "head")], True, 0, False),
    ],
)
def test_review_counting(reviews, only_current, approvals, changes):
    users = {"author": AUTHOR, "writer": WRITER, "reader": READER}
    records = [_review(users[u], s, c, i) for i, (u, s, c) in enumerate(reviews)]
    verdict = rulesets.count_reviews(records, author_id=AUTHOR.id, head_sha="head",
                                     only_current_head=only_current,
                                     has_write=lambda u: u.id != READER.id)
    assert (verdict.approvals, verdict.changes_requested) == (approvals, changes)


def _run(ident: int, name: str, status: str, conclusion: str | None, app: int = 50) -> CheckRun:
    return CheckRun(ident, 1, 1, app, "sha", name, status, conclusion, NOW, None, {})


def _status(ident: int, context: str, state: str) -> Status:
    return Status(ident, 1, "sha", context, state, None, None, OWNER, NOW, NOW)


@pytest.mark.parametrize(
    ("runs", "statuses", "integration", "expected"),
    [
        ([], [], None, "missing"),
        ([_run(1, "ci", "in_progress", None)], [], None, "pending"),
        ([_run(1, "ci", "completed", "failure"), _run(2, "ci", "completed", "success")], [],
         None, "success"),  # the newest run counts
        ([_run(1, "ci", "completed", "skipped")], [], None, "success"),
        ([_run(1, "ci", "completed", "timed_out")], [], None, "failure"),
        ([_run(1, "ci", "completed", "success", app=99)], [], 50, "missing"),
        ([], [_status(2, "ci", "error"), _status(1, "ci", "success")], None, "failure"),
        ([], [_status(2, "ci", "success")], None, "success"),
    ],
)
def test_required_check_state(runs, statuses, integration, expected):
    assert rulesets.check_state("ci", integration, runs, statuses) == expected


def test_bypass_actors():
    repo = _repo()
    ruleset = rulesets.normalize_ruleset({"rules": [], "bypass_actors": [
        {"actor_type": "Integration", "actor_id": 42, "bypass_mode": "always"},
        {"actor_type": "RepositoryRole", "actor_id": 5, "bypass_mode": "always"}]}, 1, repo)
    app = Identity("installation", User("bot[bot]", 8, "x", "Bot"), app_id=42)
    other_app = Identity("installation", User("other[bot]", 10, "y", "Bot"), app_id=43)
    admin, writer = Identity("user", OWNER), Identity("user", WRITER)
    assert rulesets.may_bypass(ruleset, app, "write")
    assert not rulesets.may_bypass(ruleset, other_app, "write")
    assert rulesets.may_bypass(ruleset, admin, "admin")
    assert not rulesets.may_bypass(ruleset, writer, "write")


def test_push_violations_wording():
    repo = _repo()
    ruleset = rulesets.normalize_ruleset({"rules": [
        {"type": "non_fast_forward"}, {"type": "deletion"}]}, 1, repo)
    repo.rulesets.append(ruleset)
    rules = rulesets.active_rules(repo, "main")
    assert rulesets.active_rules(repo, "other") == []
    writer = Identity("user", WRITER)
    forced = rulesets.push_violations(rules, writer, "write", old="a", new="b",
                                      fast_forward=False, checks_pass=True)
    assert forced == ["Cannot force-push to this branch"]
    deleted = rulesets.push_violations(rules, writer, "write", old="a", new=None,
                                       fast_forward=True, checks_pass=True)
    assert deleted == ["Cannot delete this branch"]


@pytest.mark.parametrize(("pattern", "branch", "matches"), [
    ("refs/heads/main", "main", True),
    ("refs/heads/main", "main2", False),
    ("refs/heads/release/*", "release/1.0", True),
    ("refs/heads/release/*", "release/1.0/hotfix", False),  # * stays in one segment
    ("refs/heads/release/**", "release/1.0/hotfix", True),  # ** crosses /
    ("refs/heads/*", "feature/x", False),
    ("refs/heads/**", "feature/x", True),
    ("refs/heads/**/hotfix", "a/b/hotfix", True),
    ("refs/heads/hangar/**", "hangar/12-abc", True),
    ("refs/heads/v?", "v1", True),
    ("refs/heads/v?", "v/", False),
    ("refs/heads/v[0-9]", "v7", True),
    ("refs/heads/v[!0-9]", "v7", False),
    ("refs/heads/a.b", "axb", False),  # a dot is a dot
    ("main", "main", True),  # without refs/heads/, as a branch name
])
def test_ruleset_ref_patterns_match_as_githubs(pattern, branch, matches):
    repo = Repo.__new__(Repo)
    repo.default_branch = "main"
    ruleset = {"enforcement": "active", "target": "branch",
               "conditions": {"ref_name": {"include": [pattern], "exclude": []}}}
    assert rulesets.applies_to(ruleset, repo, branch) is matches


PATCH = """\
@@ -1,4 +1,4 @@ def top():
 a = 1
-b = 2
+b = 3
 c = 4
 d = 5
@@ -20,2 +20,3 @@ def later():
 x = 1
+y = 2
 z = 3"""


@pytest.mark.parametrize(("line", "side", "hunk"), [
    (1, "RIGHT", "@@ -1,4 +1,4 @@ def top():\n a = 1"),
    (2, "RIGHT", "@@ -1,4 +1,4 @@ def top():\n a = 1\n-b = 2\n+b = 3"),
    (2, "LEFT", "@@ -1,4 +1,4 @@ def top():\n a = 1\n-b = 2"),
    (21, "RIGHT", "@@ -20,2 +20,3 @@ def later():\n x = 1\n+y = 2"),
    (21, "LEFT", "@@ -20,2 +20,3 @@ def later():\n x = 1\n+y = 2\n z = 3"),
    (10, "RIGHT", ""),  # not in the diff
])
def test_a_diff_hunk_runs_from_its_header_to_the_commented_line(line, side, hunk):
    from fakehub.diffhunk import hunk_up_to

    assert hunk_up_to(PATCH, line, side) == hunk


def test_a_diff_hunk_has_the_shape_of_githubs_examples():
    from fakehub.diffhunk import hunk_up_to

    # pull_request_review_thread's example: a comment on line 1 of an added file
    assert hunk_up_to("@@ -0,0 +1 @@\n+issue comment", 1) == "@@ -0,0 +1 @@\n+issue comment"
