"""The store's contract, held on both backends: a SQLite file and a real PostgreSQL.

Two `Store`s on one database stand for two replicas (on SQLite, two handles of one file:
what the contract promises holds there too, though one process serves a SQLite file).
"""

from __future__ import annotations

import asyncio
import threading
import time
from types import SimpleNamespace

import pytest

from app.database import DatabaseError, open_database
from app.landing import LandRequest, ReviewRecord, RowChanged, get, save, wake_request
from app.migrations import VERSION, current_version
from app.models import Job, Thread
from app.store import DELIVERY_LEASE_S, Store
from proxy.egress import EgressLedger
from proxy.gateway import ModelLedger
from proxy.tokens import TokenRegistry


@pytest.fixture
def replicas(database_target):
    a = Store(database_target, owner="replica-a")
    b = Store(database_target, owner="replica-b")
    yield a, b
    a.close()
    b.close()


def job(n: int) -> Job:
    return Job(id=f"job-{n}", thread=Thread(repo="acme/widgets", number=n, installation_id=1),
               requested_by="mona", prompt="p", clone_url="", base_branch="main")


def test_a_delivery_is_stored_once_whichever_replica_gets_it(replicas):
    a, b = replicas
    payload = {"action": "created", "installation": {"id": 7},
               "repository": {"full_name": "acme/widgets"}}
    assert a.add_delivery("guid-1", "issue_comment", payload) is True
    assert b.add_delivery("guid-1", "issue_comment", payload) is False  # GitHub redelivered
    assert a.add_deliveries([]) == []
    stored = b.delivery("guid-1")
    assert (stored.event, stored.action, stored.repo, stored.installation_id, stored.payload) == (
        "issue_comment", "created", "acme/widgets", 7, payload)
    assert a.count_deliveries() == 1 and a.count_deliveries("stored") == 1


def test_a_batch_stores_each_new_delivery_once_and_says_which_were_new(replicas):
    """One group commit may hold a delivery stored before, one id twice (GitHub's
    redelivery beside the first), and a few hundred deliveries."""
    from app.store import Delivery

    a, b = replicas
    assert b.add_delivery("guid-old", "star", {"action": "created"}) is True

    def delivery(delivery_id: str) -> Delivery:
        return Delivery(id=delivery_id, event="star", action="created", repo=None,
                        installation_id=None, received_at=time.time(), payload={},
                        state="stored", error=None)

    many = [f"guid-{n}" for n in range(300)]
    items = [(delivery("guid-twice"), '{"n": 1}'), (delivery("guid-old"), '{"n": 0}'),
             (delivery("guid-twice"), '{"n": 2}'),
             *((delivery(delivery_id), f'{{"id": "{delivery_id}"}}') for delivery_id in many)]
    assert a.write_deliveries(items, []) == [True, False, False, *([True] * len(many))]
    assert b.delivery("guid-twice").payload == {"n": 1}  # the first of the two
    assert b.delivery("guid-old").payload == {"action": "created"}
    assert b.delivery(many[-1]).payload == {"id": many[-1]}
    assert a.count_deliveries() == len(many) + 2
    # Their outcomes, recorded with the next batch: each its own, the last of two for one.
    outcomes = [(delivery_id, "dispatched", None) for delivery_id in many]
    outcomes += [("guid-twice", "dispatched", None), ("guid-old", "failed", "a handler"),
                 ("guid-twice", "failed", "again"), (many[0], "failed", "a handler")]
    a.write_deliveries([], outcomes)
    assert a.count_deliveries("dispatched") == len(many) - 1
    assert (b.delivery("guid-twice").state, b.delivery("guid-twice").error) == (
        "failed", "again")
    assert [(b.delivery(i).state, b.delivery(i).error) for i in ("guid-old", many[0])] == [
        ("failed", "a handler")] * 2


