"""Environment builds end to end: the first sandbox starts bare and queues a build, the
next ones start from it, a lockfile change rebuilds, a verify change does not, and a failed
build leaves the active one in place. Through fakehub, real git and real sandboxes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.envbuilds import rows as envbuilds
from app.store import Store
from sandbox.envbuild import BuildState
from tests.e2e.conftest import wait_until
from tests.test_render_secrets import leaked

pytestmark = pytest.mark.slow

# install leaves an ignored dependency directory (kept) and an untracked file (removed).
INSTALL = ("mkdir -p .deps && cp requirements.txt .deps/installed.txt "
           "&& echo leftover > LEFTOVER.txt")
# The agent writes down what it found, then fixes the bug.
SEEING_AGENT = """\
set -e
{
  if [ -f .deps/installed.txt ]; then echo "deps: $(cat .deps/installed.txt)"
  else echo "deps: none"; fi
  if [ -f LEFTOVER.txt ]; then echo "leftover: yes"; else echo "leftover: no"; fi
  cat "$HOME/ENVIRONMENT.md"
} > SEEN.md
sed -i 's/return a - b/return a + b/' calc.py
git add SEEN.md calc.py
git commit -qm "Fix add()"
"""


def _builds(world) -> list[envbuilds.EnvBuildRow]:
    store = Store(world.settings.db_path)
    try:
        return store.all(envbuilds.BUILD, envbuilds.EnvBuildRow)
    finally:
        store.close()


def _finished(world, count: int) -> list[envbuilds.EnvBuildRow]:
    def done():
        rows = sorted(_builds(world), key=lambda r: r.version)
        finished = [r for r in rows if r.state in (BuildState.succeeded, BuildState.failed)]
        return rows if len(finished) >= count else None
    return wait_until(done, 60, f"{count} finished environment build(s)")


def _seen(world, issue: int, *, verified: bool = True) -> str:
    pr = wait_until(lambda: world.verified(issue), 60, f"the verified PR for #{issue}")
    if verified:
        assert world.checks(pr["head"]["sha"])["hangar / verify"]["conclusion"] == "success"
    return world.hub.read_file(world.repo, "SEEN.md", pr["head"]["sha"]).decode()


def _setup(world, provider: str) -> None:
    world.hub.push_files(world.repo, "main", {
        "requirements.txt": "widgets-dep==1\n", ".gitignore": ".deps/\n",
    }, "Add requirements", as_user=world.maintainer, bypass_rules=True)
    # Five jobs within seconds, each status comment edited every half second: more than
    # GitHub's 80 writes a minute on a slow provider, and nothing here is about the limit.
    world.start_hangar(SEEING_AGENT, provider=provider, env={"install": INSTALL},
                       settings=world.raise_write_limit())


def test_builds_on_local(world):
    _check_builds(world, "local")


@pytest.mark.docker
def test_builds_on_docker(world, docker_engine):
    import contextlib

    import docker

    try:
        _check_builds(world, "docker")
    finally:  # the build images outlive hangar's process: remove this run's
        client = docker.from_env()
        for row in _builds(world):
            if row.image:
                with contextlib.suppress(docker.errors.ImageNotFound):
                    client.images.remove(row.image, force=True)


def _check_builds(world, provider: str) -> None:
    _setup(world, provider)

    # No build yet: the sandbox is the bare image, the agent is told, a build is queued.
    first, _ = world.ask("/hangar fix the failing test")
    seen = _seen(world, first)
    assert "deps: none" in seen and "NOT installed" in seen
    assert f"`{INSTALL}`" in seen  # the install command, for the agent to run itself
    [v1] = _finished(world, 1)
    assert (v1.state, v1.version, v1.reason) == (BuildState.succeeded, 1, "first")
    assert v1.commit == world.hub.ref_sha(world.repo, "main")

    # The next sandbox starts from it: installed, install's untracked leftover gone.
    second, _ = world.ask("/hangar fix the failing test", title="again")
    seen = _seen(world, second)
    assert "deps: widgets-dep==1" in seen and "leftover: no" in seen
    assert f"build v1 ({v1.id})" in seen and "NOT installed" not in seen
    # People see the same facts: one line of the status comment and the agent's check run.
    status = wait_until(lambda: "Environment:" in world.status(second) and world.status(second),
                        30, "the environment line")
    assert f"Environment: build v1 (`{v1.id}`) of `{v1.commit[:7]}`" in status
    pr = world.pr_for(second)
    agent = world.checks(pr["head"]["sha"])["hangar / agent"]["output"]["summary"]
    assert f"environment: build v1 (`{v1.id}`)" in agent
    assert "Environment: the environment's own image, dependencies not installed" in (
        world.status(first))

    # A lockfile moves on main: the next sandbox still starts from v1, is told the lockfile
    # differs, and a build for the new lockfile runs for the sandboxes after it.
    world.hub.push_files(world.repo, "main", {"requirements.txt": "widgets-dep==2\n"},
                         "Bump the dependency", as_user=world.maintainer, bypass_rules=True)
    third, _ = world.ask("/hangar fix the failing test", title="third")
    seen = _seen(world, third)
    assert f"build v1 ({v1.id})" in seen and "requirements.txt" in seen
    assert "behind the default branch" in seen
    _, v2 = _finished(world, 2)
    assert (v2.state, v2.reason) == (BuildState.succeeded, "drift")

    # A change to verify or an unrelated file does not rebuild.
    world.hub.push_files(world.repo, "main", {
        "README.md": "# widgets, documented\n",
        ".github/hangar.yml": "environment:\n  verify: {command: python3 -m unittest}\n",
    }, "Docs and verify", as_user=world.maintainer, bypass_rules=True)
    fourth, _ = world.ask("/hangar fix the failing test", title="fourth")
    assert f"build v2 ({v2.id})" in _seen(world, fourth)
    assert len(_builds(world)) == 2

    # A failing install is a failed build that leaves v2 active.
    world.hub.push_files(world.repo, "main", {
        ".github/hangar.yml": "environment:\n  install: echo broken >&2; exit 3\n",
    }, "Break install", as_user=world.maintainer, bypass_rules=True)
    fifth, _ = world.ask("/hangar fix the failing test", title="fifth")
    assert f"build v2 ({v2.id})" in _seen(world, fifth, verified=False)
    *_, v3 = _finished(world, 3)
    assert v3.state is BuildState.failed and v3.error == "install exited with 3"
    assert "broken" in v3.log_tail
    store = Store(world.settings.db_path)
    try:
        assert envbuilds.active(store, v3.lane_id).id == v2.id
        table = envbuilds.builds_table(store, world.repo)
    finally:
        store.close()
    assert "install exited with 3" in table


def test_a_failed_build_waits_for_a_change_or_someone_who_asks(world):
    """A build that failed is not retried by itself; `hangar env build-repo --wait` asks."""
    import os
    import subprocess
    import sys

    from tests.e2e.conftest import ROOT

    world.api_token = "admin-token-for-builds"
    world.hub.push_files(world.repo, "main", {"requirements.txt": "widgets-dep==1\n",
                                              ".gitignore": ".deps/\n"},
                         "Add requirements", as_user=world.maintainer, bypass_rules=True)
    world.start_hangar(SEEING_AGENT, env={"install": INSTALL + " && test -f .deps/../OK"})
    first, _ = world.ask("/hangar fix the failing test")
    _seen(world, first, verified=False)
    [v1] = _finished(world, 1)
    assert v1.state is BuildState.failed and v1.error == "install exited with 1"
    # OK appears on main: no lockfile, config or image moved, so nothing rebuilds by itself.
    world.hub.push_files(world.repo, "main", {"OK": "yes\n"}, "Let install pass",
                         as_user=world.maintainer, bypass_rules=True)
    second, _ = world.ask("/hangar fix the failing test", title="again")
    assert "NOT installed" in _seen(world, second, verified=False)
    assert len(_builds(world)) == 1

    env = {**os.environ, "HANGAR_API_URL": f"http://127.0.0.1:{world.settings.port}",
           "HANGAR_API_TOKEN": world.api_token, "PYTHONPATH": str(ROOT)}
    asked = subprocess.run([sys.executable, "-m", "app.cli", "env", "build-repo", world.repo,
                            "--wait", "--timeout", "60"], env=env, cwd=ROOT,
                           capture_output=True, text=True, timeout=90)
    assert asked.returncode == 0, asked.stderr
    assert "build v2" in asked.stdout and "succeeded" in asked.stdout
    _, v2 = sorted(_builds(world), key=lambda r: r.version)
    assert (v2.reason, v2.state) == ("asked", BuildState.succeeded)
    assert v2.asked_by  # the token that asked, also in the audit trail
    assert v2.commit == world.hub.ref_sha(world.repo, "main")


def test_install_past_its_time_is_a_failed_build(world):
    world.hub.push_files(world.repo, "main", {"requirements.txt": "widgets-dep==1\n"},
                         "Add requirements", as_user=world.maintainer, bypass_rules=True)
    world.start_hangar(SEEING_AGENT, env={"install": "sleep 60"},
                       settings={"env_build_timeout_minutes": 0.05})
    world.ask("/hangar fix the failing test")
    [v1] = _finished(world, 1)
    assert v1.state is BuildState.failed
    assert v1.error == ("install ran longer than the build timeout of 3 s "
                        "(HANGAR_ENV_BUILD_TIMEOUT_MINUTES)")


def test_install_gets_the_mapped_build_secrets_and_nothing_else(world, monkeypatch):
    monkeypatch.setenv("WIDGETS_REGISTRY_TOKEN", "build-secret-value")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "model-key-value")
    world.hub.push_files(world.repo, "main", {"requirements.txt": "widgets-dep==1\n"},
                         "Add requirements", as_user=world.maintainer, bypass_rules=True)
    world.start_hangar(SEEING_AGENT, env={
        # What install sees, without writing the secret where the build would keep it.
        "install": "mkdir -p .deps && env | grep -v '^WIDGETS_REGISTRY_TOKEN=' > .deps/env.txt"
                   " && [ \"$WIDGETS_REGISTRY_TOKEN\" = build-secret-value ]"
                   " && echo yes > .deps/had-secret && ls -a $HOME > .deps/home.txt",
        "build_secrets": ["WIDGETS_REGISTRY_TOKEN"],
    })
    world.ask("/hangar fix the failing test")
    [v1] = _finished(world, 1)
    assert v1.state is BuildState.succeeded
    kept = Path(v1.image)
    seen = (kept / "repo" / ".deps" / "env.txt").read_text()
    home = (kept / "repo" / ".deps" / "home.txt").read_text()
    names = [path.name for path in kept.iterdir()]
    assert (kept / "repo" / ".deps" / "had-secret").read_text() == "yes\n"
    assert "model-key-value" not in seen and "hgs_" not in seen
    assert ".git-credentials" not in home  # the fetch-only token was gone before install ran
    assert set(names) <= {"repo", "spare"}  # the checkout and its spare copy: no $HOME
    # install's output is kept redacted: the secret never reaches a log hangar shows
    assert "build-secret-value" not in v1.log_tail


def test_a_deleted_build_falls_back_says_so_and_is_rebuilt(world):
    """Seed 004: a build whose kept checkout is gone is not a failed run. The next sandbox
    starts from the environment's own image, the agent is told so, the build is marked
    gone and a rebuild is queued; the public words name no host path."""
    import shutil

    _setup(world, "local")
    first, _ = world.ask("/hangar fix the failing test")
    _seen(world, first)
    [v1] = _finished(world, 1)
    assert v1.state is BuildState.succeeded
    shutil.rmtree(v1.image)  # an operator's cleanup, a lost volume

    second, _ = world.ask("/hangar fix the failing test", title="after the loss")
    seen = _seen(world, second)  # the run does its work: verified
    assert "deps: none" in seen and "NOT installed" in seen and "missing" in seen
    assert f"`{INSTALL}`" in seen  # the agent is told the install command
    status = wait_until(lambda: "Environment:" in world.status(second)
                        and world.status(second), 30, "the environment line")
    assert ("hangar's environment build for this repository is missing; it is being rebuilt, "
            "and this run starts without it") in status
    assert str(world.settings.data_dir) not in status and "/" + "tmp" not in status
    [gone] = [b for b in _builds(world) if b.version == 1]
    assert gone.state is BuildState.gone
    rebuilt = wait_until(lambda: [b for b in _builds(world) if b.version == 2
                                  and b.state is BuildState.succeeded], 60, "the rebuild")
    assert rebuilt[0].reason == "drift"
    # The sandbox after it starts from the rebuild.
    third, _ = world.ask("/hangar fix the failing test", title="rebuilt")
    assert f"build v2 ({rebuilt[0].id})" in _seen(world, third)


# What the next agent finds of the build: its file listing of .git and the leak, if any.
LOOKING_AGENT = """\
set -e
{ ls -a .git; cat .git/npm-cache 2>/dev/null || echo "no npm-cache"; } > SEEN.md
sed -i 's/return a - b/return a + b/' calc.py
git add SEEN.md calc.py
git commit -qm "Fix add()"
"""


def test_a_build_secret_left_in_git_fails_the_build_and_reaches_nobody(world, monkeypatch):
    """install writes a build secret, base64-encoded, into .git/ (which survives the
    build's clean): the build fails naming the file, not the value; the next agent starts
    without it; no comment, check run, build record or database file holds it."""
    secret = "wdgt-R3gistry-T0ken-5581"
    monkeypatch.setenv("WIDGETS_REGISTRY_TOKEN", secret)
    world.hub.push_files(world.repo, "main", {"requirements.txt": "widgets-dep==1\n"},
                         "Add requirements", as_user=world.maintainer, bypass_rules=True)
    world.start_hangar(LOOKING_AGENT, env={
        "install": 'printf %s "$WIDGETS_REGISTRY_TOKEN" | base64 | tee .git/npm-cache',
        "build_secrets": ["WIDGETS_REGISTRY_TOKEN"],
    })
    first, _ = world.ask("/hangar fix the failing test")
    [v1] = _finished(world, 1)
    assert v1.state is BuildState.failed and v1.image is None
    assert "WIDGETS_REGISTRY_TOKEN in .git/npm-cache" in v1.error, v1.error
    second, _ = world.ask("/hangar fix the failing test", title="again")
    seen = _seen(world, second)
    assert "no npm-cache" in seen and "npm-cache" not in seen.splitlines()[:-1], seen
    shown = [v1.error, v1.log_tail or "", seen]
    for issue in (first, second):
        shown += [c["body"] for c in world.hub.issue_comments(world.repo, issue)]
        pr = world.pr_for(issue)
        if pr:
            shown.append(pr["body"])
            shown += [json.dumps(c) for c in world.hub.check_runs(world.repo, pr["head"]["sha"])]
    shown += [p.read_bytes().decode("latin-1") for p in world.settings.data_dir.glob("hangar.db*")]
    for text in shown:
        assert leaked(text, secret) is None, text[:3000]
    assert len(shown) > 6
