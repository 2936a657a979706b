"""A real PostgreSQL for the tests and the benchmarks.

With `HANGAR_DATABASE_URL` given (a server where its user may create databases), the
tests use that server. Without it, Debian's `postgresql` package (scripts/setup.sh
installs it) runs a cluster of the session's own: `initdb` in a scratch directory, owned
by an unprivileged user when the tests run as root (PostgreSQL refuses to run as root),
listening on a unix socket in that directory only (no TCP), with durability off (a test
database need not survive the machine). It stops at the end of the session.

Each test that asks gets a database of its own, copied from a template that has hangar's
schema already (`CREATE DATABASE … TEMPLATE`: a few milliseconds, not a migration).
The variable is taken out of the environment, so that the rest of the suite, whose
settings read `HANGAR_*`, stays on SQLite unless a test asks for PostgreSQL.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

URL_VARIABLE = "HANGAR_DATABASE_URL"
TEMPLATE = "hangar_template"
_GIVEN_URL = os.environ.pop(URL_VARIABLE, None)


def _bin_dir() -> Path:
    """Where Debian keeps the server's programs (they are not on PATH)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0)
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).resolve().parent
    raise RuntimeError("PostgreSQL's server is not installed: run scripts/setup.sh "
                       "(apt-get install postgresql), or set HANGAR_DATABASE_URL to a server")


class PostgresServer:
    """A cluster of this process's own, on a unix socket; or a given server."""

    def __init__(self, given_url: str | None = None):
        self.given_url = given_url
        self.base: Path | None = None
        self._names = itertools.count()
        self._user: str | None = None

    # -- the cluster ------------------------------------------------------------------

    def start(self) -> PostgresServer:
        if self.given_url:
            self._make_template()
            return self
        bindir = _bin_dir()
        self.base = Path(tempfile.mkdtemp(prefix="hangar-pg-"))
        self.base.chmod(0o755)
        run_as = None
        if os.geteuid() == 0:  # PostgreSQL refuses root: a user of the system runs it
            run_as = "postgres" if _user_exists("postgres") else "nobody"
            entry = pwd.getpwnam(run_as)
            os.chown(self.base, entry.pw_uid, entry.pw_gid)
        self._run_as = run_as
        data = self.base / "data"
        self._run([str(bindir / "initdb"), "-D", str(data), "-U", "hangar", "-A", "trust",
                   "-E", "UTF8", "--no-sync", "--locale=C"])
        options = " ".join([
            f"-k {self.base}", "-c listen_addresses=''", "-c fsync=off",
            "-c synchronous_commit=off", "-c full_page_writes=off", "-c max_connections=200",
            "-c shared_buffers=32MB", "-c log_min_messages=warning"])
        self._run([str(bindir / "pg_ctl"), "-D", str(data), "-l", str(self.base / "log"),
                   "-o", options, "-w", "-t", "60", "start"])
        self._bindir = bindir
        self._make_template()
        return self

    def _run(self, argv: list[str]) -> None:
        result = subprocess.run(argv, user=self._run_as, capture_output=True, text=True,
                                cwd=self.base, timeout=120)
        if result.returncode != 0:
            log = ""
            with contextlib.suppress(OSError):
                log = (self.base / "log").read_text()[-2000:]
            raise RuntimeError(f"{argv[0]} failed ({result.returncode}): "
                               f"{result.stderr[-2000:]}{log}")

    def stop(self) -> None:
        if self.base is None:
            return
        with contextlib.suppress(Exception):
            self._run([str(self._bindir / "pg_ctl"), "-D", str(self.base / "data"),
                       "-m", "immediate", "-w", "stop"])
        shutil.rmtree(self.base, ignore_errors=True)
        self.base = None

    # -- databases --------------------------------------------------------------------

    def url(self, dbname: str) -> str:
        if self.given_url:
            from psycopg.conninfo import conninfo_to_dict, make_conninfo

            parts = conninfo_to_dict(self.given_url)
            parts["dbname"] = dbname
            return _as_url(make_conninfo(**parts))
        return f"postgresql://hangar@/{dbname}?host={quote(str(self.base), safe='/')}"

    def _admin(self):
        import psycopg

        admin_db = "postgres"
        return psycopg.connect(self.url(admin_db) if not self.given_url else self.given_url,
                               autocommit=True)

    def _make_template(self) -> None:
        from app.database import open_database
        from app.migrations import migrate

        with self._admin() as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {TEMPLATE}_{os.getpid()}")
            admin.execute(f"CREATE DATABASE {TEMPLATE}_{os.getpid()}")
        db = open_database(self.url(f"{TEMPLATE}_{os.getpid()}"))
        try:
            migrate(db)
        finally:
            db.close()

    def new_database(self, *, empty: bool = False) -> str:
        """A fresh database of its own: hangar's schema in it, or `empty`; its URL."""
        name = f"hangar_test_{os.getpid()}_{next(self._names)}"
        with self._admin() as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name}")
            template = "template0" if empty else f"{TEMPLATE}_{os.getpid()}"
            admin.execute(f"CREATE DATABASE {name} TEMPLATE {template}")
        return self.url(name)

    def drop_database(self, url: str) -> None:
        from psycopg.conninfo import conninfo_to_dict

        name = conninfo_to_dict(url)["dbname"]
        with self._admin() as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _as_url(conninfo: str) -> str:
    """psycopg's key=value conninfo, as a postgresql:// URL (what hangar's setting takes)."""
    from psycopg.conninfo import conninfo_to_dict

    parts = conninfo_to_dict(conninfo)
    user = quote(str(parts.pop("user", "")), safe="")
    password = parts.pop("password", None)
    auth = f"{user}:{quote(str(password), safe='')}@" if password else (f"{user}@" if user else "")
    host = parts.pop("host", "")
    port = parts.pop("port", "")
    dbname = parts.pop("dbname", "")
    netloc = host if host and not str(host).startswith("/") else ""
    if port and netloc:
        netloc += f":{port}"
    query = [f"{k}={quote(str(v), safe='/')}" for k, v in parts.items()]
    if host and str(host).startswith("/"):
        query.append(f"host={quote(str(host), safe='/')}")
        if port:
            query.append(f"port={port}")
    return f"postgresql://{auth}{netloc}/{dbname}" + (f"?{'&'.join(query)}" if query else "")


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


# -- pytest --------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = PostgresServer(_GIVEN_URL).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh database with hangar's schema, for this test alone."""
    url = postgres_server.new_database()
    yield url
    with contextlib.suppress(Exception):
        postgres_server.drop_database(url)


BACKENDS = ["sqlite", "postgresql"]


@pytest.fixture(params=BACKENDS)
def database_target(request: pytest.FixtureRequest, tmp_path: Path) -> str | Path:
    """The same test on each backend: a SQLite file's path, or a fresh PostgreSQL URL."""
    if request.param == "sqlite":
        return tmp_path / "hangar.db"
    return request.getfixturevalue("postgres_url")
