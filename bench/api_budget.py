"""hangar's GitHub API budget, against fakehub with GitHub's limits on.

Counted from fakehub's log of hangar's installation-token calls: those count against the
installation's hourly allowance ("Primary rate limit for GitHub App installations" in
GitHub's "Rate limits for the REST API"). fakehub charges as GitHub does: a 304 (an ETag
that still matched) costs nothing, a 404 is charged every time, and an ETag is specific
to the token that got it, so after each hourly token every URL's first read is charged.
The calls made with the App's JWT (minting tokens, hook deliveries) count against the
App's own allowance and are printed apart.

1. calls charged for one job, from the `/hangar` comment to the PR landed (a ruleset
   asking one approval; the approval is a person's review). Goal: ≤ 25.
2. calls charged per hour by one idle open hangar PR with a land request waiting for an
   approval (`/hangar land` was said; nobody approves). Measured in two windows at a fast
   poll: only slow-poll looks (each reads what it reads: charged once per token hour,
   then 304), and one with a full look (what it reads besides). Per hour at the default
   cadence: charged-per-poll x polls an hour + the slow look's URLs (once per token) +
   the full look's other URLs x full looks an hour. Goal: ≤ 2.
3. 50 such PRs in one installation against the 5,000-an-hour allowance.

    .venv/bin/python bench/api_budget.py [--window 40]
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.service import ServiceThread
from app.settings import Settings
from bench.world import REPO, hangar_on_fakehub
from fakehub.testing import running_fakehub
from tests.conftest import hangar_permissions
from tests.e2e.conftest import REPO_FILES

FAST_POLL_S = 2.0
ALLOWANCE = 5000


def wait(what: str, predicate, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise SystemExit(f"timed out waiting for {what}")


def charged(calls: list[tuple[str, str, int]]) -> list[tuple[str, str, int]]:
    return [c for c in calls if c[2] != 304]


def shape(method: str, path: str) -> str:
    path = re.sub(r"/[0-9a-f]{40}", "/{sha}", path.split("?")[0])
    return f"{method} " + re.sub(r"/\d+", "/{n}", path)


def verified_pr(hub, issue: int) -> dict:
    def found():
        for pr in hub.list_prs(REPO):
            if pr["head"]["ref"].startswith(f"hangar/{issue}-"):
                checks = {c["name"]: c for c in hub.check_runs(REPO, pr["head"]["sha"])}
                verify = checks.get("hangar / verify")
                if verify and verify["status"] == "completed":
                    return hub.get_pr(REPO, pr["number"])
        return None

    try:
        return wait("a verified PR", found, timeout=180)
    except SystemExit:
        for comment in hub.issue_comments(REPO, issue):
            print(comment["body"][:1500], file=sys.stderr)
        raise


def status_says(hub, number: int, words: str) -> bool:
    return any(words in c["body"] for c in hub.issue_comments(REPO, number)
               if "<!-- hangar:status" in c["body"])


def landed(hub, issue: int, number: int) -> bool:
    """Merged, and both status comments (the issue's and the PR's) say so: their last
    edits are part of the job."""
    return hub.get_pr(REPO, number)["merged"] and all(
        status_says(hub, n, "landed by hangar as") for n in (issue, number))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--window", type=float, default=40.0,
                        help="seconds of idle time counted (at a 2 s poll)")
    parser.add_argument("--trace", action="store_true",
                        help="also print the job's calls in the order they were made")
    args = parser.parse_args()
    production = Settings.model_fields["poll_interval_seconds"].default
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        with running_fakehub(tmp / "fakehub") as hub:
            app, settings = hangar_on_fakehub(hub, tmp, writers=("mona", "rita"),
                                              permissions=hangar_permissions())
            hub.protect(REPO, checks=())
            with ServiceThread(settings):  # the default slow poll: events drive the job
                # 1. one job, comment → landed
                hub.reset_api_calls()
                issue = hub.create_issue(REPO, "add() is wrong", "It subtracts.", as_user="mona")
                hub.comment(REPO, issue, "/hangar fix the failing test", as_user="mona")
                pr = verified_pr(hub, issue)
                # A person reviews later than hangar's folded status edits: both status
                # comments show the verification first, as they would.
                wait("the status comments to show the verification", lambda: all(
                    status_says(hub, n, "passed") for n in (issue, pr["number"])), 60)
                # ... and not within seconds: past the status comments' edit interval,
                # so the landing's edits are not folded into the verification's.
                time.sleep(settings.status_edit_interval_seconds + 1)
                to_verified = hub.api_calls(app.id, charged_to="installation")
                hub.review(REPO, pr["number"], as_user="rita", event="APPROVE",
                           commit_id=pr["head"]["sha"])
                wait("the PR to land", lambda: landed(hub, issue, pr["number"]))
                time.sleep(3)  # the last edits land before counting
                job_calls = hub.api_calls(app.id, charged_to="installation")
                job_app_calls = hub.api_calls(app.id, charged_to="app")
                job_trace = hub.api_calls(app.id)
            # 2. one idle open PR whose land request waits for an approval
            hub.push_files(REPO, "main", {"calc.py": REPO_FILES["calc.py"]}, "regress",
                           as_user="acme", bypass_rules=True)
            with ServiceThread(settings):
                issue = hub.create_issue(REPO, "add() again", "It subtracts.", as_user="mona")
                hub.comment(REPO, issue, "/hangar fix the failing test", as_user="mona")
                idle_pr = verified_pr(hub, issue)
                hub.comment(REPO, idle_pr["number"], "/hangar land", as_user="mona")
                wait("the land request to wait for an approval", lambda: status_says(
                    hub, idle_pr["number"], "waiting for 1 approval(s)"), 60)
                time.sleep(settings.status_edit_interval_seconds + 2)  # the last edits
            quiet = settings.model_copy(update={"poll_interval_seconds": FAST_POLL_S,
                                                "idle_pr_look_seconds": 10**6})
            def looked() -> bool:
                return any(p.endswith("/reviews") or "/reviews?" in p for _, p, _ in
                           hub.api_calls(app.id, charged_to="installation"))

            hub.reset_api_calls()
            with ServiceThread(quiet):  # only the slow poll's looks
                # The first look comes when the last process's next one was due.
                wait("the first slow-poll look", looked, 2 * production)
                first_look = hub.api_calls(app.id, charged_to="installation")
                hub.reset_api_calls()
                time.sleep(args.window)
                quiet_calls = hub.api_calls(app.id, charged_to="installation")
            full = settings.model_copy(update={"poll_interval_seconds": FAST_POLL_S,
                                               "idle_pr_look_seconds": args.window / 2})
            hub.reset_api_calls()
            with ServiceThread(full):  # ... and full looks
                wait("the first look", looked, 2 * production)
                time.sleep(args.window)
                full_calls = hub.api_calls(app.id, charged_to="installation")
    polls = args.window / FAST_POLL_S
    polls_an_hour = 3600 / production
    full_every = Settings.model_fields["idle_pr_look_seconds"].default
    job = len(charged(job_calls))
    print(f"default poll interval {production:g} s, a full look every {full_every / 3600:g} h;"
          f" idle windows of {args.window:g} s at a {FAST_POLL_S:g} s poll")
    print(f"1. one job, comment → landed: {job} calls charged "
          f"({len(job_calls) - job} more answered 304); goal ≤ 25")
    print(f"   of which comment → verified PR: {len(charged(to_verified))} charged")
    for kind, count in Counter(shape(m, p) for m, p, _ in charged(job_calls)).most_common():
        print(f"     {count:3d}  {kind}")
    print(f"   and {len(job_app_calls)} made with the App's JWT, charged to the App's own "
          "allowance, not the installation's:")
    for kind, count in Counter(shape(m, p) for m, p, _ in job_app_calls).most_common():
        print(f"     {count:3d}  {kind}")
    if args.trace:
        print("   the job's calls in order:")
        for method, path, status in job_trace:
            print(f"     {status}  {method} {path}")
    # A new process, a new token: each URL's first read in a window is charged (GitHub's
    # ETags are the token's); after it, what a look costs at every poll.
    quiet_urls = {(m, p) for m, p, _ in [*first_look, *quiet_calls]}
    steady = charged(quiet_calls)  # after the first look: what each later one is charged
    steady_per_poll = len(steady) / polls
    full_urls = {(m, p) for m, p, _ in full_calls} - quiet_urls
    idle_hour = (steady_per_poll * polls_an_hour + len(quiet_urls)
                 + len(full_urls) * 3600 / full_every)
    print(f"2. one idle PR with a land request waiting for an approval: {idle_hour:.2f} calls "
          "charged per hour; goal ≤ 2")
    print(f"     {steady_per_poll:.2f} charged per slow-poll look after the first "
          f"({len(quiet_calls) - len(steady)} of {len(quiet_calls)} calls in the window "
          f"answered 304; the first look: {len(charged(first_look))} charged)")
    print(f"     {len(quiet_urls)} URL(s) a slow-poll look reads, charged once per token "
          "hour: " + ", ".join(sorted(shape(m, p) for m, p in quiet_urls)))
    print(f"     {len(full_urls)} more a full look reads, once per {full_every / 3600:g} h: "
          + ", ".join(sorted(shape(m, p) for m, p in full_urls)))
    fifty = 50 * idle_hour
    print(f"3. 50 idle PRs waiting in one installation: {fifty:.0f} calls an hour = "
          f"{fifty / ALLOWANCE:.1%} of {ALLOWANCE:,}")


if __name__ == "__main__":
    main()
