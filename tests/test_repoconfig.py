"""`.github/hangar.yml`'s land, auto-fix and fan-out keys: the values each takes, its
default, and the sentence (file, line, fix) a wrong value gets while the default applies."""

from __future__ import annotations

import pytest

from app.repoconfig import DEFAULT_SENSITIVE, parse_repo_config

# -- defaults -----------------------------------------------------------------------------


DEFAULTS = [
    ("land.enabled", True),
    ("land.method", "squash"),
    ("land.update", "merge"),
    ("land.draft_pr", True),
    ("land.required_checks", []),
    ("land.forbid_self_approval", True),
    ("land.required_approvals", 1),
    ("land.approval_survives_clean_update", False),
    ("land.ci_timeout_minutes", 45),
    ("land.sensitive_paths", DEFAULT_SENSITIVE),
    ("land.sensitive_extra_approvals", 0),
    ("land.max_diff_lines", 2000),
    ("land.approval_ttl_minutes", 240),
    ("land.require_verification", True),
    ("land.auto_land.enabled", False),
    ("land.auto_land.when.verification", "pass"),
    ("land.auto_land.when.checks", "pass"),
    ("land.auto_land.when.max_diff_lines", 150),
    ("land.auto_land.when.only_paths", ["docs/**", "tests/**"]),
    ("autofix.enabled", True),
    ("autofix.max_turns", 2),
    ("fanout.autofix", "picked"),
    ("fanout.weights", None),  # the fixed order
    ("review.resolve_threads", False),
    ("review.act_on_changes_requested", False),
]


def value_at(config, dotted: str):
    node = config
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


@pytest.mark.parametrize(("key", "default"), DEFAULTS, ids=[k for k, _ in DEFAULTS])
def test_each_key_has_the_seeds_default(key, default):
    for text in (None, "", "land: {}\n"):
        config, problems = parse_repo_config(text)
        assert problems == []
        assert value_at(config, key) == default


# -- accepted values ----------------------------------------------------------------------


ACCEPTED = [
    ("land:\n  enabled: false\n", "land.enabled", False),
    ("land:\n  update: rebase\n", "land.update", "rebase"),
    ("land:\n  update: merge\n", "land.update", "merge"),
    ("land:\n  draft_pr: false\n", "land.draft_pr", False),
    ("land:\n  approval_survives_clean_update: true\n",
     "land.approval_survives_clean_update", True),
    ("land:\n  sensitive_extra_approvals: 2\n", "land.sensitive_extra_approvals", 2),
    ("land:\n  max_diff_lines: 400\n", "land.max_diff_lines", 400),
    ("land:\n  approval_ttl_minutes: 30\n", "land.approval_ttl_minutes", 30),
    ("land:\n  approval_ttl_minutes: 0.5\n", "land.approval_ttl_minutes", 0.5),
    ("land:\n  auto_land: {enabled: true}\n", "land.auto_land.enabled", True),
    ("land:\n  auto_land:\n    when: {checks: ignore}\n", "land.auto_land.when.checks",
     "ignore"),
    ("land:\n  auto_land:\n    when: {max_diff_lines: 20}\n",
     "land.auto_land.when.max_diff_lines", 20),
    ("land:\n  auto_land:\n    when:\n      only_paths: [docs/**]\n",
     "land.auto_land.when.only_paths", ["docs/**"]),
    ("fanout:\n  autofix: ranked_first\n", "fanout.autofix", "ranked_first"),
    ("fanout:\n  weights: {ci: 2, diff_lines: -0.01}\n", "fanout.weights.diff_lines", -0.01),
    ("fanout:\n  weights: {ci: 2}\n", "fanout.weights.verification", 0),
    ("fanout:\n  weights: {}\n", "fanout.weights.duration", 0),
    ("review: {resolve_threads: true}\n", "review.resolve_threads", True),
    ("review:\n  act_on_changes_requested: true\n", "review.act_on_changes_requested", True),
]


@pytest.mark.parametrize(("text", "key", "value"), ACCEPTED,
                         ids=[f"{k}={v}" for _, k, v in ACCEPTED])
def test_accepted_values(text, key, value):
    config, problems = parse_repo_config(text)
    assert problems == []
    assert value_at(config, key) == value


def test_auto_land_keeps_the_rest_of_its_rule_when_one_part_is_given():
    config, problems = parse_repo_config(
        "land:\n  auto_land:\n    enabled: true\n    when: {max_diff_lines: 40}\n")
    assert problems == []
    rule = config.land.auto_land
    assert rule.enabled and rule.when.max_diff_lines == 40
    assert rule.when.only_paths == ["docs/**", "tests/**"] and rule.when.checks == "pass"


