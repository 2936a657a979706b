"""Two `hangar serve` replicas on one PostgreSQL, end to end through fakehub.

Webhooks reach a balancer that sends each delivery to either replica at random (to the
other when the one it picked does not answer, as a load balancer's health check would).
Replicas are killed with kill -9: while an agent runs, while it holds the leader lock,
and while a merge is in flight. Every job lands, and nothing is done twice: one PR per
issue, one status comment per thread, one check run of each name per head, one merge per
PR.
"""

from __future__ import annotations

import asyncio
import random
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from tests.e2e.conftest import HangarProcess, free_port, wait_until

pytestmark = pytest.mark.slow

LEASE_S = 3.0
# Each job writes a file of its own: landed PRs never conflict, and the agent's sleep
# marks it as running (the marker names the issue).
AGENT = """\
set -e
n=$(printf '%s' "$HANGAR_PROMPT" | tr -cd 0-9)
sleep 1.{marker}$n
printf 'note %s\\n' "$n" > "note-$n.txt"
git add "note-$n.txt"
git commit -qm "Add note $n"
echo "wrote note-$n.txt"
"""


class Balancer:
    """One webhook URL in front of the replicas, on its own thread: each delivery goes to
    a replica picked at random, or to the next when that one does not answer."""

    def __init__(self, urls: list[str]):
        self.urls = urls
        self.port = free_port()
        self.sent: Counter[str] = Counter()
        self.refusing = False  # answer 503 to every delivery (the balancer itself is down)
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        assert self._ready.wait(30)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/webhook"

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application(client_max_size=30 * 2**20)
        app.router.add_post("/webhook", self._forward)
        runner = web.AppRunner(app)
        self._loop.run_until_complete(runner.setup())
        self._loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", self.port).start())
        self._ready.set()
        self._loop.run_forever()
        # Stopped: close the listener and the connections still open before the loop.
        self._loop.run_until_complete(runner.cleanup())
        self._loop.close()

    async def _forward(self, request: web.Request) -> web.Response:
        if self.refusing:
            return web.Response(status=503, text="no replica")
        body = await request.read()
        headers = {k: v for k, v in request.headers.items()
                   if k.lower() not in ("host", "content-length")}
        order = random.sample(self.urls, len(self.urls))
        async with aiohttp.ClientSession() as session:
            for url in order:
                try:
                    async with session.post(f"{url}/webhook", data=body, headers=headers,
                                            timeout=aiohttp.ClientTimeout(total=10)) as answer:
                        text = await answer.read()
                        self.sent[url] += 1
                        return web.Response(status=answer.status, body=text)
                except aiohttp.ClientConnectionError:
                    continue
        return web.Response(status=502, text="no replica answered")

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@pytest.fixture
def cluster(world, postgres_url):
    """Replicas a and b of hangar on one database, behind a balancer: (world, replicas,
    balancer). Replica a starts first, so it takes the leader lock."""
    world.database = postgres_url
    # Eleven jobs make more content-creating calls than GitHub's 80 a minute: the replicas
    # would spend most of the test waiting for the minute to pass, which checks nothing
    # here (the budget shared by replicas: tests/app/test_github_shared_budget.py).
    writes = world.raise_write_limit()
    started: dict[str, HangarProcess] = {}

    def start(agent: str, **settings) -> tuple[dict[str, HangarProcess], Balancer]:
        a = world.start_hangar(agent, process=True, verify="ls note-*.txt", settings={
            "replica_id": "a", "lease_seconds": LEASE_S,
            **writes, **settings})
        wait_until(lambda: "does the chores" in log_of(world, "a"), 30, "a to lead")
        b_settings = world.settings.model_copy(update={
            "replica_id": "b", "port": free_port(), "data_dir": world.tmp / "hangar-b"})
        b = HangarProcess(b_settings, world.tmp / "hangar-b.log").start()
        world.running.append(b)
        started.update(a=a, b=b)
        balancer = Balancer([a.url, b.url])
        world.hub.set_webhook_url(world.app.id, balancer.url)
        balancers.append(balancer)
        return started, balancer

    balancers: list[Balancer] = []
    yield world, start
    for balancer in balancers:
        balancer.stop()
    for replica in world.running:  # before their database is dropped, not after
        replica.stop()


def log_of(world, name: str) -> str:
    path = world.tmp / ("hangar.log" if name == "a" else f"hangar-{name}.log")
    return path.read_text(errors="replace") if path.exists() else ""


def approve(world, number: int) -> None:
    pr = world.hub.get_pr(world.repo, number)
    world.hub.review(world.repo, number, as_user=world.reviewer, event="APPROVE",
                     commit_id=pr["head"]["sha"])


def approved_head(world, number: int) -> str | None:
    reviews = world.hub.reviews(world.repo, number)
    approved = [r["commit_id"] for r in reviews if r["state"].upper() == "APPROVED"]
    return approved[-1] if approved else None


