"""A data directory hangar cannot use is one sentence naming the path and the fix.

Read-only and full file systems are real ones, made with bubblewrap around the CLI."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from app import render
from app.datadir import backup_database, check_history, traces_of_a_database
from app.models import Job, Run, Thread
from app.repositories.rebuild import opened_by_hangar, read_pr_body, verification_from_check
from app.settings import Settings, SettingsError
from app.store import Delivery, Store

ROOT = Path(__file__).resolve().parents[2]


def serve(data_dir: Path, wrap: list[str] = ()) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANGAR_")}
    env.update(HANGAR_DATA_DIR=str(data_dir), HANGAR_PORT="1")
    return subprocess.run([*wrap, sys.executable, "-m", "app.cli", "serve"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


def bwrap(*mounts: str) -> list[str]:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    return ["bwrap", "--bind", "/", "/", "--dev", "/dev", "--proc", "/proc", *mounts, "--"]


def one_sentence(result) -> str:
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    return result.stderr


def test_a_read_only_data_dir(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    said = one_sentence(serve(data, bwrap("--ro-bind", str(data), str(data))))
    assert f"HANGAR_DATA_DIR={data} is on a read-only file system: mount it read-write" in said


def test_a_full_data_dir(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    said = one_sentence(serve(data, bwrap("--size", "8192", "--tmpfs", str(data))))
    assert f"HANGAR_DATA_DIR={data} is full" in said and "free space" in said


def serve_here(hangar_cli, data_dir: Path):
    """`hangar serve` in this process: for what needs no file system of its own."""
    return hangar_cli("serve", env={"HANGAR_DATA_DIR": str(data_dir), "HANGAR_PORT": "1"})


def test_a_data_dir_that_cannot_be_created(tmp_path, hangar_cli):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    said = one_sentence(serve_here(hangar_cli, blocker / "data"))
    assert f"HANGAR_DATA_DIR={blocker / 'data'} cannot be created" in said


def test_a_corrupt_database(tmp_path, hangar_cli):
    data = tmp_path / "data"
    data.mkdir()
    (data / "hangar.db").write_bytes(b"this is not SQLite, " * 200)
    said = one_sentence(serve_here(hangar_cli, data))
    db = data / "hangar.db"
    assert f"{db} is not a usable SQLite database" in said
    assert f"mv {db} {db}.broken" in said
    assert (data / "hangar.db").read_bytes().startswith(b"this is not SQLite")  # kept as is


def settings(tmp_path: Path) -> Settings:
    (tmp_path / "data").mkdir()
    return Settings(data_dir=tmp_path / "data")


def test_a_fresh_directory_starts_and_is_marked(tmp_path):
    s = settings(tmp_path)
    assert check_history(s) == "fresh"
    Store(s.db_path).close()
    assert check_history(s) == "existing"


def test_a_database_that_was_there_and_is_gone_is_refused_unless_rebuilding(tmp_path):
    s = settings(tmp_path)
    check_history(s)
    Store(s.db_path).close()
    s.db_path.unlink()
    with pytest.raises(SettingsError) as refused:
        check_history(s)
    assert str(s.db_path) in str(refused.value) and "--rebuild" in str(refused.value)
    assert check_history(s, rebuild=True) == "rebuild"


@pytest.mark.parametrize("leftover", ["bundles/run-1.bundle", "sandboxes/sb-1/x", "hangar.id"])
def test_traces_of_a_database(tmp_path, leftover):
    path = tmp_path / leftover
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("x")
    assert traces_of_a_database(tmp_path)


def test_empty_work_directories_are_no_trace(tmp_path):
    (tmp_path / "sandboxes").mkdir()
    (tmp_path / "bundles").mkdir()
    assert traces_of_a_database(tmp_path) == []


def test_backup_copies_a_database_in_use(tmp_path):
    store = Store(tmp_path / "hangar.db")
    store.note("job-1", "one")
    copy, size = backup_database(tmp_path / "hangar.db", tmp_path / "copy.db")
    store.note("job-1", "two")  # the source stays writable during and after
    with sqlite3.connect(copy) as conn:
        assert conn.execute("SELECT what FROM events").fetchall() == [("one",)]
    assert size == copy.stat().st_size
    store.close()


def test_a_backup_ends_while_hangar_writes_between_any_two_steps(tmp_path, monkeypatch):
    """A backup taken in steps started over at every write that landed between two of
    them: on a busy hangar a large database's backup never ended. Here a write lands
    after every step SQLite reports, the worst case, and the backup still ends."""
    store = Store(tmp_path / "hangar.db")
    payload = {"action": "created", "comment": {"body": "x" * 13_000}}
    store.add_deliveries([(Delivery(id=f"before-{n}", event="issue_comment",
                                    action="created", repo=None, installation_id=None,
                                    received_at=1.0, payload=payload, state="stored",
                                    error=None), None) for n in range(600)])
    writes: list[int] = []

    class Busy(sqlite3.Connection):
        def backup(self, target, *, pages=-1, progress=None, **kw):
            def a_write_between(status, remaining, total):
                if remaining:  # another step follows: hangar writes meanwhile
                    assert len(writes) < 100, "the backup keeps starting over"
                    store.note("job-1", f"write {len(writes)}")
                    writes.append(remaining)
            return super().backup(target, pages=pages, progress=a_write_between, **kw)

    connect = sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect", lambda *a, **kw: connect(*a, factory=Busy, **kw))
    copy, _ = backup_database(tmp_path / "hangar.db", tmp_path / "copy.db")
    monkeypatch.undo()
    with sqlite3.connect(copy) as conn:
        assert conn.execute("SELECT COUNT(*) FROM deliveries").fetchone() == (600,)
    store.close()


def test_read_pr_body_reads_back_what_render_wrote():
    job = Job(id="job-0a1b2c3d", thread=Thread(repo="o/r", number=7, installation_id=1),
              requested_by="mona", prompt="fix ```the``` test\nplease", clone_url="",
              base_branch="main")
    run = Run(job_id=job.id, branch="hangar/7-0a1b-2", base_branch="main")
    facts = read_pr_body(render.pr_body(job, run))
    assert facts is not None
    assert (facts.job_id, facts.branch, facts.thread_number, facts.requested_by) == (
        "job-0a1b2c3d", "hangar/7-0a1b-2", 7, "mona")
    assert facts.prompt == job.prompt and facts.closes_issue


@pytest.mark.parametrize("body", [None, "", "Fixes #3", "<!-- hangar:pr job-1 x -->"])
def test_read_pr_body_ignores_other_bodies(body):
    assert read_pr_body(body) is None


@pytest.mark.parametrize(("conclusion", "passed"), [
    ("success", True), ("failure", False), ("neutral", None)])
def test_verification_from_check(conclusion, passed):
    check = {"status": "completed", "conclusion": conclusion, "head_sha": "abc",
             "output": {"summary": "x\n\n- command: `make test`\n- commit: `abc`"}}
    v = verification_from_check(check)
    assert v.passed is passed and v.command == "make test" and v.head_sha == "abc"


@pytest.mark.parametrize(("user", "head_repo", "ours"), [
    ({"login": "hangar[bot]", "type": "Bot"}, "o/r", True),
    # another App (or a person) copying hangar's marker into its PR body is not hangar
    ({"login": "mallory-app[bot]", "type": "Bot"}, "o/r", False),
    ({"login": "mallory", "type": "User"}, "o/r", False),
    ({"login": "hangar[bot]", "type": "Bot"}, "mallory/r", False),  # a fork's branch
])
def test_only_a_pr_hangars_own_bot_opened_is_recovered_as_hangars(user, head_repo, ours):
    job = Job(id="job-0a1b2c3d", thread=Thread(repo="o/r", number=7, installation_id=1),
              requested_by="mona", prompt="fix it", clone_url="", base_branch="main")
    run = Run(job_id=job.id, branch="hangar/7-0a1b", base_branch="main")
    body = render.pr_body(job, run)
    pr = {"user": user, "body": body,
          "head": {"ref": "hangar/7-0a1b", "repo": {"full_name": head_repo}},
          "base": {"ref": "main", "repo": {"full_name": "o/r"}}}
    assert opened_by_hangar(pr, read_pr_body(body), bot_login="hangar[bot]") is ours


def test_only_hangars_user_reads_its_data_directory_database_and_backups(tmp_path):
    """Job data, keys and sandboxes' files live here: 0700 for the directory, 0600 for the
    database (and SQLite's -wal and -shm beside it) and for every backup."""
    from app.datadir import check_data_dir
    from proxy import TokenRegistry

    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    os.chmod(data, 0o755)  # made by an operator with a permissive umask
    check_data_dir(data, data / "hangar.db")
    tokens = TokenRegistry(data / "hangar.db")  # the gate's tables may open it first
    store = Store(data / "hangar.db")
    tokens.issue("sb-1", repo="acme/widgets", branch="b", installation_id=1)  # a WAL write
    backup, _ = backup_database(data / "hangar.db", tmp_path)
    try:
        modes = {path.name: oct(path.stat().st_mode & 0o777)
                 for path in (data, *data.glob("hangar.db*"), backup)}
    finally:
        store.close()
    assert modes.pop("data") == "0o700"
    assert set(modes.values()) == {"0o600"}, modes
    assert {"hangar.db", "hangar.db-wal"} <= set(modes), modes
