"""The core loop's latency, as a person on GitHub sees it, with the local provider.

For N jobs (one at a time): seconds from the `/hangar` comment to the 👀 reaction, to the
status comment saying the agent runs, to the PR, to `hangar / verify` reported. Printed as
median and p90, beside the floor measured in the same run: the same agent script and
verify command run directly on the host, without hangar. Also the REST calls hangar made
per job, from fakehub's log.

Where the time to the PR and to verified goes (bench/timesplit.py): GitHub's required
waits (hangar spaces content-creating calls 1 s apart, as GitHub asks), GitHub answering,
the sandbox, the agent, and hangar's own work. The goal applies to hangar's own part:
at most 1 s to verified.

    .venv/bin/python bench/loop.py [--jobs 10]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.service import ServiceThread
from bench.timesplit import TimeSplit, line, summarize
from bench.world import REPO, hangar_on_fakehub
from fakehub.testing import running_fakehub
from tests.e2e.conftest import FIX_AGENT, REPO_FILES, VERIFY

STAGES = ("eyes", "running", "pr", "verified")


def floor(tmp: Path) -> float:
    """The agent script and verify command on the host: what no orchestration can beat."""
    repo = tmp / "floor"
    repo.mkdir()
    for name, text in REPO_FILES.items():
        (repo / name).write_text(text)
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@x",
           "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@x"}
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "."], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "init"], cwd=repo, check=True, env=env)
    started = time.perf_counter()
    subprocess.run(["bash", "-c", FIX_AGENT], cwd=repo, check=True, env=env,
                   capture_output=True)
    subprocess.run(["sh", "-c", VERIFY], cwd=repo, check=True, capture_output=True)
    elapsed = time.perf_counter() - started
    shutil.rmtree(repo)
    return elapsed


def one_job(hub, repo: str, n: int) -> dict[str, float]:
    issue = hub.create_issue(repo, f"bug {n}", "add() subtracts", as_user="mona")
    started = time.monotonic()
    comment = hub.comment(repo, issue, "/hangar fix the failing test", as_user="mona")
    seen: dict[str, float] = {}
    deadline = started + 120
    # Verified is the last stage: past it, a stage not seen was passed between two polls.
    while "verified" not in seen and time.monotonic() < deadline:
        now = time.monotonic() - started
        if "eyes" not in seen and any(r["content"] == "eyes"
                                      for r in hub.reactions(repo, comment)):
            seen["eyes"] = now
        if "running" not in seen and any("the agent is working" in c["body"]
                                         for c in hub.issue_comments(repo, issue)):
            seen["running"] = now
        prs = [p for p in hub.list_prs(repo) if p["head"]["ref"].startswith(f"hangar/{issue}-")]
        if prs:
            seen.setdefault("pr", now)
            checks = {c["name"]: c for c in hub.check_runs(repo, prs[0]["head"]["sha"])}
            verify = checks.get("hangar / verify")
            if verify and verify["status"] == "completed":
                seen.setdefault("verified", now)
        time.sleep(0.02)
    # An agent that finishes between two polls is never seen running: count it at the PR.
    seen.setdefault("running", seen.get("pr", float("nan")))
    seen["started"] = started
    return seen


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=10)
    args = parser.parse_args()
    split = TimeSplit.install()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        floors = [floor(tmp) for _ in range(3)]
        with running_fakehub(tmp / "fakehub") as hub:
            app, settings = hangar_on_fakehub(hub, tmp)
            with ServiceThread(settings):
                results = []
                calls_per_job = []
                for n in range(args.jobs):
                    hub.reset_api_calls()
                    results.append(one_job(hub, REPO, n))
                    time.sleep(1.5)  # let the last status edits land before counting
                    calls_per_job.append(hub.api_calls(app.id))
    floor_s = statistics.median(floors)
    print(f"jobs: {args.jobs}, local provider (bubblewrap), script agent; floor (agent + "
          f"verify on the host, no hangar): {floor_s:.2f} s")
    for stage in STAGES:
        values = sorted(r[stage] for r in results if stage in r)
        if not values:
            print(f"comment → {stage:9s}: never seen")
            continue
        p90 = values[min(len(values) - 1, int(0.9 * len(values)))]
        print(f"comment → {stage:9s}: median {statistics.median(values):6.2f} s  "
              f"p90 {p90:6.2f} s  ({statistics.median(values) / floor_s:5.1f}× the floor)")
    for stage in ("pr", "verified"):
        parts = summarize(split.parts(r["started"], r["started"] + r[stage])
                          for r in results if stage in r)
        print(f"  to {stage:8s} (median of each part): {line(parts)}")
    own = summarize(split.parts(r["started"], r["started"] + r["verified"])
                    for r in results if "verified" in r)["hangar"]
    print(f"hangar's own part to verified: {own:.2f} s (goal <= 1 s)")
    counts = [len(c) for c in calls_per_job]
    print(f"GitHub REST calls per job: median {statistics.median(counts):.0f} "
          f"(min {min(counts)}, max {max(counts)})")
    kinds = Counter(f"{m} {_shape(p)}" for calls in calls_per_job for m, p, _ in calls)
    for kind, count in kinds.most_common(12):
        print(f"  {count / len(calls_per_job):5.1f}  {kind}")


def _shape(path: str) -> str:
    import re

    path = path.split("?")[0]
    path = re.sub(r"/[0-9a-f]{40}", "/{sha}", path)
    return re.sub(r"/\d+", "/{n}", path)


if __name__ == "__main__":
    main()
