"""The database is precious, and GitHub is the backup.

`hangar serve` as its own process: it refuses a lost or corrupt database with one
sentence, and `--rebuild` recovers hangar's open work from what it wrote on fakehub.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys

import pytest

from tests.e2e.conftest import ROOT, wait_until

pytestmark = pytest.mark.slow


def serve_refused(world) -> str:
    """Run `hangar serve` and return what it said on stderr; it must refuse to start."""
    done = subprocess.run([sys.executable, "-m", "app.cli", "serve"],
                          env=world.hangar.environment(), cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2, done
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1  # one sentence
    return done.stderr


def delete_database(world) -> None:
    for suffix in ("", "-wal", "-shm"):
        (world.settings.data_dir / f"hangar.db{suffix}").unlink(missing_ok=True)


def test_a_deleted_database_stops_the_start(world):
    world.start_hangar(process=True)
    world.hangar.stop()
    delete_database(world)
    said = serve_refused(world)
    assert str(world.settings.data_dir / "hangar.db") in said
    assert "missing" in said and "--rebuild" in said
    assert not (world.settings.data_dir / "hangar.db").exists()  # not silently made anew


def test_a_corrupt_page_stops_the_start_with_the_file_named(world):
    world.start_hangar(process=True)
    world.hangar.stop()
    db = world.settings.data_dir / "hangar.db"
    with sqlite3.connect(db) as conn:
        page = conn.execute("PRAGMA page_size").fetchone()[0]
        assert conn.execute("PRAGMA page_count").fetchone()[0] > 3
    with open(db, "r+b") as f:  # garble the second page, a table's b-tree
        f.seek(page)
        f.write(b"\x07garbage" * (page // 8))
    said = serve_refused(world)
    assert str(db) in said and "corrupt" in said and "quick_check" in said


def test_rebuild_after_deleting_the_database_lands_the_open_pr_with_no_second_pr(world):
    world.start_hangar(process=True)
    issue, _ = world.ask("/hangar fix the failing test")
    pr = wait_until(lambda: world.verified(issue), 90, "a verified PR")
    world.hangar.stop()
    delete_database(world)
    world.restart("--rebuild")

    number = pr["number"]
    world.hub.comment(world.repo, number, "/hangar land", as_user=world.maintainer)
    wait_until(lambda: f"**Landing #{number}:**" in world.status(number), 60,
               "the land request on the recovered PR")
    assert not any("not opened by hangar" in r for r in world.replies(number))
    world.hub.review(world.repo, number, as_user=world.reviewer, event="APPROVE",
                     commit_id=pr["head"]["sha"])
    wait_until(lambda: world.hub.get_pr(world.repo, number)["merged"], 90, "the merge")
    assert len(world.hub.list_prs(world.repo)) == 1  # no second PR
    # hangar found its status comments again and edited them: still one on each thread
    assert len(world.status_comments(number)) == 1
    assert len(world.status_comments(issue)) == 1


def test_backup_while_serving_is_a_consistent_copy_that_serves(world, tmp_path):
    # Status edits 10 s apart: the PR's first status comment is posted after the copy.
    world.start_hangar(process=True, settings={"status_edit_interval_seconds": 10})
    issue, _ = world.ask("/hangar fix the failing test")
    pr = wait_until(lambda: world.verified(issue), 90, "a verified PR")
    backups = tmp_path / "backups"
    backups.mkdir()
    done = subprocess.run([sys.executable, "-m", "app.cli", "backup", str(backups)],
                          env=world.hangar.environment(), cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    [copy] = backups.glob("hangar-*.db")
    assert str(copy) in done.stdout
    with sqlite3.connect(copy) as conn:
        assert conn.execute("PRAGMA quick_check").fetchone()[0] == "ok"
        runs = conn.execute("SELECT data FROM rows WHERE kind = 'run'").fetchall()
    assert any(f'"pr_number":{pr["number"]}' in r[0] for r in runs)

    # What hangar posts after the copy was taken (the PR's status comment goes with the
    # issue's next edit) is not in it: the restored hangar finds it rather than post again.
    wait_until(lambda: world.status_comments(pr["number"]), 60, "the PR's status comment")
    # Restore: stop, put the copy in place, start; the PR is still hangar's.
    world.hangar.stop()
    delete_database(world)
    copy.replace(world.settings.data_dir / "hangar.db")
    world.restart()
    world.hub.comment(world.repo, pr["number"], "/hangar land", as_user=world.maintainer)
    wait_until(lambda: f"**Landing #{pr['number']}:**" in world.status(pr["number"]), 60,
               "the land request after the restore")
    assert len(world.status_comments(pr["number"])) == 1
    assert len(world.status_comments(issue)) == 1


def test_an_approval_given_before_the_database_was_lost_lands_after_the_rebuild(world):
    world.hub.protect(world.repo, checks=("ci / test",))  # nobody reports it until the test
    world.start_hangar(process=True)
    issue, _ = world.ask("/hangar fix the failing test")
    pr = wait_until(lambda: world.verified(issue), 90, "a verified PR")
    number, head = pr["number"], pr["head"]["sha"]
    world.hub.review(world.repo, number, as_user=world.reviewer, event="APPROVE",
                     commit_id=head)
    wait_until(lambda: "waiting for ci / test" in world.status(number), 60, "waiting for CI")
    world.hangar.stop()
    delete_database(world)
    world.restart("--rebuild")
    # The land request comes back from the approval alone: no new review, no command.
    world.hub.complete_check(world.repo, head, "ci / test", "success")
    wait_until(lambda: world.hub.get_pr(world.repo, number)["merged"], 90, "the merge")
    assert len(world.hub.list_prs(world.repo)) == 1


def test_the_reaper_keeps_a_sandbox_whose_run_it_does_not_know(world):
    from app import runs
    from app.web.keys import ENGINE

    hangar = world.start_hangar()
    engine = hangar.app[ENGINE]
    provider = engine.providers["local"]
    labels = {"hangar.instance": engine.instance_id, "hangar.run": "run-0000lost",
              "hangar.role": "agent"}
    sb = hangar.call(provider.create(engine.envs["default"], labels))
    hangar.call(runs.reap_orphans(engine))
    assert [s.id for s in hangar.call(provider.list(labels))] == [sb.id]
    hangar.call(provider.destroy(sb))
