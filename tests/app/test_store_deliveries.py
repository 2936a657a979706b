"""Deliveries in the store: long payloads kept beside their rows, short ones in them, and rows
from before that."""

from __future__ import annotations

import sqlite3
import time

from app.store import Delivery, Store


def test_a_payload_is_kept_beside_its_row_and_outcomes_leave_it_alone(tmp_path):
    store = Store(tmp_path / "hangar.db")
    payload = {"action": "created", "comment": {"body": "x" * 20_000}}
    assert store.add_delivery("d-new", "issue_comment", payload)
    store.write_deliveries([], [("d-new", "failed", "boom")])
    delivery = store.delivery("d-new")
    assert (delivery.state, delivery.error, delivery.payload) == ("failed", "boom", payload)
    store.close()
    db = sqlite3.connect(tmp_path / "hangar.db")
    assert db.execute("SELECT payload FROM deliveries WHERE id = 'd-new'").fetchone() == ("",)
    (kept,) = db.execute("SELECT payload FROM delivery_payloads WHERE id = 'd-new'").fetchone()
    assert len(kept) > 20_000
    db.close()


def test_a_short_payload_is_kept_in_its_row_and_reads_back_after_its_outcome(tmp_path):
    store = Store(tmp_path / "hangar.db")
    payload = {"action": "created", "comment": {"id": 1, "body": "/hangar fix it"}}
    assert store.add_delivery("d-short", "issue_comment", payload)
    assert not store.add_delivery("d-short", "issue_comment", payload)
    store.write_deliveries([], [("d-short", "dispatched", None)])
    delivery = store.delivery("d-short")
    assert (delivery.state, delivery.payload) == ("dispatched", payload)
    store.close()
    db = sqlite3.connect(tmp_path / "hangar.db")
    assert db.execute("SELECT count(*) FROM delivery_payloads").fetchone() == (0,)
    db.close()


def test_a_delivery_stored_with_its_payload_in_its_row_reads_back_and_is_dispatched(tmp_path):
    Store(tmp_path / "hangar.db").close()
    db = sqlite3.connect(tmp_path / "hangar.db")
    with db:  # as hangar wrote every delivery before payloads moved beside the rows
        db.execute(
            "INSERT INTO deliveries (id, event, action, repo, installation_id, received_at,"
            " payload, state) VALUES ('d-old', 'star', 'created', 'o/r', 1, 1.0,"
            " '{\"action\": \"created\", \"starred_at\": null}', 'stored')")
    db.close()
    store = Store(tmp_path / "hangar.db")
    store.add_delivery("d-new", "star", {"action": "deleted"}, received_at=2.0)
    pending = store.pending_deliveries()
    assert [(d.id, d.payload["action"]) for d in pending] == [
        ("d-old", "created"), ("d-new", "deleted")]
    store.write_deliveries([], [("d-old", "dispatched", None)])
    assert store.delivery("d-old").payload == {"action": "created", "starred_at": None}
    assert store.count_deliveries("stored") == 1
    store.close()


def test_a_serving_store_checkpoints_on_its_own_thread_and_never_in_a_commit(tmp_path):
    path = tmp_path / "hangar.db"
    payload = {"action": "created", "comment": {"body": "x" * 20_000}}
    store = Store(path, checkpoint_every=3600)  # none comes while the test runs
    for n in range(200):  # some 1,200 WAL pages: past the 1,000 where a commit would copy
        store.add_delivery(f"d-{n}", "issue_comment", payload)
    assert path.stat().st_size < 1_000_000  # still all in the WAL
    store.close()

    store = Store(path, checkpoint_every=0.05)
    for n in range(200, 400):
        store.add_delivery(f"d-{n}", "issue_comment", payload)
    deadline = time.monotonic() + 10
    while path.stat().st_size < 8_000_000 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert path.stat().st_size >= 8_000_000  # both hundreds copied back, the store still open
    assert store.delivery("d-399").payload == payload


def test_the_wal_starts_over_under_a_steady_stream_of_commits(tmp_path):
    """A passive checkpoint copies the WAL only up to the commit it started at; with
    another commit always in, the WAL never started over and grew by every payload."""
    path = tmp_path / "hangar.db"
    wal = path.with_name("hangar.db-wal")
    payload = {"action": "created", "comment": {"body": "x" * 13_000}}
    store = Store(path, checkpoint_every=0.02)

    def starts() -> int:
        # The WAL header's checkpoint sequence number: one more each time it starts over.
        with open(wal, "rb") as f:
            return int.from_bytes(f.read(16)[12:16], "big")

    n = 0
    store.add_delivery("d-first", "issue_comment", payload)
    first = starts()
    # Commits back to back, as a busy intake writes them, until the WAL has started over
    # twice; at most some 80 MB of them. How often it does depends on how often the
    # checkpoint's thread gets to run, so the count is not held to more.
    while starts() - first < 2 and n < 6_000:
        store.add_deliveries([(Delivery(
            id=f"d-{n + i}", event="issue_comment", action="created", repo=None,
            installation_id=None, received_at=time.time(), payload=payload, state="stored",
            error=None), None) for i in range(20)])
        n += 20
    restarted = starts() - first
    store.close()
    assert restarted >= 2, f"the WAL started over {restarted} times in {n * 13 / 1e3:.0f} MB"


def test_handled_deliveries_past_the_retention_are_forgotten_and_pending_ones_kept(tmp_path):
    store = Store(tmp_path / "hangar.db")
    day = 86_400.0
    long = {"action": "created", "comment": {"body": "x" * 5000}}  # kept beside its row
    for delivery_id, age_days in (("old-done", 20), ("old-failed", 15), ("old-pending", 30),
                                  ("new-done", 1)):
        store.add_delivery(delivery_id, "issue_comment", long,
                           received_at=100 * day - age_days * day)
    store.write_deliveries([], [("old-done", "dispatched", None), ("old-failed", "failed", "x"),
                                ("new-done", "dispatched", None)])
    assert store.forget_deliveries(100 * day - 14 * day, limit=10) == 2
    assert [d for d in ("old-done", "old-failed", "old-pending", "new-done")
            if store.delivery(d) is not None] == ["old-pending", "new-done"]
    assert store.forget_deliveries(100 * day - 14 * day, limit=10) == 0
    store.close()
    db = sqlite3.connect(tmp_path / "hangar.db")
    assert sorted(r[0] for r in db.execute("SELECT id FROM delivery_payloads")) == [
        "new-done", "old-pending"]
    db.close()


async def test_the_chore_forgets_in_batches_until_none_is_left(tmp_path, settings, monkeypatch):
    from types import SimpleNamespace

    from app.intake import redelivery

    store = Store(tmp_path / "hangar.db")
    long_ago = time.time() - (settings.delivery_retention_days + 1) * 86_400
    for n in range(12):
        store.add_delivery(f"d{n}", "push", {}, received_at=long_ago + n)
    store.write_deliveries([], [(f"d{n}", "dispatched", None) for n in range(12)])
    store.add_delivery("today", "push", {})
    store.write_deliveries([], [("today", "dispatched", None)])
    calls = []
    real = store.forget_deliveries
    monkeypatch.setattr(store, "forget_deliveries",
                        lambda before, limit: calls.append(limit) or real(before, limit))
    monkeypatch.setattr(redelivery, "FORGET_BATCH", 5)
    forgotten = await redelivery.forget_old_deliveries(SimpleNamespace(settings=settings,
                                                                       store=store))
    assert (forgotten, calls) == (12, [5, 5, 5])
    assert store.count_deliveries() == 1
    store.close()
