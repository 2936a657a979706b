"""Whether hangar's data directory can hold its state: one sentence with the fix if not.

Checked before `hangar serve` or `hangar setup` starts, so a read-only, full or missing
directory, or a database that is not one, is a message naming the path, not a traceback
(and setup never registers an App it could not save). The database is precious: SQLite's
quick_check refuses a corrupt one, and a directory that held a database and lost it is
refused unless hangar is told to rebuild from GitHub.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
from pathlib import Path

from app.settings import Settings, SettingsError

# Written next to the database once hangar serves from it: the database's absence is
# then a loss to report, not a fresh start.
MARKER = "hangar.id"
# Present while a rebuild from GitHub is owed; the engine removes it once done.
REBUILD_PENDING = "rebuild.pending"
OPERATIONS = "docs/operations.md"
# Holds the sandbox gate's socket (app/web/sandbox_gate.py); providers bind it into sandboxes.
GATE_DIR_NAME = "sandbox-gate"


def private_dir(path: Path) -> Path:
    """A directory only hangar's user may enter (0700): the data directory holds job data,
    keys, sessions and sandboxes' files."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path.stat().st_mode & 0o777 != 0o700:
        # A read-only file system refuses: the write probe then says what is wrong.
        with contextlib.suppress(OSError):
            os.chmod(path, 0o700)
    return path


def private_database(path: Path) -> None:
    """The database file (made if absent) readable by hangar's user only (0600); SQLite
    gives its -wal and -shm files the database's own mode.

    An existing file is never opened here, only chmod-ed by its path: closing any
    descriptor of a database file drops every POSIX lock this process's SQLite
    connections hold on it."""
    private_dir(path.parent)
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, 0o600))
    except FileExistsError:
        pass
    for file in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        with contextlib.suppress(FileNotFoundError):
            if file.stat().st_mode & 0o777 != 0o600:
                os.chmod(file, 0o600)


def gate_dir(data_dir: Path | str) -> Path:
    """The directory holding the sandbox gate's socket; providers bind it into sandboxes."""
    return Path(data_dir).resolve() / GATE_DIR_NAME


def check_data_dir(data_dir: Path, db_path: Path) -> None:
    """Raise SettingsError, naming the path and the fix, if hangar cannot keep state here."""
    try:
        private_dir(data_dir)
    except OSError as exc:
        raise SettingsError(
            f"HANGAR_DATA_DIR={data_dir} cannot be created ({exc.strerror}): create it and "
            "give hangar's user write access, or point HANGAR_DATA_DIR at a writable "
            "directory.") from None
    probe = data_dir / f".hangar-write-probe-{os.getpid()}"
    try:
        with probe.open("wb") as handle:
            handle.write(b"\0" * 65536)  # room for a page of writes, not one byte
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as exc:
        raise SettingsError(_unwritable(data_dir, exc)) from None
    finally:
        with contextlib.suppress(OSError):  # a read-only file system refuses even this
            probe.unlink(missing_ok=True)
    if not db_path.exists():
        return
    try:
        problems = quick_check(db_path)
    except sqlite3.DatabaseError as exc:
        raise SettingsError(
            f"{db_path} is not a usable SQLite database ({exc}): restore it from a backup "
            f"(see {OPERATIONS}), or move it aside (mv {db_path} {db_path}.broken) and start "
            "with `hangar serve --rebuild` to recover hangar's open work from GitHub."
        ) from None
    if problems != ["ok"]:
        raise SettingsError(corrupt(db_path, problems[0]))


def quick_check(db_path: Path) -> list[str]:
    """SQLite's own quick integrity check: ["ok"], or what is wrong."""
    db = sqlite3.connect(db_path)
    try:
        db.execute("PRAGMA schema_version").fetchone()  # not a database at all: raises
        try:
            return [r[0] for r in db.execute("PRAGMA quick_check").fetchall()]
        except sqlite3.DatabaseError as exc:  # a database with damaged pages
            return [str(exc)]
    finally:
        db.close()


def corrupt(db_path: Path, said: str) -> str:
    return (f"hangar's database {db_path} is corrupt (SQLite's quick_check says: "
            f"{said[:200]}): restore it from a backup (see {OPERATIONS}), or move it aside "
            f"(mv {db_path} {db_path}.broken) and start with `hangar serve --rebuild` to "
            "recover hangar's open work from GitHub.")


