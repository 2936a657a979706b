"""hangar's memory per run stays bounded whatever the agent leaves: millions of lines of
output, a 256 MiB sparse log, a many-file change and a 1 MiB commit message. The probe
(bench/sandbox_memory.py) runs in a fresh interpreter and reports its peak RSS growth;
the bench runs the same with 100,000 files and prints it beside a benign run."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from sandbox_helpers import docker_reason

BENCH = Path(__file__).resolve().parents[2] / "bench" / "sandbox_memory.py"
# Each case fills a sandbox and measures a fresh interpreter: 25-35 s apiece.
pytestmark = pytest.mark.slow


def _bench():
    spec = importlib.util.spec_from_file_location("sandbox_memory_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", [
    pytest.param("local", marks=pytest.mark.bwrap),
    pytest.param("docker", marks=pytest.mark.docker),
])
def test_a_hostile_runs_leftovers_cost_hangar_at_most_50_mib(name):
    if name == "docker" and docker_reason():
        pytest.skip(docker_reason())
    bench = _bench()
    result = bench.measure(name, "hostile", 10_000)
    assert result["growth_mib"] <= bench.GOAL_MIB, result
    assert result["log_bytes_read"] == 1024 * 1024  # the tail of a 256 MiB log
