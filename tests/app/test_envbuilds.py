"""Environment build rows: numbering per lane, the active build, keep-5, pins, the audit."""

from __future__ import annotations

import re

import pytest

from app.envbuilds import rows as envbuilds
from app.store import Store
from sandbox.envbuild import BuildKey, BuildState, config_digest


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "hangar.db")
    yield s
    s.close()


def _key(lock: str = "b1", provider: str = "docker") -> BuildKey:
    return BuildKey(repo="acme/app", environment="python", provider=provider,
                    image_id="sha256:aaa", config_digest=config_digest("pip install .", [], []),
                    lockfiles=(("requirements.txt", lock),))


def _built(store, lock: str, *, ok: bool = True, provider: str = "docker"):
    row = envbuilds.queue_build(store, _key(lock, provider), image_id="sha256:aaa",
                                install="pip install .", reason="drift")
    done, dropped = envbuilds.finish(store, row, ok=ok, image=f"img-{lock}" if ok else None,
                                     commit="c" * 40, error=None if ok else "install exited 1",
                                     log="Collecting requests\nerror: boom\n")
    return done, dropped


def test_versions_count_per_lane_and_a_failure_keeps_the_active_build(store):
    first, _ = _built(store, "b1")
    second, _ = _built(store, "b2", ok=False)
    other, _ = _built(store, "b1", provider="local")
    assert (first.version, second.version, other.version) == (1, 2, 1)
    lid = first.lane_id
    assert envbuilds.active(store, lid).id == first.id
    assert second.state is BuildState.failed and second.image is None
    assert "install exited 1" in envbuilds.builds_table(store, "acme/app")


def test_keep_five_drops_the_oldest_and_never_the_pinned_one(store):
    first, _ = _built(store, "b0")
    envbuilds.rollback(store, first.id, who="ops")
    dropped_all = []
    for n in range(1, 8):
        _, dropped = _built(store, f"b{n}")
        dropped_all += [d.id for d in dropped]
    kept = envbuilds.history(store, first.lane_id)
    assert first.id in [r.id for r in kept] and first.id not in dropped_all
    assert len(kept) == 6  # the newest five and the pinned one
    assert envbuilds.active(store, first.lane_id).id == first.id  # pinned: drift does not win
    assert envbuilds.unpin(store, "ACME/app", who="ops") == [first.lane_id]
    assert envbuilds.active(store, first.lane_id).version == 8


def test_rollback_refuses_a_failed_or_unknown_build(store):
    failed, _ = _built(store, "b1", ok=False)
    with pytest.raises(envbuilds.BuildError, match="only a build that succeeded"):
        envbuilds.rollback(store, failed.id, who="ops")
    with pytest.raises(envbuilds.BuildError, match="hangar env builds OWNER/REPO"):
        envbuilds.find(store, "bld-nope")


def test_builds_rollbacks_and_unpins_are_audited_with_who(store):
    done, _ = _built(store, "b1")
    envbuilds.rollback(store, done.id, who="alice")
    envbuilds.unpin(store, "acme/app", who="bob")
    trail = [(e["who"], e["action"], e["detail"]) for e in envbuilds.audit_trail(store, "acme/app")]
    assert trail == [
        ("hangar", "env.build", f"{done.id} v1 (drift)"),
        ("hangar", "env.build.finish", f"{done.id} v1 succeeded"),
        ("alice", "env.rollback", f"{done.id} v1"),
        ("bob", "env.unpin", "acme/app|python|docker"),
    ]
    # the one audit trail the API reads, with the repository as the target
    assert {e["target"] for e in store.audit_trail()} == {"acme/app"}


def test_build_show_has_the_config_and_the_end_of_the_output(store):
    done, _ = _built(store, "b1", ok=False)
    text = envbuilds.build_details(envbuilds.find(store, done.id))
    assert "install:     pip install ." in text and "requirements.txt@b1" in text
    assert text.rstrip().endswith("error: boom")


def test_the_env_commands_on_the_store(tmp_path, monkeypatch, capsys):
    from app.cli import main

    monkeypatch.setenv("HANGAR_DATA_DIR", str(tmp_path / "data"))
    assert main(["env", "builds", "acme/app"]) == 2
    assert "no database at" in capsys.readouterr().err
    store = Store(tmp_path / "data" / "hangar.db")
    done, _ = _built(store, "b1")
    _built(store, "b2")
    store.close()
    assert main(["env", "builds", "acme/app"]) == 0
    table = capsys.readouterr().out
    assert "acme/app / python on docker" in table and "* v2" in table and "  v1" in table
    assert main(["env", "rollback", done.id]) == 0
    assert "is active and pinned" in capsys.readouterr().out
    assert main(["env", "builds", "acme/app"]) == 0
    assert re.search(rf"^\* v1 +{done.id} +succeeded", capsys.readouterr().out, re.M)
    assert main(["env", "unpin", "acme/app"]) == 0
    assert main(["env", "build-show", "bld-missing"]) == 1
    assert "no environment build 'bld-missing'" in capsys.readouterr().err


@pytest.mark.parametrize(("shown", "tail", "fresh"), [
    ("", "a\nb\n", "a\nb\n"),  # nothing printed yet
    ("a\n", "a\nb\n", "b\n"),  # it grew
    ("a\nb\n", "a\nb\n", ""),  # nothing new
    ("a\nb\nc\n", "b\nc\nd\n", "d\n"),  # the tail moved on: past the overlap only
    ("x\n", "y\n", "y\n"),  # moved past all of it
])
def test_build_repo_wait_prints_what_the_tail_holds_after_what_it_printed(shown, tail, fresh):
    assert envbuilds.new_output(shown, tail) == fresh