def test_a_received_delivery_is_its_receivers_until_its_lease_is_over(replicas):
    a, b = replicas
    a.add_delivery("guid-a", "star", {"action": "created"}, received_at=1.0)
    b.add_delivery("guid-b", "star", {"action": "deleted"}, received_at=2.0)
    assert [d.id for d in a.pending_deliveries()] == ["guid-a"]
    assert [d.id for d in b.pending_deliveries()] == ["guid-b"]
    with a.db.transaction() as db:  # replica a died holding guid-a; its lease runs out
        db.execute("UPDATE deliveries SET lease_until = ? WHERE id = 'guid-a'",
                   (time.time() - 1,))
    assert [d.id for d in b.pending_deliveries()] == ["guid-a", "guid-b"]
    assert a.pending_deliveries() == []  # b holds both now
    b.write_deliveries([], [("guid-a", "dispatched", None), ("guid-b", "failed", "boom")])
    assert a.pending_deliveries() == [] and b.pending_deliveries() == []
    assert (a.delivery("guid-b").state, a.delivery("guid-b").error) == ("failed", "boom")
    assert DELIVERY_LEASE_S >= 10  # long beside a dispatch, short beside GitHub's patience


def test_rows_keep_their_first_order_and_lookups_see_other_replicas_writes(replicas):
    a, b = replicas
    for n in (3, 1, 2):
        a.put("job", f"job-{n}", job(n), active=n != 2)
    b.put("job", "job-3", job(3), active=False)  # an update keeps the row's place
    assert [j.id for j in b.all("job", Job)] == ["job-3", "job-1", "job-2"]
    assert [j.id for j in a.all("job", Job, active=True)] == ["job-1"]
    assert [j.id for j in b.find("job", Job, thread__repo="acme/widgets", thread__number=2)] == [
        "job-2"]
    assert a.get("job", "job-9", Job) is None
    b.delete("job", "job-1")
    assert a.get("job", "job-1", Job) is None
    a.note("job-3", "started", at=5.0)
    b.note("job-3", "done", at=6.0)
    assert a.notes("job-3") == [(5.0, "started"), (6.0, "done")]
    a.audit("cli:mona", "token.create", "ci", None)
    b.audit("api:ci", "job.cancel", "job-3", "asked")
    trail = a.audit_trail()
    assert [(e["who"], e["action"], e["target"], e["detail"]) for e in trail] == [
        ("cli:mona", "token.create", "ci", None), ("api:ci", "job.cancel", "job-3", "asked")]
    assert a.audit_trail(after=trail[0]["seq"]) == trail[1:]


def test_rows_mentioning_a_text_are_found_in_any_case_oldest_first(replicas):
    a, b = replicas
    for n, repo in enumerate(["Acme/Widgets", "octo/widgets", "acme/widgets-two",
                              "acme/widgets"]):
        a.put("job", f"job-{n}", Job(id=f"job-{n}", thread=Thread(
            repo=repo, number=n, installation_id=1), requested_by="mona", prompt="p",
            clone_url="", base_branch="main"), active=n % 2 == 0)
    assert [j.id for j in b.mentioning("job", Job, '"acme/widgets"')] == ["job-0", "job-3"]
    assert [j.id for j in b.mentioning("job", Job, '"ACME/')] == ["job-0", "job-2", "job-3"]
    assert b.mentioning("intent", Job, '"acme/') == []  # another kind's rows are not read


def test_a_row_is_leased_to_one_replica_until_released_or_expired(replicas):
    a, b = replicas
    for n in (1, 2, 3):
        a.put("job", f"job-{n}", job(n), active=True)
    soon = time.time() + 30
    assert a.claim("job", ["job-1", "job-2"], soon) == {"job-1", "job-2"}
    assert b.claim("job", ["job-1", "job-2", "job-3"], soon) == {"job-3"}
    assert a.claim("job", ["job-1"], soon) == {"job-1"}  # its own lease: taken again
    assert b.lease_of("job", "job-1")[0] == "replica-a"
    a.release("job", "job-1")
    assert b.claim("job", ["job-1"], soon) == {"job-1"}
    # A replica that dies keeps its leases only until they expire.
    assert a.renew([("job", "job-2")], time.time() - 1) == {("job", "job-2")}
    assert b.claim("job", ["job-2"], soon) == {"job-2"}
    assert a.renew([("job", "job-2")], soon) == set()  # lost, and told so
    b.release("job", "job-2")
    # Writing a row leaves its lease alone.
    a.put("job", "job-3", job(3), active=True)
    assert a.claim("job", ["job-3"], soon) == set()


