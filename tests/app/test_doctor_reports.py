"""`hangar doctor`'s reports on merging and on pushes to hangar/* (pure tables)."""

from __future__ import annotations

import pytest

from app.doctor import merging_report, pushes_report

ALL = {"allow_squash_merge": True, "allow_merge_commit": True, "allow_rebase_merge": True}


@pytest.mark.parametrize(("repo", "rules", "classic", "expected"), [
    (ALL, [], None, [(True, "no merge queue on main"),
                     (True, "merge methods allowed: squash, merge, rebase")]),
    ({**ALL, "allow_rebase_merge": False, "allow_merge_commit": False}, [], None,
     [(True, "no merge queue on main"), (True, "merge methods allowed: squash")]),
    (ALL, [{"type": "pull_request", "parameters": {"allowed_merge_methods": ["rebase"]}}],
     None, [(True, "no merge queue on main"), (True, "merge methods allowed: rebase")]),
    ({**ALL, "allow_rebase_merge": False},
     [{"type": "pull_request", "parameters": {"allowed_merge_methods": ["rebase"]}}], None,
     [(True, "no merge queue on main"), (False, "no merge method is allowed")]),
    (ALL, [{"type": "merge_queue"}], None,
     [(False, "main takes changes only through a merge queue"),
      (True, "merge methods allowed")]),
    (ALL, [{"type": "required_signatures"}], None,
     [(True, "no merge queue"), (True, "merge methods"), (True, "commits on main must be signed")]),
    (ALL, [], {"required_signatures": {"enabled": True}},
     [(True, "no merge queue"), (True, "merge methods"), (True, "commits on main must be signed")]),
    (ALL, [], {"required_signatures": {"enabled": False}},
     [(True, "no merge queue"), (True, "merge methods")]),
])
def test_merging_report(repo, rules, classic, expected):
    lines = merging_report("main", repo, rules, classic)
    assert len(lines) == len(expected)
    for (ok, line), (want_ok, start) in zip(lines, expected, strict=True):
        assert ok is want_ok and line.startswith(start), line


@pytest.mark.parametrize(("rules", "ok", "named"), [
    ([], True, ""),
    ([{"type": "deletion"}], True, ""),
    ([{"type": "pull_request"}, {"type": "deletion"}], False, "(pull_request)"),
    ([{"type": "required_signatures"}, {"type": "creation"}], False,
     "(creation, required_signatures)"),
])
def test_pushes_report(rules, ok, named):
    good, line = pushes_report(rules)
    assert good is ok and named in line
    if not ok:
        assert "exclude refs/heads/hangar/**" in line
