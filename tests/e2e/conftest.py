"""End-to-end fixtures: fakehub, a repository, people, and hangar serving on loopback.

Everything crosses real HTTP and real git. hangar runs either on its own thread
(`world.start_hangar()`) or as a separate process (`process=True`) that a test may
kill -9 and start again.
"""

from __future__ import annotations

import itertools
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from app import demo, logs
from app.service import ServiceThread
from app.settings import Settings
from app.web.registration import load_app_manifest

ROOT = Path(__file__).resolve().parents[2]

# The suite runs on two cores, shared with other runs: a step a quiet machine takes in a
# second can take ten under load. A deadline costs time only when its test fails anyway, so
# every wait holds out at least this long, and twice what its test says.
UNDER_LOAD_S = 120

REPO_FILES = {
    "README.md": "# widgets\n",
    "calc.py": "def add(a, b):\n    return a - b\n",
    "test_calc.py": (
        "import unittest\n\nfrom calc import add\n\n\n"
        "class AddTest(unittest.TestCase):\n"
        "    def test_adds(self):\n"
        "        self.assertEqual(add(2, 3), 5)\n"
    ),
}

# An agent that fixes the bug and commits: the happy path.
FIX_AGENT = """\
set -e
sed -i 's/return a - b/return a + b/' calc.py
git commit -qam "Fix add()"
echo "Fixed add()."
"""

# Fixes add() in the first turn; a follow-up turn adds sub().
TWO_TURNS = """\
set -e
if [ "$HANGAR_TURN" = 1 ]; then
  sed -i 's/return a - b/return a + b/' calc.py
  git commit -qam "Fix add()"
else
  printf '\\n\\ndef sub(a, b):\\n    return a - b\\n' >> calc.py
  git commit -qam "Add sub()"
fi
echo "turn $HANGAR_TURN done"
"""

VERIFY = "python3 -m unittest -q"

# hangar is quiet (World.settle) when its engine's next timed look is at least this far
# off: a row due sooner is work still under way (a run watched every half second).
QUIET_S = 1.0


def _worker_ports() -> Iterator[int]:
    """This test process's own ports, in turn: a thousand per pytest-xdist worker, below
    the ports hangar's demo picks and the kernel's ephemeral ones, so no other worker and
    no outgoing connection takes a port between its pick and its bind."""
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    first = 10000 + 1000 * (worker % 10)
    start = random.randrange(1000)  # another test run's worker of the same number
    return itertools.cycle([*range(first + start, first + 1000), *range(first, first + start)])


_PORTS = _worker_ports()


def free_port() -> int:
    return demo.free_port(itertools.islice(_PORTS, 1000))


