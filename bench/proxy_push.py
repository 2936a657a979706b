"""Push throughput through the proxy versus straight to the git host, and the proxy's memory.

    .venv/bin/python bench/proxy_push.py [--size-mb 200] [--runs 5]

Makes one commit holding --size-mb of random data, then pushes it --runs times straight
to fakehub and --runs times through the proxy, alternating, each to a new repository
(so every push carries the whole pack) and a new branch. The proxy runs in its own
process so that its peak RSS (VmHWM) can be read from /proc. Prints the throughput of
both, their ratio (target >= 0.9) and the proxy's peak RSS growth (target <= 30 MB).
Then it adds --over-cap-mb more and pushes the lot through a proxy with the default
200 MiB cap, which must refuse it with git's own "remote rejected" line.
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


def git(cwd: Path, *args: str, home: Path, check: bool = True) -> tuple[float, str]:
    """(seconds, stderr) of a git command; exits the benchmark if it fails and `check`."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), **GIT_ENV}
    started = time.perf_counter()
    result = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if check and result.returncode != 0:
        sys.exit(f"git {' '.join(args[:3])} failed:\n{result.stderr}")
    return elapsed, result.stderr


class ProxyProcess:
    """The proxy in a process of its own, so that its memory can be read."""

    def __init__(self, db: Path, hub_base: str, token: str, max_push_bytes: int):
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--serve-proxy", str(db), hub_base, str(max_push_bytes)],
            stdout=subprocess.PIPE,
            env={**os.environ, "BENCH_INSTALLATION_TOKEN": token},
            text=True,
        )
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline())
        self.pid = self.proc.pid
        self.url = f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def make_repo(path: Path, home: Path) -> None:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main", home=home)
    # Random data neither compresses nor deltifies; don't spend the client's CPU trying.
    git(path, "config", "core.compression", "0", home=home)
    git(path, "config", "pack.compression", "0", home=home)
    git(path, "config", "pack.window", "0", home=home)


def add_random_commit(path: Path, size_mb: int, home: Path, prefix: str) -> None:
    # Many objects, like a real repository (and, past receive.unpackLimit, the server
    # keeps the pack as sent instead of exploding it into loose objects).
    for i in range(size_mb * 2):
        (path / f"{prefix}-{i:04}.bin").write_bytes(os.urandom(2**19))
    git(path, "add", ".", home=home)
    git(path, "commit", "-q", "-m", f"{size_mb} MB of random objects", home=home)


def proxied_home(tmp: Path, name: str, registry, proxy, hub, repo, branch, installation_id):
    """A HOME whose git goes through the proxy with a new hgs_ token, like a sandbox's."""
    home = tmp / f"home-{name}"
    home.mkdir()
    sandbox_id = f"sb-{name}"
    hgs = registry.issue(sandbox_id, repo=repo, branch=branch, installation_id=installation_id)
    for path, data in sandbox_git_files(
        proxy.url, sandbox_id, hgs, hub.git_url(repo), home=str(home)
    ).items():
        Path(path).write_bytes(data)
    return home, sandbox_id


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=200)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--over-cap-mb", type=int, default=100,
        help="then add this much and push over the default 200 MiB cap (0: skip)",
    )  # fmt: skip
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
        make_repo(work, home)
        add_random_commit(work, args.size_mb, home, "a")
        with running_fakehub(tmp / "hub") as hub:
            app = hub.create_app("hangar")
            hub.create_user("octo")
            installation_id = hub.install(app.id, "octo")
            token = hub.installation_token(installation_id)
            registry = TokenRegistry(tmp / "hangar.db")
            proxy = ProxyProcess(tmp / "hangar.db", hub.base_url, token, 4 * 2**30)
            try:
                compare(hub, registry, proxy, work, tmp, installation_id, token, args)
            finally:
                proxy.close()
            if args.over_cap_mb:
                print(f"adding {args.over_cap_mb} MB more for a push over the default cap ...")
                add_random_commit(work, args.over_cap_mb, home, "b")
                proxy = ProxyProcess(tmp / "hangar.db", hub.base_url, token, 200 * 2**20)
                try:
                    over_cap(hub, registry, proxy, work, tmp, installation_id)
                finally:
                    proxy.close()


