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
     [(True, "main takes changes through a merge queue: hangar adds approved pull requests"),
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


def checks_rule(*checks: dict) -> dict:
    return {"type": "required_status_checks", "ruleset_id": 3, "parameters": {
        "required_status_checks": list(checks), "strict_required_status_checks_policy": False}}


@pytest.mark.parametrize(("rules", "classic", "codeowners", "expected"), [
    ([checks_rule({"context": "hangar / verify", "integration_id": 7})], None, True,
     [(True, "hangar / verify is required from hangar's App only")]),
    ([checks_rule({"context": "hangar / verify"})], None, True,
     [(False, "hangar / verify is required by main without an integration_id, so anyone who "
              "can post a commit status")]),
    ([], {"required_status_checks": {"strict": False, "contexts": ["hangar / verify"],
                                     "checks": [{"context": "hangar / verify", "app_id": None}]}},
     None, [(False, "required by classic branch protection without an integration_id")]),
    ([{"type": "pull_request", "ruleset_id": 3, "parameters": {
        "require_code_owner_review": True}}], None, False,
     [(False, "main asks for code owners' review, but the branch has no CODEOWNERS file")]),
    ([{"type": "pull_request", "ruleset_id": 3, "parameters": {
        "require_code_owner_review": True}}], None, True, []),
    ([{"type": "update", "ruleset_id": 3, "parameters": {}}], None, True,
     [(False, "hangar cannot land here: main lets only its bypass actors update")]),
    ([checks_rule({"context": "hangar / verify", "integration_id": 99})], None, True,
     [(True, "hangar / verify is required from hangar's App only"),
      (False, "hangar cannot land here: main requires hangar / verify from App 99")]),
    ([], {"lock_branch": {"enabled": True}}, True,
     [(False, "hangar cannot land here: the branch is locked")]),
    ([{"type": "required_linear_history", "ruleset_id": 3},
      {"type": "pull_request", "ruleset_id": 3,
       "parameters": {"allowed_merge_methods": ["merge"]}}],
     None, True, [(False, "hangar cannot land here: no merge method meets")]),
])
def test_gate_report(rules, classic, codeowners, expected):
    from app.doctor import gate_report

    got = gate_report(rules, classic, {3: "main"}, app_id=7, app_slug="hangar", repo=ALL,
                      codeowners_found=codeowners)
    assert len(got) == len(expected), got
    for (ok, line), (want_ok, fragment) in zip(got, expected, strict=True):
        assert ok is want_ok and fragment in line, line
