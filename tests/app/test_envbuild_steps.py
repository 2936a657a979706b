"""The build queue's limits: at most HANGAR_ENV_BUILDS_CONCURRENCY at once, one per repo."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from app.envbuilds import rows as envbuilds
from app.envbuilds import steps as envbuild_steps
from app.store import Store
from sandbox.envbuild import BuildKey, BuildState


@pytest.fixture
def engine(tmp_path):
    store = Store(tmp_path / "hangar.db")
    yield SimpleNamespace(store=store, settings=SimpleNamespace(env_builds_concurrency=2))
    store.close()


def _queued(engine, repo: str, env: str = "python") -> envbuilds.EnvBuildRow:
    key = BuildKey(repo=repo, environment=env, provider="local", image_id="i",
                   config_digest="c", lockfiles=())
    return envbuilds.queue_build(engine.store, key, image_id="i", install="true", reason="first")


def _running(engine, row):
    envbuilds.save(engine.store, row.model_copy(update={"state": BuildState.running}))


@pytest.mark.parametrize(("running", "candidate", "free"), [
    ([], "acme/a", True),
    (["acme/a"], "acme/b", True),
    (["acme/a"], "ACME/a", False),          # one build per repository, whatever the lane
    (["acme/a", "acme/b"], "acme/c", False),  # at most two at once
])
def test_build_slots(engine, running, candidate, free):
    for repo in running:
        _running(engine, _queued(engine, repo, env=f"env-{repo}"))
    assert envbuild_steps.build_slot_free(engine, _queued(engine, candidate)) is free


async def test_at_startup_a_build_of_an_older_image_is_built_again_once(tmp_path):
    """The environment's image changed while hangar was down: its lanes rebuild, once."""
    from sandbox.envspec import EnvSpec

    store = Store(tmp_path / "hangar.db")
    woken = []
    engine = SimpleNamespace(store=store, wake=lambda *rows: woken.extend(rows), envs={
        "python": EnvSpec(name="python", provider="local", image="img-2", install="true")})
    key = BuildKey(repo="acme/a", environment="python", provider="local", image_id="img-1",
                   config_digest="c", lockfiles=(("uv.lock", "abc"),))
    row = envbuilds.queue_build(store, key, image_id="img-1", install="true", reason="first",
                                spec=engine.envs["python"].model_dump())
    envbuilds.finish(store, row, ok=True, commit="f00")
    try:
        [queued] = await envbuild_steps.rebuild_stale(engine)
        again = envbuilds.find(store, queued)
        assert (again.reason, again.image_id, again.version) == ("startup", "img-2", 2)
        assert [tuple(p) for p in again.lockfiles] == [("uv.lock", "abc")]
        assert woken == [queued]  # the new build is due at once
        assert await envbuild_steps.rebuild_stale(engine) == []  # already queued
        # The same image as the active build's: nothing to do.
        engine.envs["python"] = engine.envs["python"].model_copy(update={"image": "img-1"})
        assert await envbuild_steps.rebuild_stale(engine) == []
    finally:
        store.close()


@pytest.mark.bwrap
async def test_starting_from_a_build_runs_its_steps_in_one_exec_and_names_the_one_that_failed(
        tmp_path):
    import shutil

    from app.runs import must_each
    from sandbox.envspec import EnvSpec
    from sandbox.providers.local import LocalProvider

    if not shutil.which("bwrap"):
        pytest.skip("bubblewrap is not installed")
    provider = LocalProvider(root=tmp_path / "sandboxes")
    sb = await provider.create(EnvSpec(name="d", provider="local", network="none"), {})
    execs = []
    run = provider.run

    async def counted(*args, **kwargs):
        execs.append(args[1])
        return await run(*args, **kwargs)

    provider.run = counted
    try:
        out = await must_each(provider, sb, [(["mkdir", "repo"], "making"),
                                             (["cd", "repo"], "entering"),
                                             (["sh", "-c", "pwd"], "where")])
        assert out.strip() == "/workspace/repo" and len(execs) == 1
        with pytest.raises(RuntimeError) as failed:
            await must_each(provider, sb, [(["true"], "first"),
                                           (["sh", "-c", "echo nope; exit 4"], "the second"),
                                           (["touch", "third"], "third")])
        assert str(failed.value) == "the second failed (exit 4): nope"
        assert "third" not in (await provider.run(sb, ["ls"], cwd="/workspace")).output
    finally:
        await provider.destroy(sb)


@pytest.mark.parametrize(("name", "registry", "why"), [
    ("local", None, None), ("docker", None, None),
    ("kubernetes", "registry.example.com/hangar/builds", None),
    ("kubernetes", None, "set HANGAR_BUILD_REGISTRY"),
    ("nomad", None, "not available on the nomad provider"),
])
async def test_a_build_on_a_provider_that_cannot_keep_one_fails_before_it_starts(
        name, registry, why):
    from sandbox import snapshots

    # Only the name and the registry setting are read: a sandbox made would fail loudly.
    provider = SimpleNamespace(name=name, build_registry=registry)
    said = snapshots.unsupported(provider)
    if why is None:
        assert said is None
        return
    assert why in said and "the agent is told to run install" in said
    engine = SimpleNamespace(providers={name: provider})
    with pytest.raises(envbuild_steps.BuildFailed, match=why):
        await envbuild_steps.run_build(engine, SimpleNamespace(provider=name))


def test_install_output_is_kept_masked_of_the_build_secrets_in_every_encoding():
    """Masked by the build's own secrets, whether or not hangar's registry knows them (an
    environment file may have gained one since hangar started)."""
    import base64

    from tests.test_render_secrets import knowing, leaked

    secret = "npm_Bu1ldS3cr3t-from-env"
    printed = f"token: {base64.b64encode(b'x' + secret.encode()).decode()} {secret.encode().hex()}"
    with knowing():
        kept = envbuild_steps._redacted(printed, {"NPM_TOKEN": secret})
    assert kept.startswith("token: ") and leaked(kept, secret) is None, kept


async def test_the_install_follower_stops_when_cancelled_as_its_read_ends(engine):
    """The build cancels its follower of install's log when install ends. A cancel that came
    just as a read of the log finished was lost (Python 3.11's wait_for), the follower ran
    on, and the build waited for it for ever: it stayed "running" with no sandbox left."""
    import asyncio

    reads: list[asyncio.Future[bytes]] = []
    asked = asyncio.Event()

    class Provider:
        def copy_out(self, sb, path, max_bytes):
            reads.append(asyncio.get_running_loop().create_future())
            asked.set()
            return reads[-1]

    engine.settings.run_watch_interval_seconds = 0
    row = _queued(engine, "acme/a")
    following = asyncio.ensure_future(
        envbuild_steps._follow_install(engine, Provider(), object(), row, {}))
    await asked.wait()
    reads[-1].set_result(b"")  # the read ends, and before the follower resumes ...
    following.cancel()  # ... the build's install ends
    done, _ = await asyncio.wait([following], timeout=5)
    assert done and following.cancelled()