# -- refusals: the file, the line, the fix, and the default in the meantime --------------


REFUSED = [
    ("land:\n  update: squash\n", 2, "land.update",
     "Input should be 'merge' or 'rebase' — use one of the allowed values"),
    ("land:\n  enabled: maybe\n", 2, "land.enabled", "write true or false"),
    ("land:\n  draft_pr: sometimes\n", 2, "land.draft_pr", "write true or false"),
    ("land:\n  approval_survives_clean_update: 3\n", 2,
     "land.approval_survives_clean_update", "write true or false"),
    ("land:\n  sensitive_extra_approvals: 11\n", 2, "land.sensitive_extra_approvals",
     "use a smaller number"),
    ("land:\n  sensitive_extra_approvals: -1\n", 2, "land.sensitive_extra_approvals",
     "use a larger number"),
    ("land:\n  max_diff_lines: 0\n", 2, "land.max_diff_lines", "use a larger number"),
    ("land:\n  max_diff_lines: lots\n", 2, "land.max_diff_lines", "write a whole number"),
    ("land:\n  approval_ttl_minutes: 0\n", 2, "land.approval_ttl_minutes",
     "use a larger number"),
    ("land:\n  approval_ttl_minutes: soon\n", 2, "land.approval_ttl_minutes",
     "write a number"),
    ("land:\n  auto_land: yes please\n", 2, "land.auto_land",
     "write a mapping of its keys"),
    ("land:\n  auto_land:\n    enabled: true\n    when:\n      verification: skip\n", 5,
     "land.auto_land.when.verification", "Input should be 'pass' — use one of the allowed"),
    ("land:\n  auto_land:\n    when:\n      checks: some\n", 4,
     "land.auto_land.when.checks", "Input should be 'pass' or 'ignore'"),
    ("land:\n  auto_land:\n    when:\n      only_paths: docs/**\n", 4,
     "land.auto_land.when.only_paths", "write a list"),
    ("land:\n  auto_land:\n    when:\n      max_diff_lines: 0\n", 4,
     "land.auto_land.when.max_diff_lines", "use a larger number"),
    ("land:\n  auto_land:\n    whenever: {}\n", 3, "land.auto_land.whenever",
     "remove it, or check its spelling"),
    ("fanout:\n  autofix: all\n", 2, "fanout.autofix",
     "Input should be 'picked' or 'ranked_first'"),
    ("fanout:\n  attempts: 3\n", 2, "fanout.attempts", "remove it, or check its spelling"),
    ("fanout:\n  weights:\n    size: 1\n", 3, "fanout.weights.size",
     "remove it, or check its spelling"),
    ("fanout:\n  weights:\n    ci: high\n", 3, "fanout.weights.ci", "write a number"),
    ("fanout:\n  weights: [ci]\n", 2, "fanout.weights", "write a mapping of its keys"),
]


@pytest.mark.parametrize(("text", "line", "field", "said"), REFUSED,
                         ids=[f for _, _, f, _ in REFUSED])
def test_a_wrong_value_is_answered_with_the_file_line_and_fix(text, line, field, said):
    config, problems = parse_repo_config(text)
    assert len(problems) == 1, problems
    assert problems[0].startswith(f".github/hangar.yml:{line}: {field}: ")
    assert said in problems[0]
    assert problems[0].endswith("; the default applies")
    defaults, _ = parse_repo_config(None)
    key = field if field.count(".") < 3 else field.rsplit(".", 1)[0]
    try:
        expected = value_at(defaults, key)
    except AttributeError:  # an unknown key: nothing of it is kept
        return
    assert value_at(config, key) == expected


def test_one_wrong_key_leaves_the_others_as_written():
    config, problems = parse_repo_config(
        "land:\n  update: sideways\n  max_diff_lines: 300\n  auto_land: {enabled: true}\n")
    assert len(problems) == 1 and "land.update" in problems[0]
    assert config.land.update == "merge"
    assert config.land.max_diff_lines == 300 and config.land.auto_land.enabled


def test_a_file_that_is_not_a_mapping_names_every_section():
    _, problems = parse_repo_config("- land\n")
    assert problems == [".github/hangar.yml:1: the file must be a mapping with keys "
                        "environment, land, autofix, fanout"]
