"""The pure rules of environment builds: keys, what rebuilds, what a sandbox starts from."""

from __future__ import annotations

import subprocess

import pytest

from sandbox.envbuild import (
    Build,
    BuildKey,
    BuildState,
    Fallback,
    active_build,
    agent_environment_section,
    builds_to_drop,
    config_digest,
    is_lockfile,
    lockfile_ids,
    parse_ls_tree,
    rebuild_reason,
    start_plan,
)

ok, failed, running, gone = (BuildState.succeeded, BuildState.failed, BuildState.running,
                             BuildState.gone)


@pytest.mark.parametrize(("path", "extra", "watched"), [
    ("package-lock.json", (), True),
    ("web/app/pnpm-lock.yaml", (), True),
    ("requirements.txt", (), True),
    ("requirements-dev.txt", (), True),
    ("services/api/requirements/base.txt", (), False),
    ("bun.lockb", (), True),
    ("go.sum", (), True),
    (".tool-versions", (), True),
    ("mise.toml", (), True),
    ("src/main.py", (), False),
    ("README.md", (), False),
    ("package.json", (), False),
    ("deps/pins.cfg", ("deps/*.cfg",), True),
    ("deps/more/pins.cfg", ("deps/*.cfg",), False),  # `*` does not cross `/`
    ("/tools.lock", ("tools.lock",), False),
    ("tools.lock", ("/tools.lock",), True),
])
def test_which_files_are_lockfiles(path, extra, watched):
    assert is_lockfile(path, extra) is watched


def _key(**overrides) -> BuildKey:
    fields = dict(repo="acme/app", environment="python", provider="docker",
                  image_id="sha256:aaa", config_digest=config_digest("pip install -e .", [], []),
                  lockfiles=(("requirements.txt", "b1"),))
    fields.update(overrides)
    return BuildKey(**fields)


@pytest.mark.parametrize(("change", "rebuilds"), [
    ({}, False),
    ({"repo": "ACME/app"}, False),  # GitHub names are case-insensitive
    ({"lockfiles": (("requirements.txt", "b2"),)}, True),
    ({"lockfiles": (("requirements.txt", "b1"), ("web/yarn.lock", "y1"))}, True),
    ({"image_id": "sha256:bbb"}, True),
    ({"provider": "local"}, True),
    ({"environment": "node"}, True),
    ({"config_digest": config_digest("pip install -r requirements.txt", [], [])}, True),
    ({"config_digest": config_digest("pip install -e .", ["NPM_TOKEN"], [])}, True),
    ({"config_digest": config_digest("pip install -e .", [], ["deps/*.cfg"])}, True),
])
def test_what_changes_the_key(change, rebuilds):
    assert (_key(**change).digest != _key().digest) is rebuilds


def test_verify_and_unrelated_fields_are_not_build_fields():
    # The digest takes only install, build_secrets and lockfiles: its signature is the proof,
    # and order does not matter.
    assert config_digest("x", ["B", "A"], ["b", "a"]) == config_digest("x", ["A", "B"], ["a", "b"])


def test_lockfile_ids_from_a_real_tree(tmp_path):
    repo = tmp_path / "r"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "web").mkdir()
    (repo / "requirements.txt").write_text("requests==2\n")
    (repo / "web" / "package-lock.json").write_text("{}\n")
    (repo / "web" / "we ird\tname.txt").write_text("not a lockfile\n")
    (repo / "main.py").write_text("print(1)\n")
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                    "commit", "-qm", "x"], check=True)
    listing = subprocess.run(["git", "-C", str(repo), "ls-tree", "-r", "-z", "HEAD"],
                             check=True, capture_output=True, text=True).stdout
    ids = lockfile_ids(parse_ls_tree(listing))
    assert list(ids) == ["requirements.txt", "web/package-lock.json"]
    blob = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD:requirements.txt"],
                          check=True, capture_output=True, text=True).stdout.strip()
    assert ids["requirements.txt"] == blob


def _b(n: int, state: BuildState, key: BuildKey | None = None, **kw) -> Build:
    return Build(id=f"bld-{n}", version=n, key_digest=(key or _key()).digest, state=state, **kw)


NEW = _key(lockfiles=(("requirements.txt", "b2"),))


@pytest.mark.parametrize(("history", "key", "asked", "reason"), [
    ([], _key(), False, "first"),
    ([_b(1, ok)], _key(), False, None),                       # up to date
    ([_b(1, ok)], NEW, False, "drift"),                       # a lockfile moved
    ([_b(1, ok), _b(2, running, NEW)], NEW, False, None),     # already building it
    ([_b(1, ok), _b(2, failed, NEW)], NEW, False, None),      # failed: not retried by itself
    ([_b(1, ok), _b(2, failed, NEW)], NEW, True, "asked"),    # ...unless someone asks
    ([_b(1, ok), _b(2, running, NEW)], NEW, True, None),      # asking twice starts one
    ([_b(1, failed)], NEW, False, "drift"),                   # something changed since
    ([_b(1, gone)], _key(), False, "drift"),                  # what it kept is gone
    ([_b(1, ok), _b(2, gone, NEW)], NEW, False, "drift"),     # ...and the older one is behind
])
def test_when_a_build_starts(history, key, asked, reason):
    assert rebuild_reason(history, key, asked=asked) == reason