@pytest.fixture
def unreachable_port() -> Iterator[int]:
    """A loopback port that refuses connections for the whole test: bound and never
    listening, so no other process (another test run, too) can start serving on it."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]


class HangarProcess:
    """`hangar serve` as its own process, for kill -9 tests."""

    def __init__(self, settings: Settings, log_path: Path, open_files: int | None = None):
        self.settings = settings
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None
        # Soft and hard limit of open files for the process (None: this process's own).
        self.open_files = open_files

    def _limit_open_files(self) -> None:
        if self.open_files is not None:
            import resource

            resource.setrlimit(resource.RLIMIT_NOFILE, (self.open_files, self.open_files))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.settings.port}"

    def environment(self) -> dict[str, str]:
        s = self.settings
        env = {k: v for k, v in os.environ.items() if not k.startswith("HANGAR_")}
        env.update({
            "HANGAR_APP_ID": str(s.app_id), "HANGAR_PRIVATE_KEY_FILE": str(s.private_key_file),
            "HANGAR_WEBHOOK_SECRET": s.secret(), "HANGAR_DATA_DIR": str(s.data_dir),
            "HANGAR_GITHUB_URL": s.github_url, "HANGAR_PORT": str(s.port),
            "HANGAR_ENVS_DIR": str(s.envs_dir),
            "HANGAR_MAX_CONCURRENT_AGENTS": str(s.max_concurrent_agents),
            "HANGAR_RUN_WATCH_INTERVAL_SECONDS": str(s.run_watch_interval_seconds),
            "HANGAR_POLL_INTERVAL_SECONDS": str(s.poll_interval_seconds),
            "HANGAR_REDELIVERY_INTERVAL_SECONDS": str(s.redelivery_interval_seconds),
            "HANGAR_GITHUB_WRITE_SPACING_SECONDS": str(s.github_write_spacing_seconds),
            "HANGAR_GITHUB_WRITES_PER_MINUTE": str(s.github_writes_per_minute),
            "HANGAR_STATUS_EDIT_INTERVAL_SECONDS": str(s.status_edit_interval_seconds),
            "HANGAR_SANDBOX_GATE_HEADER_TIMEOUT_SECONDS": str(
                s.sandbox_gate_header_timeout_seconds),
            "HANGAR_LEASE_SECONDS": str(s.lease_seconds),
            # A stop waits this long for steps in flight (a GitHub call backing off), as
            # hangar on its thread does, not the 20 s an operator's deploy gives it.
            "HANGAR_SHUTDOWN_GRACE_SECONDS": str(s.shutdown_grace_seconds),
        })
        if s.database_url is not None:
            env["HANGAR_DATABASE_URL"] = s.database_url.get_secret_value()
        if s.replica_id:
            env["HANGAR_REPLICA_ID"] = s.replica_id
        return env

    def start(self, *args: str) -> HangarProcess:
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve", *args], env=self.environment(), cwd=ROOT,
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=self._limit_open_files if self.open_files is not None else None,
        )
        deadline = time.monotonic() + UNDER_LOAD_S
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.settings.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("hangar serve did not start; see " + str(self.log_path))

    def kill9(self) -> None:
        """kill -9 hangar itself; sandboxed agents are its children only by accident."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.proc = None