def test_a_row_tied_to_a_host_is_leased_only_by_that_hosts_replica(replicas):
    a, b = replicas
    a.put("job", "job-1", job(1), active=True, host="host-a")
    soon = time.time() + 30
    assert b.claim("job", ["job-1"], soon, host="host-b") == set()
    assert b.claim("job", ["job-1"], soon) == set()
    assert a.claim("job", ["job-1"], soon, host="host-a") == {"job-1"}
    a.release("job", "job-1")
    a.put("job", "job-1", job(1), active=True)  # its sandbox is gone: anyone's again
    assert b.claim("job", ["job-1"], soon, host="host-b") == {"job-1"}


def test_a_named_lock_has_one_holder_until_dropped_or_expired(replicas):
    a, b = replicas
    assert a.take_lock("status:job-1", time.time() + 30)
    assert not b.take_lock("status:job-1", time.time() + 30)
    assert a.take_lock("status:job-1", time.time() + 30)  # held: extended
    a.drop_lock("status:job-1")
    assert b.take_lock("status:job-1", time.time() - 1)  # taken, and at once expired
    assert a.take_lock("status:job-1", time.time() + 30)


def test_github_writes_are_spaced_and_counted_across_replicas(replicas):
    a, b = replicas
    policy = {"spacing": 1.0, "per_minute": 3, "per_hour": 500, "max_wait": 5.0}
    first = a.reserve_github_write(7, **policy)
    second = b.reserve_github_write(7, **policy)
    assert first.wait == pytest.approx(0, abs=0.2)
    assert second.wait == pytest.approx(1.0, abs=0.2)  # a second after a's, though b's own
    third = a.reserve_github_write(7, **policy)
    assert third.wait == pytest.approx(2.0, abs=0.2)
    # The fourth in a minute would wait for the minute to free a write: a pause instead.
    fourth = b.reserve_github_write(7, **policy)
    assert fourth.wait == 0 and fourth.limited_until > time.time() + 50
    assert "3 writes in the last minute" in fourth.why
    # The pause holds every replica, and another installation not at all.
    until, why = a.github_limited(7)
    assert until == pytest.approx(fourth.limited_until) and why == fourth.why
    assert a.reserve_github_write(7, **policy).limited_until == pytest.approx(until)
    assert b.reserve_github_write(8, **policy).wait == pytest.approx(0, abs=0.2)
    b.limit_github(8, time.time() + 600, "GitHub answered 429: rate limited")
    b.limit_github(8, time.time() + 10, "an earlier pause")  # never shortens one
    assert a.github_limited(8)[1] == "GitHub answered 429: rate limited"


def test_the_hour_budget_pauses_the_installation(replicas):
    a, b = replicas
    policy = {"spacing": 0.0, "per_minute": 1000, "per_hour": 4, "max_wait": 5.0}
    for store in (a, b, a, b):
        assert store.reserve_github_write(7, **policy).limited_until == 0
    slot = a.reserve_github_write(7, **policy)
    assert slot.limited_until > time.time() + 3500
    assert "4 content-creating calls in the last hour" in slot.why


