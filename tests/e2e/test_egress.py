"""Egress end to end: an agent in a sandbox reaches an allowed host through hangar's
proxy, is refused a host outside the allowlist, and the refusals are shown to people in
the status comment and the `hangar / agent` check run; the verify sandbox's in the
`hangar / verify` check run."""

from __future__ import annotations

import secrets
import subprocess

import pytest

from tests.e2e.conftest import wait_until
from tests.loopback_origin import loopback_origin

pytestmark = pytest.mark.slow

# Three tries at a host outside the allowlist (refused: the agent goes on), one fetch from
# the allowed registry, then the usual fix.
AGENT = """\
set -e
for i in 1 2 3; do
  python3 -c 'import urllib.request; urllib.request.urlopen("https://example.org/", timeout=10)' \\
    2>/dev/null || echo "example.org was refused"
done
python3 -c 'import sys, urllib.request as u
print(u.urlopen(sys.argv[1], timeout=10).read().decode())' \\
  "http://registry.test:{port}/simple/calc-helpers/" > fetched.txt
sed -i 's/return a - b/return a + b/' calc.py
git add -A
git commit -qm "Fix add()"
echo "fetched: $(cat fetched.txt)"
"""


@pytest.fixture
def registry():
    """A package index on loopback, which the operator's environment pins registry.test to."""
    with loopback_origin() as port:
        yield port


@pytest.mark.parametrize("provider", [
    pytest.param("local", marks=pytest.mark.bwrap),
    pytest.param("docker", marks=pytest.mark.docker),
])
def test_refused_hosts_are_shown_and_allowed_ones_work(world, registry, provider, request):
    if provider == "docker":
        request.getfixturevalue("docker_engine")
    # The verify step fetches from the registry too (as an install would): the clean
    # sandbox gets the proxy as well. It tries a host outside the allowlist once, which is
    # shown with verify, apart from the agent's refusals.
    verify = ("python3 -c 'import urllib.request as u; u.urlopen(\"https://example.net/\","
              " timeout=10)' 2>/dev/null; "
              "python3 -c 'import urllib.request as u; u.urlopen(\"http://registry.test:"
              f"{registry}/verify\", timeout=10)' && python3 -m unittest -q")
    world.start_hangar(AGENT.format(port=registry), provider=provider, verify=verify,
                       env={"egress": {"allow": [f"registry.test:{registry}", "pypi.org"],
                                       "hosts": {"registry.test": "127.0.0.1"}}})
    issue, _ = world.ask("/hangar fix add()")
    pr = wait_until(lambda: world.verified(issue), 120, "a verified PR")
    checks = world.checks(pr["head"]["sha"])
    assert checks["hangar / verify"]["conclusion"] == "success", checks["hangar / verify"]
    agent = checks["hangar / agent"]
    assert agent["conclusion"] == "success"
    words = "blocked: `example.org:443`, 3 times"
    assert words in agent["output"]["summary"], agent["output"]
    # The allowed registry answered through hangar's proxy.
    assert "fetched: origin /simple/calc-helpers/" in agent["output"]["text"]
    assert "example.net" not in agent["output"]["summary"]
    verified = checks["hangar / verify"]["output"]["summary"]
    assert "blocked: `example.net:443`, 1 time " in verified, verified
    assert "example.org" not in verified
    status = wait_until(lambda: "During verification" in world.status(issue)
                        and world.status(issue), 30,
                        "the status comment to list the refusals")
    blocked = [line for line in status.splitlines() if "blocked:" in line]
    assert "docs/egress.md" in blocked[0] and "example.org" in blocked[0], blocked
    assert "During verification" in blocked[1] and "example.net" in blocked[1], blocked
    assert not any("registry.test" in line for line in blocked)  # allowed is no refusal


@pytest.mark.bwrap
def test_refusals_are_shown_while_the_agent_still_runs(world):
    """As the refused host is tried, not only when the agent stops: the status comment
    lists it (without counts, which would edit the comment at every try)."""
    # The agent sleeps only after both tries were refused: its sleep (this test's own,
    # whoever else runs the suite) is the sign that both were counted.
    asleep = f"sleep 3023.{secrets.randbelow(10**6):06d}"
    agent = ("for i in 1 2; do python3 -c 'import urllib.request as u; "
             "u.urlopen(\"https://example.org/\", timeout=10)' 2>/dev/null; done\n"
             f"exec {asleep}\n")
    world.start_hangar(agent, verify=None, env={"egress": {"allow": ["pypi.org"]}})
    issue, _ = world.ask("/hangar fix add()")
    status = wait_until(lambda: "blocked so far" in world.status(issue)
                        and world.status(issue), 30, "the refusal shown while the agent runs")
    assert "the agent is working" in status.split("**Now:**")[1].splitlines()[0], status
    line = next(line for line in status.splitlines() if "blocked so far" in line)
    assert "`example.org:443` (outside this environment's egress allowlist" in line, line
    assert "time" not in line  # counts come when the agent stops
    wait_until(lambda: subprocess.run(["pgrep", "-f", asleep], capture_output=True).stdout,
               30, "the agent's second try refused, and its sleep")
    world.hub.comment(world.repo, issue, "/hangar cancel", as_user=world.maintainer)
    status = wait_until(lambda: "cancelled" in world.status(issue) and world.status(issue),
                        30, "cancelled")
    assert "blocked so far" not in status
    assert "blocked: `example.org:443`, 2 times" in status, status


@pytest.mark.bwrap
def test_an_environment_build_installs_through_the_proxy(world, registry):
    """install (a package download, here from the pinned registry) runs with the proxy:
    the next agent starts from a build that has what it fetched. What install was refused
    is kept on the build and shown by `hangar env build-show` (and the API's build view,
    which is the same record)."""
    from app.envbuilds.rows import build_details
    from tests.e2e.test_environment_builds import _finished

    world.hub.push_files(world.repo, "main", {".gitignore": ".deps/\n"}, "Ignore .deps",
                         as_user=world.maintainer, bypass_rules=True)
    install = ("python3 -c 'import urllib.request as u; u.urlopen(\"https://example.net/\","
               " timeout=10)' 2>/dev/null; "
               "mkdir -p .deps && python3 -c 'import urllib.request as u; print(u.urlopen("
               f"\"http://registry.test:{registry}/wheel\", timeout=10).read().decode())'"
               " > .deps/fetched.txt")
    agent = ('{ cat .deps/fetched.txt 2>/dev/null || echo "nothing installed"; } > SEEN.md\n'
             'git add SEEN.md && git commit -qm "What install left"\n')
    world.start_hangar(agent, verify=None, env={
        "install": install, "egress": {"allow": [f"registry.test:{registry}"],
                                       "hosts": {"registry.test": "127.0.0.1"}}})
    world.ask("/hangar look")  # starts bare and queues the build
    build = _finished(world, 1)[-1]
    assert build.state.value == "succeeded", build
    assert [(b["host"], b["port"], b["count"]) for b in build.egress_blocked] == [
        ("example.net", 443, 1)], build.egress_blocked
    shown = build_details(build)
    assert "egress:      🚫 blocked: `example.net:443`, 1 time " in shown, shown
    issue, _ = world.ask("/hangar look again")
    pr = wait_until(lambda: world.pr_for(issue), 60, "the second agent's PR")
    assert world.hub.read_file(world.repo, "SEEN.md", pr["head"]["sha"]) == b"origin /wheel\n"