@dataclass
class World:
    hub: Any
    tmp: Path
    repo: str = "acme/widgets"
    maintainer: str = "mona"
    reviewer: str = "rita"
    reader: str = "rick"
    app: Any = None
    settings: Settings | None = None
    hangar: Any = None
    running: list[Any] = field(default_factory=list)
    api_token: str | None = None
    installation_id: int = 0
    # hangar's database: None for the SQLite file in its data directory, or a PostgreSQL
    # URL (the world fixture's parameter "postgresql").
    database: str | None = None

    def start_hangar(
        self, agent_script: str = FIX_AGENT, *, verify: str | None = VERIFY,
        max_agents: int = 3, provider: str = "local", process: bool = False,
        verify_retries: int = 1, max_minutes: float = 10, env: dict[str, Any] | None = None,
        settings: dict[str, Any] | None = None, open_files: int | None = None,
        sign_in: bool = False,
    ) -> Any:
        envs = self.tmp / "envs"
        envs.mkdir(exist_ok=True)
        spec: dict[str, Any] = {"name": "default", "provider": provider, "harness": "script",
                                "agent_script": agent_script, "max_minutes": max_minutes}
        if verify:
            spec["verify"] = {"command": verify, "timeout_minutes": 2, "retries": verify_retries}
        if provider == "docker":
            spec.update(image="hangar-base:1", network="loopback")
        spec.update(env or {})
        (envs / "default.yaml").write_text(yaml.safe_dump(spec))
        port = free_port()
        self.hub.set_webhook_url(self.app.id, f"http://127.0.0.1:{port}/webhook")
        if sign_in:  # people sign in to hangar's pages with the App's OAuth client
            public = f"http://127.0.0.1:{port}"
            self.hub.set_callback_urls(self.app.id, f"{public}/login/github/callback")
            settings = {"client_id": self.app.client_id,
                        "client_secret": self.app.client_secret, "public_url": public,
                        **(settings or {})}
        self.settings = Settings(
            app_id=self.app.id, private_key_file=self.app.private_key_path,
            webhook_secret=self.app.webhook_secret, data_dir=self.tmp / "hangar",
            github_url=self.hub.api_url, port=port, envs_dir=envs,
            max_concurrent_agents=max_agents, poll_interval_seconds=3, shutdown_grace_seconds=2,
            api_token=self.api_token,
            database_url=self.database,
            **{
                # fakehub holds hangar to GitHub's secondary limits itself; spacing every
                # write a second apart on top of that only makes each flow a minute longer.
                "github_write_spacing_seconds": 0,
                # Folding status-comment edits is shown in its own test; here a flow need
                # not wait ten seconds for its comment to say what happened, nor two: a
                # test that reads the comment waits about an interval after each change.
                "status_edit_interval_seconds": 0.5,
                "run_watch_interval_seconds": 0.5,
                **(settings or {}),
            },
        )
        if process:
            self.hangar = HangarProcess(self.settings, self.tmp / "hangar.log",
                                        open_files).start()
        else:
            self.hangar = ServiceThread(self.settings).start()
        self.running.append(self.hangar)
        return self.hangar

    def raise_write_limit(self, per_minute: int = 1000) -> dict[str, Any]:
        """GitHub's content-creating calls a minute raised, as a GitHub Enterprise Server's
        administrator may: for a flow that makes more than GitHub's 80 in a minute and would
        only wait for the minute to pass, checking nothing (the limit has its own tests:
        tests/fakehub/test_fakehub_strict.py, tests/app/test_github_shared_budget.py).
        fakehub's limit now; hangar's setting to start it with, returned."""
        self.hub.hub.rates.writes_per_minute = per_minute
        return {"github_writes_per_minute": per_minute}

    def restart(self, *args: str) -> None:
        """Start hangar again on the same data directory and port (`serve` args: args)."""
        assert isinstance(self.hangar, HangarProcess)
        self.hangar.start(*args)

    # -- acting as people ---------------------------------------------------------

    def ask(self, comment: str, *, title: str = "add() is wrong", body: str = "It subtracts.",
            as_user: str | None = None) -> tuple[int, int]:
        issue = self.hub.create_issue(self.repo, title, body, as_user=self.maintainer)
        comment_id = self.hub.comment(self.repo, issue, comment, as_user=as_user or self.maintainer)
        return issue, comment_id

    def settle(self, what: str) -> None:
        """Until GitHub has sent every delivery (and run its CI), hangar on its thread has
        handled each, and its engine waits for a time or an event, with nothing new sent
        meanwhile: the decisions those deliveries asked for are taken. A test that a
        delivery changes nothing waits on this, then looks once (that a later timed look
        changes nothing either is the step tests' to show)."""
        assert isinstance(self.hangar, ServiceThread), "settle() looks into hangar's thread"
        app = self.hangar.app

        async def hangar_quiet() -> bool:
            from app.web.keys import DISPATCHER, ENGINE

            return app[DISPATCHER].idle() and app[ENGINE].quiet(QUIET_S)

        def quiet() -> bool:
            self.hub.settle()
            sent = len(self.hub.deliveries(self.app.id))
            if not self.hangar.call(hangar_quiet()):
                return False
            self.hub.settle()
            return len(self.hub.deliveries(self.app.id)) == sent

        wait_until(quiet, 30, what)

    # -- reading what people see --------------------------------------------------

    def status_comments(self, number: int) -> list[dict]:
        return [c for c in self.hub.issue_comments(self.repo, number)
                if "<!-- hangar:status" in c["body"]]

    def status(self, number: int) -> str:
        found = self.status_comments(number)
        return found[0]["body"] if found else ""

    def replies(self, number: int) -> list[str]:
        return [c["body"] for c in self.hub.issue_comments(self.repo, number)
                if "<!-- hangar:reply" in c["body"]]

    def hangar_prs(self) -> list[dict]:
        return [p for p in self.hub.list_prs(self.repo) if p["head"]["ref"].startswith("hangar/")]

    def pr_for(self, issue: int) -> dict | None:
        for pr in self.hangar_prs():
            if pr["head"]["ref"].startswith(f"hangar/{issue}-"):
                return self.hub.get_pr(self.repo, pr["number"])
        return None

    def checks(self, sha: str) -> dict[str, dict]:
        return {c["name"]: c for c in self.hub.check_runs(self.repo, sha)}

    def verified(self, issue: int) -> dict | None:
        """The PR for issue once `hangar / verify` completed on its head."""
        pr = self.pr_for(issue)
        if pr is None:
            return None
        check = self.checks(pr["head"]["sha"]).get("hangar / verify")
        return pr if check and check["status"] == "completed" else None


