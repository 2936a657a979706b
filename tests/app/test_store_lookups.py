"""The engine's lookups go through indexes: no event reads the whole history."""

from __future__ import annotations

import pytest

from app.models import Job, Run, Thread
from app.store import _INDEXED, Store


@pytest.fixture
def store(database_target):
    """The same lookups on SQLite and on PostgreSQL."""
    store = Store(database_target)
    yield store
    store.close()


def job(n: int, repo: str = "acme/widgets") -> Job:
    return Job(id=f"job-{n}", thread=Thread(repo=repo, number=n % 5, installation_id=1),
               requested_by="mona", prompt="p", clone_url="", base_branch="main")


def run(n: int, job_id: str, pr: int | None = None) -> Run:
    return Run(id=f"run-{n}", job_id=job_id, branch=f"b{n}", base_branch="main",
               pr_number=pr, head_sha=f"{n:040x}")


def test_find_answers_what_a_scan_would(store):
    for n in range(20):
        store.put("job", f"job-{n}", job(n, "acme/widgets" if n % 2 else "acme/other"),
                  active=False)
        store.put("run", f"run-{n}", run(n, f"job-{n // 3}", pr=n % 4), active=n % 3 == 0)
    jobs, runs = store.all("job", Job), store.all("run", Run)
    cases = [
        ("run", Run, {"job_id": "job-2"}, [r for r in runs if r.job_id == "job-2"]),
        ("run", Run, {"pr_number": 3}, [r for r in runs if r.pr_number == 3]),
        ("run", Run, {"head_sha": f"{7:040x}"}, [r for r in runs if r.head_sha == f"{7:040x}"]),
        ("job", Job, {"thread__repo": "acme/other"},
         [j for j in jobs if j.thread.repo == "acme/other"]),
        ("job", Job, {"thread__repo": "acme/widgets", "thread__number": 3},
         [j for j in jobs if (j.thread.repo, j.thread.number) == ("acme/widgets", 3)]),
    ]
    for kind, model, where, expected in cases:
        assert expected and store.find(kind, model, **where) == expected, where
    # An update keeps the row's place and its index entries follow the new values.
    store.put("run", "run-5", run(5, "job-9", pr=3), active=False)
    assert [r.id for r in store.find("run", Run, job_id="job-9")] == ["run-5"]
    assert "run-5" not in [r.id for r in store.find("run", Run, job_id="job-1")]


def test_find_refuses_a_field_without_an_index(store):
    with pytest.raises(ValueError, match="not indexed"):
        store.find("run", Run, branch="b1")
    with pytest.raises(ValueError, match="not indexed"):
        store.find("job", Job, thread__number=3)  # only behind thread__repo
    with pytest.raises(ValueError, match="not indexed by nothing"):
        store.find("run", Run)


def plan_of(store: Store, query: str, args: tuple) -> str:
    """How the database would run the query: SQLite's plan, or PostgreSQL's with a scan of
    the whole table priced out (a test's few rows would make a scan the cheaper way)."""
    with store.db.connect() as db:
        if store.dialect == "sqlite":
            return " ".join(r[3] for r in db.execute(f"EXPLAIN QUERY PLAN {query}", args))
        db.execute("SET enable_seqscan = off")
        try:
            return " ".join(r[0] for r in db.execute(f"EXPLAIN {query}", args))
        finally:
            db.execute("RESET enable_seqscan")


@pytest.mark.parametrize(("kind", "paths"), sorted(_INDEXED))
def test_every_lookup_searches_an_index_and_never_scans(store, kind, paths):
    plan = plan_of(store, store.find_query(kind, paths), ("x",) * len(paths))
    if store.dialect == "sqlite":
        assert "USING INDEX" in plan and "(<expr>=?" in plan and "SCAN" not in plan, plan
    else:
        assert "Index Scan using" in plan and "Seq Scan" not in plan, plan


def test_the_scheduler_reads_only_active_rows_through_an_index(store):
    plan = plan_of(store, store.active_query(), ("run", 1))
    if store.dialect == "sqlite":
        assert "USING INDEX rows_active (kind=? AND active=?)" in plan, plan
    else:
        assert "rows_active" in plan and "Seq Scan" not in plan, plan
