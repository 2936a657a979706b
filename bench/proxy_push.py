"""Push throughput through the proxy versus straight to the git host, and the proxy's memory.

    .venv/bin/python bench/proxy_push.py [--size-mb 200] [--runs 5]

Makes one commit holding --size-mb of random data, then pushes it --runs times straight
to fakehub and --runs times through the proxy, alternating, each to a new repository
(so every push carries the whole pack) and a new branch. The proxy runs in its own
process so that its peak RSS (VmHWM) can be read from /proc. Prints the throughput of
both, their ratio (target >= 0.9) and the proxy's peak RSS growth (target <= 30 MB).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aiohttp import web

from proxy import Grant, TokenRegistry, sandbox_git_files, setup_proxy

GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
    "LC_ALL": "C",
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@example.com",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@example.com",
}


# ---- the proxy process ---------------------------------------------------------------


class StaticUpstream:
    def __init__(self, base: str, token: str):
        self.base, self.token = base, token

    async def credentials(self, grant: Grant) -> tuple[str, str]:
        return self.base, self.token


def serve_proxy(db: str, hub_base: str, max_push_bytes: int) -> None:
    """Run only the proxy on 127.0.0.1; print the port, then serve until killed."""
    token = os.environ["BENCH_INSTALLATION_TOKEN"]
    app = web.Application()
    setup_proxy(
        app,
        registry=TokenRegistry(Path(db)),
        upstream=StaticUpstream(hub_base, token),
        max_push_bytes=max_push_bytes,
    )

    async def main() -> None:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        print(site._server.sockets[0].getsockname()[1], flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory_kib(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            fields[key] = int(value.split()[0])
    return fields


# ---- the driver ----------------------------------------------------------------------


def git(cwd: Path, *args: str, home: Path) -> float:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), **GIT_ENV}
    started = time.perf_counter()
    result = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        sys.exit(f"git {' '.join(args[:3])} failed:\n{result.stderr}")
    return elapsed


def make_repo(path: Path, size_mb: int, home: Path) -> None:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main", home=home)
    # Random data neither compresses nor deltifies; don't spend the client's CPU trying.
    git(path, "config", "core.compression", "0", home=home)
    git(path, "config", "pack.compression", "0", home=home)
    git(path, "config", "pack.window", "0", home=home)
    # Many objects, like a real repository (and, past receive.unpackLimit, the server
    # keeps the pack as sent instead of exploding it into loose objects).
    for i in range(size_mb * 2):
        (path / f"blob-{i:04}.bin").write_bytes(os.urandom(2**19))
    git(path, "add", ".", home=home)
    git(path, "commit", "-q", "-m", "random objects", home=home)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=200)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--serve-proxy", nargs=3, metavar=("DB", "HUB", "MAX"), help="internal")
    args = parser.parse_args()
    if args.serve_proxy:
        db, hub_base, max_bytes = args.serve_proxy
        serve_proxy(db, hub_base, int(max_bytes))
        return

    from fakehub.testing import running_fakehub

    with tempfile.TemporaryDirectory(prefix="proxy-bench-") as tmp_dir:
        tmp = Path(tmp_dir)
        home = tmp / "home"
        home.mkdir()
        work = tmp / "work"
        print(f"making a commit with {args.size_mb} MB of random data ...", flush=True)
        make_repo(work, args.size_mb, home)
        with running_fakehub(tmp / "hub") as hub:
            app = hub.create_app("hangar")
            hub.create_user("octo")
            installation_id = hub.install(app.id, "octo")
            token = hub.installation_token(installation_id)
            registry = TokenRegistry(tmp / "hangar.db")
            proc = subprocess.Popen(
                [sys.executable, __file__, "--serve-proxy", str(tmp / "hangar.db"),
                 hub.base_url, str(4 * 2**30)],
                stdout=subprocess.PIPE,
                env={**os.environ, "BENCH_INSTALLATION_TOKEN": token},
                text=True,
            )  # fmt: skip
            try:
                port = int(proc.stdout.readline())
                run(hub, registry, work, tmp, port, proc.pid, installation_id, token, args)
            finally:
                proc.terminate()
                proc.wait(10)


def run(hub, registry, work, tmp, port, pid, installation_id, token, args) -> None:
    proxy_url = f"http://127.0.0.1:{port}"
    pack_mb = None
    times: dict[str, list[float]] = {"direct": [], "proxy": []}
    baseline = None
    proxy_cpu: list[float] = []
    for i in range(args.runs):
        for mode in ("direct", "proxy"):
            name = f"bench-{mode}-{i}"
            hub.create_repo("octo", name)
            repo = f"octo/{name}"
            branch = f"bench/{i}"
            home = tmp / f"home-{name}"
            home.mkdir()
            if mode == "direct":
                url = hub.git_url(repo, token)
            else:
                sandbox_id = f"sb-{name}"
                hgs = registry.issue(
                    sandbox_id, repo=repo, branch=branch, installation_id=installation_id
                )
                for path, data in sandbox_git_files(
                    proxy_url, sandbox_id, hgs, hub.git_url(repo), home=str(home)
                ).items():
                    Path(path).write_bytes(data)
                url = hub.git_url(repo)
                if baseline is None:
                    # Let the proxy serve one small request before taking its baseline.
                    git(work, "ls-remote", url, home=home)
                    baseline = memory_kib(pid)
            cpu_before = cpu_seconds(pid)
            elapsed = git(work, "push", "-q", url, f"HEAD:refs/heads/{branch}", home=home)
            if mode == "proxy":
                proxy_cpu.append(cpu_seconds(pid) - cpu_before)
            if mode == "proxy" and pack_mb is None:
                # The proxy records each push with the bytes it carried.
                pack_mb = registry.pushes(sandbox_id)[0].bytes / 2**20
            times[mode].append(elapsed)
            print(f"  {mode:6} run {i + 1}: {elapsed:6.2f} s", flush=True)
    after = memory_kib(pid)
    assert pack_mb is not None and baseline is not None
    direct = pack_mb / statistics.median(times["direct"])
    proxied = pack_mb / statistics.median(times["proxy"])
    growth_mb = (after["VmHWM"] - baseline["VmRSS"]) / 1024
    print(f"pack size            {pack_mb:8.1f} MiB")
    print(f"direct to fakehub    {direct:8.1f} MiB/s (median of {args.runs})")
    print(f"through the proxy    {proxied:8.1f} MiB/s (median of {args.runs})")
    print(f"ratio                {proxied / direct:8.2f}   (target >= 0.9)")
    cpu = statistics.median(proxy_cpu)
    print(
        f"proxy CPU            {cpu:8.2f} s per push ({pack_mb / cpu if cpu else 0:.0f} MiB per "
        "CPU second)"
    )
    print(
        f"proxy RSS            {baseline['VmRSS'] / 1024:.1f} MiB before, peak "
        f"{after['VmHWM'] / 1024:.1f} MiB: growth {growth_mb:.1f} MiB (target <= 30)"
    )


if __name__ == "__main__":
    main()
