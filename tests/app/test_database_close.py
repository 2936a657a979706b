"""Closing hangar's SQLite database closes every connection it opened, each thread's
too: a connection left open at exit leaves the WAL beside the file, and the next open
reads the WAL's pages over the file's own (a damaged page would go unseen)."""

from __future__ import annotations

import threading

from app.database import SqliteDatabase


def test_closing_a_per_thread_database_closes_every_threads_connection(tmp_path):
    path = tmp_path / "hangar.db"
    db = SqliteDatabase(path, per_thread=True)
    with db.transaction() as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")

    def write(text: str) -> None:
        with db.transaction() as conn:
            conn.execute("INSERT INTO notes VALUES (?)", (text,))

    writers = [threading.Thread(target=write, args=(f"note {n}",)) for n in range(3)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    assert path.with_name("hangar.db-wal").exists()
    db.close()
    assert not path.with_name("hangar.db-wal").exists()
    reopened = SqliteDatabase(path)
    with reopened.connect() as conn:
        assert conn.execute("SELECT count(*) FROM notes").fetchone()[0] == 3
    reopened.close()
