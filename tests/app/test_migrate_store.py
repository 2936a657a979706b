"""`hangar migrate-store --to postgresql://…`: every row of the SQLite file, copied,
checked, and never over a database that holds rows."""

from __future__ import annotations

import time

import pytest

from app.cli import main
from app.models import Job, Thread
from app.store import Store
from proxy.egress import EgressLedger
from proxy.gateway import ModelLedger
from proxy.tokens import TokenRegistry


def job(n: int) -> Job:
    return Job(id=f"job-{n}", thread=Thread(repo="acme/widgets", number=n, installation_id=1),
               requested_by="mona", prompt=f"fix {n}", clone_url="", base_branch="main")


@pytest.fixture
def sqlite_hangar(tmp_path, monkeypatch):
    """A data directory whose hangar.db holds rows in the store's and the gate's tables."""
    data = tmp_path / "data"
    monkeypatch.setenv("HANGAR_DATA_DIR", str(data))
    db = data / "hangar.db"
    store = Store(db)
    store.add_delivery("guid-1", "issue_comment", {"action": "created"}, received_at=1.0)
    for n in (3, 1, 2):
        store.put("job", f"job-{n}", job(n), active=n == 1)
    store.note("job-1", "started", at=10.0)
    store.audit("cli:mona", "token.create", "ci", None)
    store.close()
    tokens, models, egress = TokenRegistry(db), ModelLedger(db), EgressLedger(db)
    git = tokens.issue("sb-1", repo="acme/widgets", branch="hangar/1-ab", installation_id=7)
    model = models.issue("sb-1", credential="ANTHROPIC_API_KEY", run_id="run-1")
    models.record("run-1", "ANTHROPIC_API_KEY", input_tokens=10, status=200)
    models.begin("run-1", "ANTHROPIC_API_KEY", status=200, started_at=1.0)
    egress.record_blocked("run-1", "evil.example", 443, "not allowed")
    for table in (tokens, models, egress):
        table.close()
    return db, git, model


def test_every_row_is_copied_checked_and_a_second_copy_refused(sqlite_hangar, postgres_server,
                                                               capsys):
    db, git, model = sqlite_hangar
    url = postgres_server.new_database(empty=True)
    secret_url = url.replace("postgresql://hangar@", "postgresql://hangar:s3cret@")
    assert main(["migrate-store", "--to", secret_url]) == 0
    said = capsys.readouterr()
    assert "copied" in said.out and "compared the copy" in said.out
    assert "s3cret" not in said.out + said.err

    copy = Store(url)
    assert [j.id for j in copy.all("job", Job)] == ["job-3", "job-1", "job-2"]  # first order
    assert [j.id for j in copy.all("job", Job, active=True)] == ["job-1"]
    assert copy.get("job", "job-2", Job) == Store(db).get("job", "job-2", Job)
    assert copy.delivery("guid-1").payload == {"action": "created"}
    assert copy.notes("job-1") == [(10.0, "started")]
    assert [e["who"] for e in copy.audit_trail()] == ["cli:mona"]
    # New rows follow the copied ones: the identities start past the copy.
    copy.put("job", "job-4", job(4), active=False)
    assert [j.id for j in copy.all("job", Job)][-1] == "job-4"
    copy.note("job-1", "landed", at=time.time())
    assert [what for _, what in copy.notes("job-1")] == ["started", "landed"]
    # The sandboxes' credentials work against the copy: any replica's gate accepts them.
    assert TokenRegistry(url).check("sb-1", git).branch == "hangar/1-ab"
    ledger = ModelLedger(url)
    assert ledger.check("sb-1", model) == ("ANTHROPIC_API_KEY", "run-1")
    assert ledger.usage("run-1").input_tokens == 10
    assert [r["status"] for r in ledger.requests_of("run-1")] == [200]
    assert ledger.begin("run-1", "ANTHROPIC_API_KEY", status=200, started_at=2.0) > 1
    assert [b.host for b in EgressLedger(url).blocked("run-1")] == ["evil.example"]
    # The copy has been served from: starting on it owes no rebuild from GitHub.
    assert copy.has_flag("served") and not copy.has_flag("rebuild.pending")
    copy.close()

    assert main(["migrate-store", "--to", url]) == 1
    refused = capsys.readouterr().err
    assert "already holds rows" in refused and "never over one" in refused


def test_a_data_directory_without_a_database_or_a_url_not_postgresql_is_refused(
        tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HANGAR_DATA_DIR", str(tmp_path / "empty"))
    assert main(["migrate-store", "--to", "mysql://x/y"]) == 2
    assert "postgresql://" in capsys.readouterr().err
    assert main(["migrate-store", "--to", "postgresql://u@/d?host=/nowhere"]) == 2
    assert "there is no database" in capsys.readouterr().err


def test_a_copy_that_differs_from_the_file_is_said_and_not_served(sqlite_hangar,
                                                                  postgres_server, capsys):
    import psycopg

    url = postgres_server.new_database()  # hangar's schema, no rows
    with psycopg.connect(url, autocommit=True) as conn:  # a server that changes what it keeps
        conn.execute("CREATE FUNCTION mangle() RETURNS trigger AS $$ BEGIN"
                     " NEW.what := upper(NEW.what); RETURN NEW; END $$ LANGUAGE plpgsql")
        conn.execute("CREATE TRIGGER mangle BEFORE INSERT ON events FOR EACH ROW"
                     " EXECUTE FUNCTION mangle()")
    assert main(["migrate-store", "--to", url]) == 1
    assert "the copy of table events" in capsys.readouterr().err
    assert not Store(url).has_flag("served")


def test_a_pg_dump_restored_into_an_empty_database_serves_as_the_docs_say(postgres_server,
                                                                          tmp_path):
    import subprocess

    from tests.postgres import _bin_dir

    url = postgres_server.new_database()
    store = Store(url)
    store.put("job", "job-1", job(1), active=True)
    store.note("job-1", "started", at=1.0)
    store.close()
    dump = tmp_path / "hangar.dump"
    subprocess.run([str(_bin_dir() / "pg_dump"), "--format=custom", f"--file={dump}", url],
                   check=True, timeout=120)
    restored = postgres_server.new_database(empty=True)
    subprocess.run([str(_bin_dir() / "pg_restore"), "--no-owner", f"--dbname={restored}",
                    str(dump)], check=True, timeout=120)
    again = Store(restored)
    assert again.get("job", "job-1", Job).prompt == "fix 1"
    assert again.notes("job-1") == [(1.0, "started")]
    again.note("job-1", "landed", at=2.0)  # its numbering goes on past the dump's
    assert [what for _, what in again.notes("job-1")] == ["started", "landed"]
    again.close()


def test_hangar_backup_on_postgresql_points_at_pg_dump(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HANGAR_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HANGAR_DATABASE_URL", "postgresql://hangar:s3cret@db/hangar")
    assert main(["backup", str(tmp_path / "copy.db")]) == 2
    said = capsys.readouterr().err
    assert "pg_dump" in said and "s3cret" not in said
