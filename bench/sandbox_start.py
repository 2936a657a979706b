"""How much a sandbox costs: create → run `git --version` → destroy, per provider.

Prints median and p90 over N rounds (default 20) beside the same command run directly
on the host (the floor), as a ratio, and each beside its goal. "local + relay" runs the
command with the relay a networked sandbox starts in front of it (network: loopback
with a push proxy); "docker engine" is the engine's own floor: create, start and remove
a container that runs the command, with nothing of hangar's.

The local rows are hangar's local provider as it serves, its bubblewraps started ahead
(sandbox/providers/_warm.py); the "cold" rows start each one when its command comes.
Each round times every local row in turn, the host first, `--gap` apart (sandboxes are
made as jobs come, not back to back, and a spare is made in between).

    .venv/bin/python bench/sandbox_start.py [--rounds 20] [--providers local,docker]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sandbox.envspec import EnvSpec
from sandbox.providers import get_provider

COMMAND = ["git", "--version"]
# The goals of issue 33: local within 3x the host, docker within 400 ms.
LOCAL_GOAL_X = 3.0
DOCKER_GOAL_S = 0.400


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def p90(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]


async def host_round() -> float:
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *COMMAND, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await proc.communicate()
    assert proc.returncode == 0 and out.startswith(b"git version"), out
    return time.perf_counter() - started


async def sandbox_round(provider, spec: EnvSpec) -> float:
    started = time.perf_counter()
    sb = await provider.create(spec, {"hangar.bench": "1"})
    try:
        result = await provider.run(sb, COMMAND, timeout=60)
        assert result.exit_code == 0 and result.output.startswith("git version"), result
    finally:
        await provider.destroy(sb)
    return time.perf_counter() - started


def engine_round(client) -> float:
    """create + start + wait + remove of a container running COMMAND: the engine's floor."""
    api = client.api
    started = time.perf_counter()
    container = api.create_container("hangar-base:1", command=COMMAND,
                                     host_config=api.create_host_config(network_mode="none"))
    try:
        api.start(container["Id"])
        assert api.wait(container["Id"])["StatusCode"] == 0
    finally:
        api.remove_container(container["Id"], force=True)
    return time.perf_counter() - started


def docker_ready() -> str | None:
    if not shutil.which("docker"):
        return "no docker CLI"
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        return "no Docker engine answers"
    if subprocess.run(
        ["docker", "image", "inspect", "hangar-base:1"], capture_output=True
    ).returncode:
        return "hangar-base:1 missing (scripts/base-image.sh)"
    return None


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--providers", default="local,docker")
    parser.add_argument("--gap", type=float, default=0.05,
                        help="seconds between two local rounds (default 0.05)")
    args = parser.parse_args()

    samples_of: dict[str, list[float]] = {"host (floor)": []}
    goals: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="hangar-bench-") as tmp:
        local = []
        if "local" in args.providers.split(","):
            # A port nothing listens on: the relay starts, the command does not use it.
            port = free_port()
            local = [
                ("local", get_provider("local", root=Path(tmp) / "l", warm=True)),
                ("local + relay", get_provider("local", root=Path(tmp) / "lr", warm=True,
                                               proxy_port=port)),
                ("local, cold", get_provider("local", root=Path(tmp) / "c")),
                ("local + relay, cold", get_provider("local", root=Path(tmp) / "cr",
                                                     proxy_port=port)),
            ]  # fmt: skip
            goals["local"] = goals["local + relay"] = f"<= {LOCAL_GOAL_X:.0f}x"
        spec = EnvSpec(name="bench", provider="local", network="loopback")
        for _, provider in local:  # warm-up: page cache, the first spare
            await sandbox_round(provider, spec)
        await asyncio.sleep(args.gap)
        for _ in range(args.rounds):
            samples_of["host (floor)"].append(await host_round())
            for label, provider in local:
                await asyncio.sleep(args.gap)
                samples_of.setdefault(label, []).append(await sandbox_round(provider, spec))
            await asyncio.sleep(args.gap)
        for _, provider in local:
            await provider.close()
        floor_median = statistics.median(samples_of["host (floor)"])
        rows = [(label, statistics.median(s), p90(s)) for label, s in samples_of.items()]
        for name in args.providers.split(","):
            if name == "local":
                continue
            if name == "docker":
                reason = docker_ready()
                if reason:
                    print(f"docker: skipped ({reason})")
                    continue
                provider = get_provider("docker", instance="bench")
                engine_round(provider.client)  # warm-up
                samples = [engine_round(provider.client) for _ in range(args.rounds)]
                rows.append(("docker engine", statistics.median(samples), p90(samples)))
                providers = [("docker", provider)]
                spec = EnvSpec(name="bench", provider="docker", image="hangar-base:1",
                               network="none")  # fmt: skip
                goals["docker"] = f"<= {DOCKER_GOAL_S * 1000:.0f}ms"
            else:
                print(f"{name}: not benchmarked here (no cluster)")
                continue
            for label, provider in providers:
                await sandbox_round(provider, spec)  # warm-up: page cache, image layers
                samples = [await sandbox_round(provider, spec) for _ in range(args.rounds)]
                rows.append((label, statistics.median(samples), p90(samples)))

    print(f"create -> {' '.join(COMMAND)} -> destroy, {args.rounds} rounds")
    print(f"{'':20} {'median':>10} {'p90':>10} {'median / floor':>15} {'goal':>9}")
    for label, median, ninety in rows:
        print(f"{label:20} {median * 1000:8.1f}ms {ninety * 1000:8.1f}ms "
              f"{median / floor_median:14.1f}x {goals.get(label, ''):>9}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
