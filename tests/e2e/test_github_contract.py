"""Every REST call hangar makes exists in GitHub's official description, with a request
body that validates against it.

One flow drives hangar through what it does on GitHub — a job, a PR, verification, a
follow-up turn, a failed verification with its buttons, `/hangar try 2` with ranking and
pick, landing — while fakehub records each exchange. The fields hangar *reads* from the
responses are checked by fakehub's own contract tests against the same description.
"""

from __future__ import annotations

import pytest

from fakehub.server import API_PREFIX
from tests.e2e.conftest import wait_until
from tests.github_reference import OPENAPI, check_exchange, find_operation, openapi

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not OPENAPI.exists(), reason="tests/reference is not installed"),
]

AGENT = """\
set -e
case "$(git rev-parse --abbrev-ref HEAD)" in
  *-1) printf 'def add(a, b):\\n    return a * b\\n' > calc.py ;;
  *) sed -i 's/return a - b/return a + b/' calc.py ;;
esac
echo "$(git rev-parse --abbrev-ref HEAD) turn $HANGAR_TURN" >> NOTES.md
git add -A && git commit -qm "turn $HANGAR_TURN"
echo "done"
"""


def test_hangars_rest_calls_are_described_by_github(world):
    world.hub.record_exchanges(True)
    world.start_hangar(AGENT)
    # One job, verified; a follow-up turn; then landing.
    issue, _ = world.ask("/hangar fix the failing test")
    pr = wait_until(lambda: world.verified(issue), 60, "a verified PR")
    world.hub.comment(world.repo, pr["number"], "/hangar also note it in the README",
                      as_user=world.maintainer)
    wait_until(lambda: world.hub.get_pr(world.repo, pr["number"])["head"]["sha"]
               != pr["head"]["sha"] and world.verified(issue), 60, "the follow-up")
    wait_until(lambda: any("follow-up turn 1" in line and "✅ done" in line
                           for line in world.status(issue).splitlines()), 60, "the turn's end")
    head = world.hub.get_pr(world.repo, pr["number"])["head"]["sha"]
    world.hub.review(world.repo, pr["number"], as_user=world.reviewer, event="APPROVE",
                     commit_id=head)
    wait_until(lambda: world.hub.get_pr(world.repo, pr["number"])["merged"], 60, "landing")
    # Two attempts, one failing verification; ranked; one picked.
    issue2, _ = world.ask("/hangar try 2 fix it again", title="again")
    wait_until(lambda: "**Ranking**" in world.status(issue2), 90, "the ranking")
    # This flow makes more than the 80 writes a minute GitHub allows an installation:
    # from here on hangar may wait for the minute to free up rather than be refused.
    world.hub.comment(world.repo, issue2, "/hangar pick 2", as_user=world.maintainer)
    wait_until(lambda: "✅ picked" in world.status(issue2), 90, "the pick")
    world.hub.comment(world.repo, issue2, "/hangar help", as_user=world.maintainer)
    wait_until(lambda: world.replies(issue2), 90, "the help reply")

    spec = openapi()
    exchanges = [e for e in world.hub.exchanges() if e["route"]]
    called = {(e["method"], e["route"].removeprefix(API_PREFIX)) for e in exchanges}
    # The flow really exercised hangar's calls, creating and updating on GitHub.
    for expected in [("POST", "/repos/{owner}/{repo}/pulls"),
                     ("PUT", "/repos/{owner}/{repo}/pulls/{pull_number}/merge"),
                     ("POST", "/repos/{owner}/{repo}/check-runs"),
                     ("POST", "/app/installations/{installation_id}/access_tokens")]:
        assert any(m == expected[0] and find_operation(spec, r, m)
                   and find_operation(spec, r, m)[0] == expected[1] for m, r in called), expected
    # The bodies hangar sent were recorded, so they are validated below.
    assert all(e["request"] for e in exchanges
               if e["method"] in ("POST", "PATCH") and "/pulls" in e["path"])
    problems = []
    for exchange in exchanges:
        problems += check_exchange(spec, exchange["route"].removeprefix(API_PREFIX), exchange)
    assert problems == [], "\n".join(problems[:40])