def test_any_replicas_gate_accepts_any_sandbox_credential(database_target):
    tokens_a, tokens_b = TokenRegistry(database_target), TokenRegistry(database_target)
    models_a, models_b = ModelLedger(database_target), ModelLedger(database_target)
    egress_a, egress_b = EgressLedger(database_target), EgressLedger(database_target)
    git = tokens_a.issue("sb-1", repo="acme/widgets", branch="hangar/1-ab", installation_id=7)
    model = models_a.issue("sb-1", credential="ANTHROPIC_API_KEY", run_id="run-1")
    egress = egress_a.issue("sb-1", run_id="run-1", allow=["pypi.org:443"])
    grant = tokens_b.check("sb-1", git)
    assert (grant.repo, grant.branch, grant.installation_id) == ("acme/widgets", "hangar/1-ab", 7)
    assert models_b.check("sb-1", model) == ("ANTHROPIC_API_KEY", "run-1")
    assert egress_b.check("sb-1", egress).run_id == "run-1"
    assert tokens_b.owner_of(git) == "sb-1"
    # Metering and refusals from any replica add up in one place.
    models_a.record("run-1", "ANTHROPIC_API_KEY", input_tokens=10, output_tokens=2,
                    cost_usd=0.5, status=200)
    models_b.record("run-1", "ANTHROPIC_API_KEY", input_tokens=5, output_tokens=1, status=200)
    usage = models_a.usage("run-1")
    assert (usage.requests, usage.input_tokens, usage.output_tokens, usage.cost_usd) == (
        2, 15, 3, 0.5)
    request = models_b.begin("run-1", "ANTHROPIC_API_KEY", status=200, started_at=1.0)
    models_a.end(request, outcome="ok", error_type=None, last_byte_at=2.0)
    assert [r["outcome"] for r in models_b.requests_of("run-1")] == ["ok"]
    egress_a.record_blocked("run-1", "evil.example", 443, "not allowed")
    egress_b.record_blocked("run-1", "evil.example", 443, "not allowed")
    assert [(b.host, b.count) for b in egress_a.blocked("run-1")] == [("evil.example", 2)]
    # Revoking the git grant on one replica ends every credential on the other.
    tokens_a.revoke("sb-1")
    assert tokens_b.check("sb-1", git) is None
    assert egress_b.check("sb-1", egress) is None
    fresh = ModelLedger(database_target)  # no cached check: reads the grant's end
    assert fresh.check("sb-1", model) is None
    for table in (tokens_a, tokens_b, models_a, models_b, egress_a, egress_b, fresh):
        table.close()


def test_a_database_is_migrated_at_start_and_one_newer_than_hangar_refused(database_target):
    store = Store(database_target)
    assert current_version(store.db) == VERSION
    with store.db.transaction() as db:
        db.execute("INSERT INTO schema_version (version, applied_at) VALUES (?, ?)",
                   (VERSION + 1, time.time()))
    store.close()
    with pytest.raises(DatabaseError) as refused:
        Store(database_target)
    said = str(refused.value)
    assert f"schema version {VERSION + 1}, newer than this hangar knows ({VERSION})" in said
    assert "postgresql://" not in said and "password" not in said


def test_a_sqlite_database_from_before_versions_is_brought_up_to_date(tmp_path):
    import sqlite3

    from app.migrations import MIGRATIONS

    path = tmp_path / "hangar.db"
    old = job(1)
    db = sqlite3.connect(path)
    for statement in MIGRATIONS[0]:  # the schema as hangar wrote it before versions
        db.execute(statement)
    db.execute("INSERT INTO rows (kind, id, active, updated_at, data) VALUES"
               " ('job', 'job-1', 1, 1.0, ?)", (old.model_dump_json(),))
    db.commit()
    db.close()
    store = Store(path)
    assert current_version(store.db) == VERSION
    assert store.get("job", "job-1", Job) == old
    assert store.claim("job", ["job-1"], time.time() + 30) == {"job-1"}
    store.close()


def test_postgres_wakes_cross_replicas_and_the_leader_lock_moves_when_its_holder_dies(
        postgres_url):
    async def scenario() -> None:
        a, b = Store(postgres_url, owner="a"), Store(postgres_url, owner="b")
        heard: asyncio.Queue[str] = asyncio.Queue()
        ready = asyncio.Event()
        listening = asyncio.create_task(b.listen(heard.put_nowait, ready))
        await asyncio.wait_for(ready.wait(), 30)
        a.notify("wake job-1")
        assert await asyncio.wait_for(heard.get(), 30) == "wake job-1"
        leaders: dict[str, bool] = {}
        changes: dict[str, asyncio.Event] = {"a": asyncio.Event(), "b": asyncio.Event()}

        def told(name: str):
            def on_change(leading: bool) -> None:
                leaders[name] = leading
                changes[name].set()
            return on_change

        lead_a = asyncio.create_task(a.lead(told("a"), every=0.1))
        await asyncio.wait_for(changes["a"].wait(), 30)
        lead_b = asyncio.create_task(b.lead(told("b"), every=0.1))
        await asyncio.sleep(0.5)  # b tries five times meanwhile
        assert leaders == {"a": True}  # one leader at a time
        lead_a.cancel()  # a dies: its connection, and with it the lock, goes
        await asyncio.gather(lead_a, return_exceptions=True)
        assert leaders["a"] is False
        await asyncio.wait_for(changes["b"].wait(), 30)
        assert leaders["b"] is True
        for task in (lead_b, listening):
            task.cancel()
        await asyncio.gather(lead_b, listening, return_exceptions=True)
        a.close()
        b.close()

    asyncio.run(scenario())