def test_a_failed_build_never_replaces_the_active_one():
    history = [_b(1, ok), _b(2, failed, NEW)]
    assert active_build(history).id == "bld-1"
    plan = start_plan(history, NEW, has_install=True)
    assert plan.build.id == "bld-1" and plan.stale and plan.fallback is None


def test_rollback_pins_until_unpinned():
    history = [_b(1, ok), _b(2, ok, NEW), _b(3, ok, _key(image_id="sha256:ccc"))]
    assert active_build(history).id == "bld-3"
    assert active_build(history, pinned_id="bld-1").id == "bld-1"
    # A pin on a build that is gone (or failed) does not leave the lane without a build.
    assert active_build(history, pinned_id="bld-9").id == "bld-3"


@pytest.mark.parametrize(("history", "has_install", "fallback"), [
    ([], True, Fallback.none_yet),
    ([_b(1, failed)], True, Fallback.latest_failed),
    ([_b(1, running)], True, Fallback.none_yet),
    ([_b(1, ok)], False, Fallback.no_install),
    ([_b(1, failed), _b(2, gone)], True, Fallback.build_gone),
])
def test_fallback_and_why(history, has_install, fallback):
    plan = start_plan(history, _key(), has_install=has_install)
    assert plan.build is None and plan.fallback is fallback


def test_branch_lockfiles_that_differ_are_named():
    history = [_b(1, ok, lockfiles=(("requirements.txt", "b1"), ("web/yarn.lock", "y1")))]
    plan = start_plan(history, _key(), has_install=True,
                      branch_lockfiles={"requirements.txt": "b9", "web/yarn.lock": "y1",
                                        "Cargo.lock": "c1"})
    assert plan.lockfiles_differ == ("Cargo.lock", "requirements.txt")
    same = start_plan(history, _key(), has_install=True,
                      branch_lockfiles={"requirements.txt": "b1", "web/yarn.lock": "y1"})
    assert same.lockfiles_differ == ()


def test_a_gone_build_gives_way_to_the_last_good_one():
    history = [_b(1, ok), _b(2, gone, NEW)]
    plan = start_plan(history, NEW, has_install=True)
    assert plan.build.id == "bld-1" and plan.stale
    text = agent_environment_section(start_plan([_b(2, gone)], NEW, has_install=True),
                                     install="make deps")
    assert "NOT installed" in text and "missing" in text and "`make deps`" in text


def test_keep_the_newest_five_and_never_the_active_or_pinned():
    history = [_b(n, ok if n != 7 else failed) for n in range(1, 9)]
    assert builds_to_drop(history, keep=5) == ["bld-3", "bld-2", "bld-1"]
    assert builds_to_drop(history, keep=5, pinned_id="bld-1") == ["bld-3", "bld-2"]
    running_too = [*history, _b(9, running)]
    assert "bld-9" not in builds_to_drop(running_too, keep=1)


def test_what_the_agent_is_told():
    fallback = start_plan([_b(1, failed)], _key(), has_install=True)
    text = agent_environment_section(fallback, install="pip install -e .",
                                     problems=[".github/hangar.yml:3: install: not a string"])
    assert text.startswith("# Your environment (hangar)")
    assert "NOT installed" in text and "`pip install -e .`" in text
    assert "Setup problem: .github/hangar.yml:3" in text
    assert "hangar pushes it and opens the pull request itself" in text
    history = [_b(4, ok, lockfiles=(("requirements.txt", "b1"),))]
    built = start_plan(history, NEW, has_install=True,
                       branch_lockfiles={"requirements.txt": "b2"})
    text = agent_environment_section(built, install="pip install -e .")
    assert "build v4 (bld-4)" in text and "behind the default branch" in text
    assert "requirements.txt" in text and "NOT installed" not in text


def test_a_repository_names_only_build_secrets_its_operator_mapped():
    from sandbox.envspec import EnvSpec, EnvSpecError

    spec = EnvSpec(name="node", install="npm ci", build_secrets=["NPM_TOKEN"])
    narrowed = spec.with_overrides({"build_secrets": [], "lockfiles": ["deps/*.cfg"]})
    assert narrowed.build_secrets == [] and narrowed.lockfiles == ["deps/*.cfg"]
    with pytest.raises(EnvSpecError, match="'AWS_SECRET_ACCESS_KEY' is not a build secret"):
        spec.with_overrides({"build_secrets": ["NPM_TOKEN", "AWS_SECRET_ACCESS_KEY"]})
    with pytest.raises(ValueError, match="not an environment variable name"):
        EnvSpec(name="x", build_secrets=["not-a-name"])


def test_the_environment_skill_is_the_sections_text_under_a_skills_frontmatter():
    from sandbox.envbuild import agent_environment_skill

    section = agent_environment_section(start_plan([], _key(), has_install=True),
                                        install="pip install -e .")
    skill = agent_environment_skill(section)
    head, _, body = skill.partition("\n---\n\n")
    assert body == section  # one text for both: never written twice
    fields = dict(line.split(": ", 1) for line in head.removeprefix("---\n").splitlines())
    assert fields["name"] == "hangar-environment" and set(fields) == {"name", "description"}
    assert len(fields["description"]) < 1024 and not {"<", ">"} & set(fields["description"])