def _unwritable(data_dir: Path, exc: OSError) -> str:
    if exc.errno == errno.ENOSPC or exc.errno == errno.EDQUOT:
        return (f"HANGAR_DATA_DIR={data_dir} is full ({exc.strerror}): free space on its "
                "file system or grow the volume, then start hangar again.")
    if exc.errno == errno.EROFS:
        return (f"HANGAR_DATA_DIR={data_dir} is on a read-only file system: mount it "
                "read-write, or point HANGAR_DATA_DIR at a writable directory.")
    return (f"HANGAR_DATA_DIR={data_dir} is not writable ({exc.strerror}): give hangar's "
            f"user write access (e.g. chown -R <user> {data_dir}), or point "
            "HANGAR_DATA_DIR at a writable directory.")


def check_history(settings: Settings, *, rebuild: bool = False) -> str:
    """Refuse a data directory that held a database and lost it; else say how hangar starts.

    Returns "existing", "fresh" or "rebuild" (the database is missing and will be rebuilt).
    """
    data_dir = Path(settings.data_dir)
    db = Path(settings.db_path)
    if db.exists():
        mark(data_dir)
        return "existing"
    traces = traces_of_a_database(data_dir)
    if traces and not rebuild:
        raise SettingsError(
            f"hangar's database {db} is missing, but {data_dir} held one (found "
            f"{', '.join(traces)}): restore the file from a backup (see {OPERATIONS}), or "
            "start with `hangar serve --rebuild` to recover hangar's open work from GitHub."
        )
    mark(data_dir)
    return "rebuild" if traces or rebuild else "fresh"


# The flags a shared database (PostgreSQL) keeps instead of files in one replica's data
# directory: it has been served from; a rebuild from GitHub is owed.
SERVED_FLAG = "served"
REBUILD_FLAG = "rebuild.pending"


def traces_of_a_database(data_dir: Path) -> list[str]:
    """What in data_dir shows a database lived here."""
    found = []
    if (data_dir / MARKER).exists():
        found.append(MARKER)
    for name in ("hangar.db-wal", "hangar.db-shm"):
        if (data_dir / name).exists():
            found.append(name)
    for sub in ("bundles", "sandboxes"):
        if (data_dir / sub).is_dir() and any((data_dir / sub).iterdir()):
            found.append(f"{sub}/")
    return found


def mark(data_dir: Path) -> None:
    marker = data_dir / MARKER
    if not marker.exists():
        marker.write_text("hangar keeps its database, hangar.db, in this directory.\n")


def request_rebuild(data_dir: Path) -> None:
    (Path(data_dir) / REBUILD_PENDING).write_text(
        "hangar recovers its open work from GitHub at start, then removes this file.\n")


def rebuild_pending(data_dir: Path) -> bool:
    return (Path(data_dir) / REBUILD_PENDING).exists()


def rebuild_done(data_dir: Path) -> None:
    (Path(data_dir) / REBUILD_PENDING).unlink(missing_ok=True)


def backup_database(db: Path, target: Path) -> tuple[Path, int]:
    """A consistent copy of db at target (a file, or a directory for one), also while
    hangar writes to it: SQLite's online backup, then its quick_check on the copy."""
    import time

    if not db.exists():
        raise SettingsError(f"there is no database at {db}: set HANGAR_DATA_DIR (or "
                           "data_dir in the config file) to hangar's data directory.")
    if target.is_dir():
        target = target / time.strftime("hangar-%Y%m%d-%H%M%S.db", time.gmtime())
    partial = target.with_name(f".{target.name}.partial")
    try:
        # A backup holds everything the database does: hangar's user alone reads it.
        os.close(os.open(partial, os.O_CREAT | os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC, 0o600))
        os.chmod(partial, 0o600)
        source = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        copy = sqlite3.connect(partial)
        try:
            source.execute("PRAGMA busy_timeout=5000")
            # In one step: one read of one snapshot, which hangar's writes meanwhile (WAL)
            # leave alone. In steps, a write by hangar between two of them started the
            # copy over, and a busy hangar's backup never ended.
            source.backup(copy, pages=-1)
        finally:
            copy.close()
            source.close()
        problems = quick_check(partial)
        if problems != ["ok"]:
            raise sqlite3.DatabaseError(f"the copy fails quick_check: {problems[0][:200]}")
        partial.replace(target)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise SettingsError(f"hangar cannot write the backup {target} ({exc.strerror}): "
                           "choose a writable path with free space.") from None
    except sqlite3.Error as exc:
        partial.unlink(missing_ok=True)
        raise SettingsError(f"hangar could not copy {db} to {target} ({exc}): if the "
                           "database is corrupt, restore an earlier backup.") from None
    return target, target.stat().st_size
