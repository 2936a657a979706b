"""`/metrics` has what an operator alerts on — agents per credential, jobs, how turns
ended, verifications, land requests and land latency — read from hangar's own rows after
a whole loop, in Prometheus' text format."""

from __future__ import annotations

import re
import urllib.request

from tests.e2e.conftest import wait_until
from tests.e2e.test_landing import approve, landed, protect, verified_pr

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_]\w*="(?:[^"\\]|\\.)*",?)*\})? '
                    r'(-?[0-9.e+-]+|\+Inf|NaN)$')


def exposition(text: str) -> dict[str, float]:
    """Every sample, checked line by line against the text format: each family declared
    by HELP and TYPE before its samples."""
    declared: set[str] = set()
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            declared.add(line.split()[2])
            continue
        found = SAMPLE.match(line)
        assert found, f"not a sample line: {line!r}"
        family = re.sub(r"_(bucket|sum|count)$", "", found[1])
        assert found[1] in declared or family in declared, line
        samples[found[1] + (found[2] or "")] = float(found[3])
    return samples


def test_metrics_count_the_loop_from_ask_to_landed(world):
    protect(world, checks=())
    world.start_hangar()
    issue, _ = world.ask("/hangar fix the failing test")
    pr = verified_pr(world, issue)
    approve(world, pr["number"])
    wait_until(lambda: landed(world, pr["number"]), 90, "the PR to land")

    with urllib.request.urlopen(f"{world.hangar.url}/metrics", timeout=10) as answer:
        samples = exposition(answer.read().decode())
    jobs = {k: v for k, v in samples.items() if k.startswith("hangar_jobs{")}
    assert sum(jobs.values()) == 1 and 'hangar_jobs{state="failed"}' not in jobs, jobs
    assert samples['hangar_turn_endings{code="changes"}'] == 1
    assert samples['hangar_verifications{result="passed"}'] == 1
    assert samples['hangar_land_requests{state="landed"}'] == 1
    assert samples["hangar_land_seconds_count"] == 1 and samples["hangar_land_seconds_sum"] > 0
    [(running, queued, slots)] = [
        (value, samples[key.replace("running", "queued")],
         samples[key.replace("hangar_agents", "hangar_agent_slots")
                 .replace(',state="running"', "")])
        for key, value in samples.items()
        if key.startswith("hangar_agents{") and 'state="running"' in key]
    assert (running, queued, slots) == (0, 0, world.settings.max_concurrent_agents)