def test_an_unreachable_postgresql_is_one_sentence_without_its_password(tmp_path):
    url = f"postgresql://hangar:s3cret@/nowhere?host={tmp_path}&connect_timeout=2"
    with pytest.raises(DatabaseError) as refused:
        open_database(url).connect()
    said = str(refused.value)
    assert "cannot reach" in said and "s3cret" not in said and "HANGAR_DATABASE_URL" in said


def land_request() -> LandRequest:
    return LandRequest(id="land-acme-widgets-2", job_id="job-1", repo="acme/widgets",
                       installation_id=1, pr_number=2, base="main", branch="hangar/x",
                       requested_by="mona", quiet=True)


def test_a_step_holding_a_stale_copy_cannot_undo_another_replicas_write(replicas):
    a, b = replicas
    on_a, on_b = SimpleNamespace(store=a), SimpleNamespace(store=b)
    save(on_a, land_request())
    step_copy = get(on_a, "land-acme-widgets-2")  # a's step read it, then awaits GitHub
    review = get(on_b, "land-acme-widgets-2")  # meanwhile b's intake records an approval
    review.quiet = False
    wake_request(review)
    save(on_b, review)
    step_copy.due_at = time.time() + 3600  # the step would park the quiet row for an hour
    with pytest.raises(RowChanged):
        save(on_a, step_copy)
    stored = get(on_b, "land-acme-widgets-2")
    assert (stored.quiet, stored.due_at, stored.version) == (False, 0, 2)


def test_writes_racing_from_two_replicas_lose_nothing(replicas):
    """Each replica's threads record reviews at once, each from its own fresh read: every
    one is kept (the store's check and write are one transaction on either backend)."""
    a, b = replicas
    save(SimpleNamespace(store=a), land_request())
    each = 15

    def add_review(engine: SimpleNamespace, review_id: int) -> None:
        request = get(engine, "land-acme-widgets-2")
        request.reviews.append(ReviewRecord(id=review_id, user="mona", state="approved"))
        save(engine, request)

    def writer(store: Store, first: int) -> None:
        engine = SimpleNamespace(store=store)
        for review_id in range(first, first + each):
            while True:  # as intake does, with no bound: the test counts what is kept
                try:
                    add_review(engine, review_id)
                    break
                except RowChanged:
                    continue

    threads = [threading.Thread(target=writer, args=(store, first))
               for store, first in ((a, 0), (b, 100), (a, 200), (b, 300))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    stored = get(SimpleNamespace(store=a), "land-acme-widgets-2")
    assert sorted(r.id for r in stored.reviews) == sorted(
        n for first in (0, 100, 200, 300) for n in range(first, first + each))
    assert stored.version == 1 + 4 * each


def test_a_row_changed_on_two_replicas_at_once_keeps_both_changes(replicas):
    """`update` reads, changes and writes in one transaction: each replica's threads add a
    status comment to one job at once, and every one is there at the end."""
    a, b = replicas
    a.put("job", "job-1", job(1), active=True)
    each = 15

    def add(store: Store, first: int) -> None:
        for number in range(first, first + each):
            store.update("job", "job-1", Job,
                         lambda j, n=number: j.model_copy(update={
                             "status_comments": {**j.status_comments, n: n}}),
                         placed=lambda _j: (True, None))

    threads = [threading.Thread(target=add, args=(store, first))
               for store, first in ((a, 0), (b, 100), (a, 200), (b, 300))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    kept = b.get("job", "job-1", Job).status_comments
    assert sorted(kept) == sorted(n for first in (0, 100, 200, 300)
                                  for n in range(first, first + each))
    with pytest.raises(KeyError):
        a.update("job", "job-2", Job, lambda j: j, placed=lambda _j: (True, None))