def wait_until(predicate: Callable[[], Any], timeout: float = 60, what: str = "condition",
               interval: float = 0.1) -> Any:
    """The predicate's first true value; `timeout`: what the wait takes on a quiet machine,
    with room to spare (it is stretched to hold under load)."""
    timeout = max(2 * timeout, UNDER_LOAD_S)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


def own_sleep(seconds: int) -> str:
    """`sleep` with a mark only this test's agent carries: tests run side by side on
    several workers, and one that finds or kills processes by their command line must
    never find another test's."""
    return f"sleep {seconds}.{random.SystemRandom().randrange(10**6):06d}"


def pids_with(marker: str) -> list[int]:
    """The processes whose command line holds marker (an `own_sleep`), this one aside."""
    found = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    return [int(p) for p in found.stdout.split() if int(p) != os.getpid()]


def wrappers_above(pids: list[int]) -> list[int]:
    """The hangar-agent wrappers that are ancestors of these processes: this test's own,
    where `pgrep -f hangar-agent` would find every test's."""
    found: list[int] = []
    for pid in pids:
        while pid > 1:
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:  # gone meanwhile
                break
            if b"\0hangar-agent\0" in cmdline and pid not in found:
                found.append(pid)
            pid = int(stat.rsplit(")", 1)[1].split()[1])  # the parent's pid
    return found


@pytest.fixture
def world(fakehub, tmp_path, request) -> Iterator[World]:
    """The world; `@pytest.mark.parametrize("world", ["sqlite", "postgresql"],
    indirect=True)` runs a test on each of hangar's databases."""
    hub = fakehub
    w = World(hub=hub, tmp=tmp_path)
    if getattr(request, "param", "sqlite") == "postgresql":
        w.database = request.getfixturevalue("postgres_url")
    # Registered as the manifest says, as `hangar setup` would.
    w.app = hub.create_app(name="hangar", permissions=load_app_manifest()["default_permissions"])
    for login in ("acme", w.maintainer, w.reviewer, w.reader):
        hub.create_user(login)
    hub.create_user("dependabot[bot]", bot=True)
    hub.create_repo("acme", "widgets", dict(REPO_FILES))
    hub.grant(w.repo, w.maintainer, "write")
    hub.grant(w.repo, w.reviewer, "write")
    hub.grant(w.repo, w.reader, "read")
    w.installation_id = hub.install(w.app.id, "acme", [w.repo])
    # hangar on a thread logs into this process: its lines go where a process's would, so a
    # failure shows their tail either way.
    handler = logging.FileHandler(tmp_path / "hangar.log")
    handler.setFormatter(logs.JsonFormatter())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    if level > logging.INFO:
        root.setLevel(logging.INFO)
    try:
        yield w
        for service in w.running:
            service.stop()
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        handler.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """On a failure, show the end of hangar's own log (on its thread or as a process)."""
    outcome = yield
    report = outcome.get_result()
    world = item.funcargs.get("world") if hasattr(item, "funcargs") else None
    if report.failed and world is not None:
        log = world.tmp / "hangar.log"
        if log.exists():
            report.sections.append(("hangar.log", log.read_text()[-6000:]))


@pytest.fixture(scope="session")
def docker_engine() -> None:
    """A Docker engine with hangar's base image (scripts/setup.sh provides both)."""
    import docker

    try:
        client = docker.from_env()
        client.ping()
        client.images.get("hangar-base:1")
    except Exception as exc:  # no engine, or no image: say which
        pytest.skip(f"no Docker engine with hangar-base:1 ({exc}); run scripts/setup.sh")