def land_in_turn(world, issues: list[int], timeout: float) -> None:
    """Approve each PR once verified on its current head, one PR at a time (an update of
    a branch lapses its approval, as on GitHub), until every one has merged."""
    deadline = time.monotonic() + timeout
    for issue in issues:
        while True:
            assert time.monotonic() < deadline, f"#{issue} did not land in time"
            pr = world.verified(issue)
            if pr and pr["merged"]:
                break
            if pr and pr["state"] == "open" and approved_head(world, pr["number"]) != pr[
                    "head"]["sha"]:
                check = world.checks(pr["head"]["sha"]).get("hangar / verify")
                if check and check["conclusion"] == "success":
                    approve(world, pr["number"])
            time.sleep(0.3)


def assert_nothing_twice(world, issues: list[int], merge_calls: int | None = None) -> None:
    """One PR per issue, merged; one status comment per thread; one merge call per PR
    (`merge_calls`: counted by the test, when a merge's answer never came back); one
    check run of each name per head."""
    prs = world.hangar_prs()
    assert len(prs) == len(issues), [p["head"]["ref"] for p in prs]
    for issue in issues:
        pr = world.pr_for(issue)
        assert pr is not None and pr["merged"], issue
        assert len(world.status_comments(issue)) == 1, issue
        assert len(world.status_comments(pr["number"])) <= 1, pr["number"]
        merges = [status for method, path, status in world.hub.api_calls(world.app.id)
                  if method == "PUT" and path.endswith(f"/pulls/{pr['number']}/merge")]
        calls = len(merges) if merge_calls is None else merge_calls
        assert calls == 1, (pr["number"], merges)
    # Every check run hangar made, on every head any PR had: one of each name per head
    # and run (each job's agent check starts on the same base commit).
    made = Counter((run.head_sha, run.name, run.external_id)
                   for run in list(world.hub.hub.store.check_runs.values())
                   if run.app_id == world.app.id)
    twice = {key: n for key, n in made.items() if n > 1}
    assert not twice, twice


def agent_pids(marker: str) -> list[int]:
    found = subprocess.run(["pgrep", "-f", f"sleep 1.{marker}"], capture_output=True,
                           text=True)
    return [int(p) for p in found.stdout.split()]


def sandboxes_of(data_dir: Path) -> list[Path]:
    root = data_dir / "sandboxes"
    return [p for p in root.iterdir() if p.is_dir()] if root.is_dir() else []


def test_ten_jobs_land_once_with_deliveries_at_either_replica_and_the_leader_killed(cluster):
    world, start = cluster
    marker = "4242"
    replicas, balancer = start(AGENT.replace("{marker}", marker),
                               redelivery_interval_seconds=2)
    issues = [world.ask(f"/hangar write note {n}", title=f"note {n}")[0] for n in range(1, 11)]
    # Kill the leader, a, while an agent of its own runs.
    a = replicas["a"]
    wait_until(lambda: sandboxes_of(a.settings.data_dir) and agent_pids(marker), 120,
               "an agent running in a's sandbox")
    a.kill9()
    killed_at = time.monotonic()
    wait_until(lambda: "this replica does the chores" in log_of(world, "b"), 30,
               "b to take the leader lock")
    assert time.monotonic() - killed_at < 10
    # b's chores run: a delivery that failed while no one took it is asked for again.
    balancer.refusing = True
    late, _ = world.ask("/hangar write note 11", title="note 11")
    world.hub.settle()
    balancer.refusing = False
    issues.append(late)
    # The job is there (its status comment) once b's catch-up asked for the delivery again.
    # Its PR may wait: the agent slots a's killed agents hold stay taken until a is back.
    wait_until(lambda: world.status(late), 120, "the missed comment's job, by b's catch-up")
    # a comes back (its pod restarts): the runs whose sandboxes live on it go on there.
    a.start()
    land_in_turn(world, issues, timeout=600)
    assert balancer.sent[a.url] > 0 and balancer.sent[replicas["b"].url] > 0
    assert_nothing_twice(world, issues)


def test_a_replica_killed_while_its_merge_is_in_flight(cluster):
    world, start = cluster
    replicas, _ = start(AGENT.replace("{marker}", "4343"))
    issue, _ = world.ask("/hangar write note 1", title="note 1")
    pr = wait_until(lambda: world.verified(issue), 120, "a verified PR")
    # GitHub merges, then its answer takes 60 s: the replica dies before it comes. Every
    # merge call is held so (the fault counts them): a second one would be seen.
    held = world.hub.inject_fault("PUT", r"/pulls/\d+/merge$", status=502, after=True,
                                  hang_seconds=60, times=None)
    approve(world, pr["number"])
    wait_until(lambda: world.hub.get_pr(world.repo, pr["number"])["merged"], 60, "the merge")
    from app.store import Store

    store = Store(world.database)
    try:
        with store.db.connect() as db:
            owner = db.execute("SELECT lease_owner FROM rows WHERE kind = 'land'").fetchone()[0]
    finally:
        store.close()
    assert owner in ("a", "b")
    killed = replicas[owner]
    killed.kill9()
    # The other replica takes the land request once the lease is over, sees the PR merged,
    # and says so: it does not merge again.
    wait_until(lambda: "landed by hangar as" in world.status(issue), 60,
               "the landing said by the other")
    assert_nothing_twice(world, [issue], merge_calls=held.fired)
