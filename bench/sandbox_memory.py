"""How much of hangar's memory one run's leftovers can take, per provider.

In a fresh subprocess per case, hangar's side of a run (observe until exit, read the
agent's log and parse it, then the publish-step commands: status, rev-list, the commit
message, a diff stat, and a command printing millions of lines) is done against a
sandbox whose agent left:

- benign: one small file and a one-line commit (the baseline, measured in the same run);
- hostile: 3 million lines of output, a 256 MiB sparse agent.log, a FILES-file change
  and a 1 MiB commit message.

Prints the peak RSS growth of each (VmHWM after the work minus VmRSS before it, with the
peak reset first) and hostile / benign. The goal: hostile grows at most 50 MiB.

    .venv/bin/python bench/sandbox_memory.py [--providers local,docker] [--files 100000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

GOAL_MIB = 50
REPO = "/workspace/repo"
LOG = "/workspace/.hangar/agent.log"

SETUP = (
    "set -e; mkdir -p /workspace/repo; cd /workspace/repo; git init -q; "
    "git -c user.name=a -c user.email=a@a commit -q --allow-empty -m base"
)
BENIGN = (
    "set -e; cd /workspace/repo; echo hello > hello.txt; git add -A; "
    "git -c user.name=a -c user.email=a@a commit -q -m 'Add hello'; echo done"
)
HOSTILE = (
    "set -e; cd /workspace/repo; seq 1 3000000; "
    "python3 -c 'import sys\n"
    "for i in range(int(sys.argv[1])):\n"
    "    d = f\"d{i // 1000}\"\n"
    "    if i % 1000 == 0: __import__(\"os\").mkdir(d)\n"
    "    open(f\"{d}/f{i}.txt\", \"w\").write(str(i))' \"$FILES\"; "
    "head -c 1048576 /dev/zero | tr '\\0' m > /tmp/msg; git add -A; "
    "git -c user.name=a -c user.email=a@a commit -q -F /tmp/msg; "
    f"truncate -s 268435456 {LOG}; echo the-end"
)


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(field)


def _reset_peak() -> int:
    """Reset this process's peak RSS (VmHWM) to now; returns the RSS now."""
    Path("/proc/self/clear_refs").write_text("5")
    return _status("VmRSS")


async def _probe(provider_name: str, case: str, files: int) -> dict:
    """One case in this process: what hangar's side of the run costs it."""
    from sandbox.envspec import EnvSpec
    from sandbox.harness import harness_for
    from sandbox.providers import get_provider

    with tempfile.TemporaryDirectory() as tmp:
        if provider_name == "local":
            provider = get_provider("local", root=Path(tmp) / "sandboxes")
            spec = EnvSpec(name="mem", network="none", agent_script="true")
        else:
            provider = get_provider("docker", instance="bench-memory")
            spec = EnvSpec(name="mem", provider="docker", image="hangar-base:1",
                           network="none", agent_script="true",
                           resources={"memory_mb": 4096, "pids": 512})
        sb = await provider.create(spec, {"hangar.bench": "memory"})
        try:
            setup = await provider.run(sb, ["sh", "-c", SETUP], timeout=120)
            assert setup.exit_code == 0, setup.output
            script = BENIGN if case == "benign" else HOSTILE
            # Reset the peak, then take the floor: what follows is the run's cost.
            before = _reset_peak()
            started = time.monotonic()
            pid = await provider.start(sb, ["sh", "-c", script], env={"FILES": str(files)})
            while (await provider.observe(sb, pid)).state == "running":  # noqa: ASYNC110
                await asyncio.sleep(0.2)
            status = await provider.observe(sb, pid)
            assert status.exit_code == 0, status
            log = (await provider.copy_out(sb, LOG)).decode("utf-8", "replace")
            harness_for(spec).parse(log)
            outputs = 0
            for argv in (["git", "status", "--porcelain"],
                         ["git", "rev-list", "--count", "HEAD~1..HEAD"],
                         ["git", "log", "-1", "--format=%B"],
                         ["git", "diff", "--stat=200", "HEAD~1", "HEAD"],
                         ["seq", "1", "3000000"]):
                result = await provider.run(sb, argv, cwd=REPO, timeout=600)
                assert result.exit_code == 0, result.output[-500:]
                outputs += len(result.output)
            peak = _status("VmHWM")
            return {"provider": provider_name, "case": case, "files": files,
                    "growth_mib": round((peak - before) / 2**20, 1),
                    "seconds": round(time.monotonic() - started, 1),
                    "log_bytes_read": len(log), "output_chars_kept": outputs}
        finally:
            await provider.destroy(sb)


def measure(provider_name: str, case: str, files: int) -> dict:
    """Run one case in a fresh interpreter and return what it printed."""
    out = subprocess.run(
        [sys.executable, __file__, "--probe", provider_name, "--case", case,
         "--files", str(files)],
        capture_output=True, text=True, timeout=1800, cwd=ROOT,
    )
    if out.returncode != 0:
        raise RuntimeError(f"probe {provider_name}/{case} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--providers", default="local,docker")
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--probe")
    parser.add_argument("--case", choices=["benign", "hostile"], default="hostile")
    args = parser.parse_args()
    if args.probe:
        print(json.dumps(asyncio.run(_probe(args.probe, args.case, args.files))))
        return
    for name in args.providers.split(","):
        benign = measure(name, "benign", args.files)
        hostile = measure(name, "hostile", args.files)
        ratio = hostile["growth_mib"] / max(benign["growth_mib"], 0.1)
        verdict = "ok" if hostile["growth_mib"] <= GOAL_MIB else "OVER GOAL"
        print(f"{name:7s} benign {benign['growth_mib']:6.1f} MiB  hostile "
              f"{hostile['growth_mib']:6.1f} MiB ({ratio:.1f}x benign, {hostile['seconds']} s, "
              f"{args.files} files)  goal <= {GOAL_MIB} MiB: {verdict}")


if __name__ == "__main__":
    main()