def compare(hub, registry, proxy, work, tmp, installation_id, token, args) -> None:
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
            if mode == "direct":
                home = tmp / f"home-{name}"
                home.mkdir()
                url = hub.git_url(repo, token)
            else:
                home, sandbox_id = proxied_home(
                    tmp, name, registry, proxy, hub, repo, branch, installation_id
                )
                url = hub.git_url(repo)
                if baseline is None:
                    # Let the proxy serve one small request before taking its baseline.
                    git(work, "ls-remote", url, home=home)
                    baseline = memory_kib(proxy.pid)
            cpu_before = cpu_seconds(proxy.pid)
            elapsed, _ = git(work, "push", "-q", url, f"HEAD:refs/heads/{branch}", home=home)
            if mode == "proxy":
                proxy_cpu.append(cpu_seconds(proxy.pid) - cpu_before)
            if mode == "proxy" and pack_mb is None:
                # The proxy records each push with the bytes it carried.
                pack_mb = registry.pushes(sandbox_id)[0].bytes / 2**20
            times[mode].append(elapsed)
            print(f"  {mode:6} run {i + 1}: {elapsed:6.2f} s", flush=True)
    after = memory_kib(proxy.pid)
    assert pack_mb is not None and baseline is not None
    direct = pack_mb / statistics.median(times["direct"])
    proxied = pack_mb / statistics.median(times["proxy"])
    growth_mb = (after["VmHWM"] - baseline["VmRSS"]) / 1024
    cpu = statistics.median(proxy_cpu)
    best_direct = pack_mb / min(times["direct"])
    best_proxied = pack_mb / min(times["proxy"])
    print(f"pack size            {pack_mb:8.1f} MiB")
    print(f"direct to fakehub    {direct:8.1f} MiB/s median, {best_direct:.1f} best of {args.runs}")
    print(
        f"through the proxy    {proxied:8.1f} MiB/s median, {best_proxied:.1f} best of {args.runs}"
    )
    print(
        f"ratio                {proxied / direct:8.2f}   median ({best_proxied / best_direct:.2f} "
        "best; target >= 0.9)"
    )
    print(
        f"proxy CPU            {cpu:8.2f} s per push ({pack_mb / cpu if cpu else 0:.0f} MiB per "
        "CPU second)"
    )
    print(
        f"proxy RSS            {baseline['VmRSS'] / 1024:.1f} MiB before, peak "
        f"{after['VmHWM'] / 1024:.1f} MiB: growth {growth_mb:.1f} MiB (target <= 30)"
    )


def over_cap(hub, registry, proxy, work, tmp, installation_id) -> None:
    """A real push over the default 200 MiB cap: refused with git's own message."""
    hub.create_repo("octo", "bench-over-cap")
    repo, branch = "octo/bench-over-cap", "bench/over-cap"
    home, _ = proxied_home(tmp, "over-cap", registry, proxy, hub, repo, branch, installation_id)
    url = hub.git_url(repo)
    git(work, "ls-remote", url, home=home)
    baseline = memory_kib(proxy.pid)
    elapsed, stderr = git(
        work, "push", "-q", url, f"HEAD:refs/heads/{branch}", home=home, check=False
    )
    after = memory_kib(proxy.pid)
    printed = [line for line in stderr.splitlines() if "remote rejected" in line]
    refused = bool(printed) and "larger than 200 MiB" in printed[0]
    stored = hub.ref_sha(repo, branch)
    print(
        f"over the cap         {elapsed:8.2f} s, refused: {refused}, branch created: "
        f"{stored is not None}"
    )
    for line in printed:
        print(f"  git: {line.strip()}")
    print(
        f"proxy RSS            growth {(after['VmHWM'] - baseline['VmRSS']) / 1024:.1f} MiB "
        "while refusing it"
    )
    if not refused or stored is not None:
        sys.exit("the push over the cap was not refused as it should be")


if __name__ == "__main__":
    main()
