"""The local provider: one host directory per sandbox, processes under bubblewrap.

Inside a sandbox the host's /usr, the bits of /etc that programs need, and the host's
python3 prefix are visible read-only; the sandbox's own directory is bound at /workspace
and is the only writable place besides a private /tmp. The process runs as uid 1000 in
its own user, pid, ipc, uts, cgroup and mount namespaces, may not create further user
namespaces, and (network: loopback or none) has its own network namespace. With
network: loopback and a proxy_port, a relay inside the sandbox listens on
127.0.0.1:<proxy_port> and forwards to hangar's sandbox gate (`gate_dir`, the directory of
its unix socket) so the gate, which serves only `/git/`, is the only thing the sandbox can
reach.

Host layout under root: <id>/meta.json (the Sandbox record), <id>/workspace (bound at
/workspace), <id>/procs/<process>.json (what `observe` needs after a restart), and .etc,
shared by all sandboxes: the allowed files of the host's /etc and the sandbox user's
passwd and group, bound at /etc (see _etc). The agent can touch only <id>/workspace.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from sandbox.envspec import EnvSpec
from sandbox.provider import (
    BASE_PATH,
    DEFAULT_LOG_PATH,
    HANGAR_DIR,
    HOME_DIR,
    REPO_DIR,
    WORKSPACE,
    ExecResult,
    OutputCallback,
    OutputTail,
    ProcessStatus,
    Provider,
    Sandbox,
    SandboxError,
    detached_wrapper,
    exit_file,
    new_process_id,
    new_sandbox_id,
    sandbox_env,
    workspace_relative,
)
from sandbox.providers import _procs
from sandbox.providers._etc import SharedEtc
from sandbox.providers._relay import RELAY_SANDBOX_DIR, ProxyRelay, relay_argv
from sandbox.providers._warm import (
    WAITING_COMMAND,
    Started,
    Waiting,
    command_line,
    sources,
)
from sandbox.safe_read import EXIT_FILE_BYTES, LOG_TAIL_BYTES, read_beneath
from sandbox.snapshots import SpareCopies

log = logging.getLogger(__name__)

SANDBOX_UID = 1000
RUNNING = ".running"  # procs/<token>.running: a command is (or was, if hangar died) running
SANDBOX_DIR = re.compile(r"sb-[0-9a-f]{8,}")
BWRAP_MISSING = (
    "bubblewrap (bwrap) is not installed: apt-get install bubblewrap, "
    "or set isolation: none in the environment spec"
)
# Files and directories of the host's /etc that ordinary tools read. Nothing else of /etc:
# when hangar runs as root, the sandbox's uid maps to host root, so owner-only files in a
# mount (/etc/ssl/private, /etc/shadow) would be readable. Only world-readable paths here.
ETC_ALLOWED = (
    "hosts", "resolv.conf", "nsswitch.conf", "host.conf", "gai.conf", "protocols",
    "services", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives",
    "ssl/certs", "ssl/openssl.cnf", "ca-certificates", "ca-certificates.conf", "gitconfig",
    "localtime", "timezone", "mime.types", "os-release", "debian_version", "profile",
    "bash.bashrc", "inputrc",
)  # fmt: skip

# A command line. (Inside LocalProvider, `list` in an annotation is its list() method.)
Argv = list[str]

SANDBOX_PASSWD = (
    "root:x:0:0:root:/nonexistent:/usr/sbin/nologin\n"
    f"hangar:x:{SANDBOX_UID}:{SANDBOX_UID}:hangar sandbox:{HOME_DIR}:/bin/sh\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
)
SANDBOX_GROUP = f"root:x:0:\nhangar:x:{SANDBOX_UID}:\nnogroup:x:65534:\n"


def host_python_prefix() -> Path | None:
    """Where the host's python3 lives when it is not under /usr (pyenv, /opt, ...)."""
    candidates = [Path(sys.base_prefix)]
    found = shutil.which("python3")
    if found:
        real = Path(found).resolve()
        if real.parent.name == "bin":
            candidates.append(real.parent.parent)
    for prefix in candidates:
        if (prefix / "bin" / "python3").exists() and not str(prefix).startswith("/usr/"):
            return prefix
    return None


# A spare sandbox's mark (procs/spare): its maker's pid and start time.
SPARE = "spare"
# How long after a spare was taken the next one is made.
SPARE_AFTER_S = 0.02


class LocalProvider(Provider):
    name = "local"

    def __init__(
        self,
        root: Path | str,
        *,
        proxy_port: int | None = None,
        gate_dir: Path | str | None = None,
        hidden_paths: list[Path | str] | tuple[Path | str, ...] = (),
        bwrap: str | None = None,
        warm: bool = False,
    ) -> None:
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        self.proxy_port = proxy_port
        # Paths that must never be visible even if they sit under something bound (e.g.
        # hangar's data dir inside the python prefix): a tmpfs is mounted over them.
        self.hidden_paths = [Path(p).resolve() for p in hidden_paths]
        self.bwrap = bwrap or shutil.which("bwrap")
        self.python_prefix = host_python_prefix()
        # The host end of the in-sandbox relay: hangar's sandbox gate when given, else a
        # forwarder to 127.0.0.1:proxy_port (a bare push proxy, as in the proxy's tests).
        self._gate_dir = Path(gate_dir).resolve() if gate_dir and proxy_port else None
        self._relay = (
            ProxyRelay(self.root / ".relay", proxy_port)
            if proxy_port and self._gate_dir is None
            else None
        )
        self._running: dict[str, set[asyncio.subprocess.Process | Started]] = {}
        # The /etc every sandbox sees (see _etc), and the mounts all sandboxes share.
        self._etc = SharedEtc(
            self.root / ".etc",
            (*ETC_ALLOWED, *sorted(p.name for p in Path("/etc").glob("python3*"))),
            {"passwd": SANDBOX_PASSWD, "group": SANDBOX_GROUP},
        )
        self._host_view_args: Argv | None = None
        self._host_view_bound: list[Path] = []
        # Spare copies of environment builds' checkouts (sandbox.snapshots).
        self.spare_copies = SpareCopies()
        # Bubblewraps started ahead (sandbox/providers/_warm.py): each sandbox's next
        # command's, and spare sandboxes' first command's, by sandbox id; the spare of
        # each network kind; sandboxes being destroyed, which get none.
        self.warm = warm
        self._waiting: dict[str, Waiting] = {}
        self._spares: dict[str, str] = {}
        self._spare_due: dict[str, asyncio.TimerHandle] = {}
        self._ending: set[str] = set()
        self._closed = False
        self._sweep_spares()

    # ---- records -------------------------------------------------------------------

    def _dir(self, sb: Sandbox) -> Path:
        return self.root / sb.id

    def _workspace(self, sb: Sandbox) -> Path:
        return (self._dir(sb) / "workspace").resolve()

    def _host_path(self, sb: Sandbox, path: str) -> Path:
        """The host path of a sandbox path under /workspace; refuses anything that escapes."""
        ws = self._workspace(sb)
        host = ws / workspace_relative(path)
        # The agent owns /workspace and may plant symlinks; hangar writes as itself.
        real = Path(os.path.realpath(host))
        if real != ws and ws not in real.parents:
            raise ValueError(f"{path}: leads outside {WORKSPACE} through a symlink; refusing")
        return real

    def _require(self, sb: Sandbox) -> dict[str, Any]:
        meta = self._dir(sb) / "meta.json"
        try:
            return json.loads(meta.read_text())
        except FileNotFoundError:
            raise SandboxError(f"sandbox {sb.id} does not exist (destroyed?)") from None

    # ---- create / destroy / list ---------------------------------------------------

    async def create(self, spec: EnvSpec, labels: dict[str, str]) -> Sandbox:
        if spec.isolation == "bwrap" and not self.bwrap:
            raise SandboxError(BWRAP_MISSING)
        if spec.network == "loopback" and self.proxy_port and not self.python_prefix:
            if not shutil.which("python3"):
                raise SandboxError(
                    "network: loopback with a push proxy needs python3 on the host for the "
                    "in-sandbox relay: apt-get install python3"
                )
        spare = None
        if self.warm and spec.isolation == "bwrap":
            spare = self._spares.pop(spec.network, None)
            self._spare_later(spec.network)
        sb = Sandbox(id=spare or new_sandbox_id(), provider=self.name, labels=dict(labels))
        base = self._dir(sb)
        ws = base / "workspace"
        for sub in (ws / "home", ws / ".hangar", base / "procs"):
            sub.mkdir(parents=True, exist_ok=True)
        (base / "procs" / SPARE).unlink(missing_ok=True)
        sb.ref = {
            "dir": str(base),
            "isolation": spec.isolation,
            "network": spec.network,
        }
        (base / "meta.json").write_text(sb.model_dump_json())
        if spec.isolation == "none":
            log.warning(
                "sandbox %s runs WITHOUT isolation (isolation: none): its processes see the "
                "host as hangar's user does",
                sb.id,
                extra={"sandbox": sb.id},
            )
        return sb

    async def destroy(self, sb: Sandbox) -> None:
        self._ending.add(sb.id)
        try:
            await self._destroy(sb)
        finally:
            self._ending.discard(sb.id)

    async def _destroy(self, sb: Sandbox) -> None:
        base = self._dir(sb)
        waiting = self._waiting.pop(sb.id, None)
        if waiting is not None:
            waiting.end()
        for proc in list(self._running.pop(sb.id, ())):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        records = []
        for path in (base / "procs").glob("*.json"):
            with contextlib.suppress(OSError, ValueError):
                records.append(json.loads(path.read_text()))
        for record in records:
            self._kill_all(record)
        # A command run by an earlier hangar that was killed left no record, and bwrap's
        # --die-with-parent did not stop every one of them (seen after kill -9): look for
        # processes naming the sandbox's directory, too. Only when one may be there (a
        # look over every process costs more than the rest of a destroy): a command still
        # running, or whose run was cut short, left its marker; and a sandbox without
        # isolation has no pid namespace to end its processes with its init.
        unaccounted = any((base / "procs").glob("*" + RUNNING)) or (
            self._isolation(sb) == "none")

        async def holding() -> list[int]:
            return await asyncio.to_thread(_procs.holding, base) if unaccounted else []

        # Each with its start time: the wait below never mistakes a new process for it.
        killed: list[tuple[int, int | None]] = []
        for pid in await holding():
            tree = [pid, *_procs.descendants(pid)]
            killed += [(p, _procs.start_time(p)) for p in tree]
            _procs.signal_pids(tree)
        # SIGKILL is not instant: wait until the processes are really gone, those found
        # below the sandbox's own too (a command's cwd and argv need not name its dir).
        deadline = time.monotonic() + 5
        while any(_procs.is_alive(r["pid"], r.get("started")) for r in records) or any(
                _procs.is_alive(p, started) for p, started in killed) or (
                await holding()):
            if time.monotonic() >= deadline:
                log.warning("sandbox %s: processes survived SIGKILL for 5 s", sb.id)
                break
            await asyncio.sleep(0.02)
        await asyncio.to_thread(shutil.rmtree, base, True)

    def _isolation(self, sb: Sandbox) -> str | None:
        try:
            return self._require(sb).get("ref", {}).get("isolation")
        except (SandboxError, ValueError):
            return None  # half made or half destroyed: treat it as the unknown it is

    def _running_marker(self, sb: Sandbox) -> Path:
        """A file that stays while a command runs (see destroy)."""
        marker = self._dir(sb) / "procs" / (new_process_id() + RUNNING)
        marker.touch()
        return marker

    async def end_abandoned(self) -> list[str]:
        """bubblewrap processes of a local sandbox whose directory is gone (its hangar's
        data directory was removed): each, and all it runs, is killed. A live hangar's
        sandbox always has its directory: it is made before any process and removed after
        the last one ended."""
        ended = []
        for pid, workspace in await asyncio.to_thread(_procs.bwrap_workspaces):
            if SANDBOX_DIR.fullmatch(workspace.parent.name) and not await asyncio.to_thread(
                    workspace.parent.exists):
                _procs.signal_pids([pid, *_procs.descendants(pid)])
                ended.append(workspace.parent.name)
        return list(dict.fromkeys(ended))  # bwrap and its init: one sandbox

    async def list(self, labels: dict[str, str]) -> list[Sandbox]:
        found = []
        for meta in sorted(self.root.glob("sb-*/meta.json")):
            try:
                sb = Sandbox.model_validate_json(meta.read_text())
            except (OSError, ValueError):
                continue
            if all(sb.labels.get(k) == v for k, v in labels.items()):
                found.append(sb)
        return found

    # ---- commands -----------------------------------------------------------------

    def _path_var(self) -> str:
        if self.python_prefix:
            return f"{self.python_prefix}/bin:{BASE_PATH}"
        return BASE_PATH

    def _command(
        self, sb: Sandbox, argv: list[str], meta: dict[str, Any], *, detached: bool
    ) -> tuple[list[str], str | None]:
        """(full argv, host cwd) for argv in sb: bwrap around it, or path rewriting for none."""
        ref = meta.get("ref", {})
        if ref.get("isolation") == "none":
            ws = str(self._dir(sb) / "workspace")
            return [_rewrite(a, ws) for a in argv], ws
        return [*self._bwrap_args(sb, ref, detached=detached), "--", *argv], None

    def _bwrap_args(self, sb: Sandbox, ref: dict[str, Any], *, detached: bool) -> list[str]:
        base = self._dir(sb)
        args = [
            self.bwrap or "bwrap",
            "--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID),
            "--disable-userns",
            "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--hostname", sb.id,
            "--new-session",
        ]  # fmt: skip
        network = ref.get("network", "loopback")
        if network != "host":
            args.append("--unshare-net")
        args += self._host_view()
        args += self._hidden()
        args += ["--bind", str(base / "workspace"), WORKSPACE]
        relay_dir = self._relay.directory if self._relay else self._gate_dir
        if network == "loopback" and relay_dir:
            args += ["--ro-bind", str(relay_dir), RELAY_SANDBOX_DIR]
        # The root bwrap builds is a tmpfs: make it read-only once everything is mounted.
        args += ["--remount-ro", "/", "--chdir", WORKSPACE]
        if not detached:
            # A command run to completion dies with hangar; a detached agent must not.
            args.append("--die-with-parent")
        return args

    def _host_view(self) -> Argv:
        """The mounts every sandbox shares: the host's /usr and friends, hangar's copy of
        the allowed /etc, /proc, /dev and /tmp. Looked up once; /etc is kept current."""
        self._etc.refresh()
        if self._host_view_args is not None:
            return self._host_view_args
        args = ["--ro-bind", "/usr", "/usr"]
        for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            host = Path("/") / top
            if host.is_symlink():
                args += ["--symlink", os.readlink(host), f"/{top}"]
            elif host.is_dir():
                args += ["--ro-bind", str(host), f"/{top}"]
        # One mount for all of /etc: each mount costs bubblewrap a remount and a read of
        # the mount table.
        args += ["--ro-bind", str(self._etc.directory), "/etc"]
        args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
        if self.python_prefix:
            args += ["--ro-bind", str(self.python_prefix), str(self.python_prefix)]
        self._host_view_args = args
        self._host_view_bound = [Path(args[i + 1]) for i, a in enumerate(args)
                                 if a == "--ro-bind"]  # fmt: skip
        return args

    def _hidden(self) -> Argv:
        args = []
        for hidden in self.hidden_paths:
            if hidden.exists() and any(hidden.is_relative_to(b) for b in self._host_view_bound):
                args += ["--tmpfs", str(hidden)]
        return args

    def _wrap_network(self, ref: dict[str, Any], argv: list[str]) -> list[str]:
        """Start the in-sandbox relay to the push proxy first, when the sandbox needs one."""
        if ref.get("isolation") == "none" or ref.get("network") != "loopback":
            return argv
        if not self.proxy_port:
            return argv
        python = f"{self.python_prefix}/bin/python3" if self.python_prefix else "python3"
        return relay_argv(python, self.proxy_port, argv)

    async def _ensure_relay(self, ref: dict[str, Any]) -> None:
        if self._relay and ref.get("network") == "loopback" and ref.get("isolation") != "none":
            await self._relay.ensure_running()

    # ---- bubblewraps started ahead (sandbox/providers/_warm.py) ----------------------

    def started_ahead(self, sb: Sandbox) -> bool:
        """Whether sb's next command has its bubblewrap started."""
        return sb.id in self._waiting

    def _started_argv(self, sb: Sandbox, ref: dict[str, Any]) -> Argv:
        return [*self._bwrap_args(sb, ref, detached=False), "--",
                *self._wrap_network(ref, WAITING_COMMAND)]

    def _mounted(self, sb: Sandbox, ref: dict[str, Any]) -> tuple[Any, ...]:
        relay_dir = self._relay.directory if self._relay else self._gate_dir
        return sources([self._dir(sb) / "workspace", self._etc.directory,
                        *([relay_dir] if relay_dir else [])])

    def _start_ahead(self, sb: Sandbox, ref: dict[str, Any]) -> None:
        self._waiting[sb.id] = Waiting(
            self._started_argv(sb, ref), sandbox_env(None, path=self._path_var()),
            str(self.root), self._mounted(sb, ref))

    async def _start_warm(self, sb: Sandbox, ref: dict[str, Any], argv: Argv, cwd: str,
                          env: dict[str, str]) -> Started | None:
        """The command started in the bubblewrap started ahead for it; None: start it cold."""
        waiting = self._waiting.pop(sb.id, None)
        if waiting is None:
            return None
        if not waiting.fits(self._started_argv(sb, ref), sandbox_env(None, path=self._path_var()),
                            self._mounted(sb, ref)):
            waiting.end()
            return None
        line = command_line(cwd, env, waiting.env, argv)
        if line is None:
            self._waiting[sb.id] = waiting  # for the next command, which may have one
            return None
        started = Started(waiting)
        try:
            await started.begin(line)
        except OSError as exc:  # no pidfd, say: it is ended, and the command starts cold
            log.warning("a bubblewrap started ahead could not be used: %s", exc)
            waiting.end()
            return None
        except BaseException:  # cancelled as it was handed its line: nothing else would end it
            waiting.end()
            raise
        return started

    def _start_next(self, sb: Sandbox) -> None:
        """The bubblewrap of sb's next command, unless sb is going or has one."""
        if self._closed or sb.id in self._ending or sb.id in self._waiting:
            return
        try:
            ref = self._require(sb).get("ref", {})
            if ref.get("isolation") == "bwrap":
                self._start_ahead(sb, ref)
        except (SandboxError, OSError, ValueError) as exc:
            log.debug("no bubblewrap started ahead for %s: %s", sb.id, exc)

    def _spare_later(self, network: str) -> None:
        """A spare sandbox of this network kind, made soon: not beside the create that took
        the last one, whose command comes next."""
        if self._closed or network in self._spares or network in self._spare_due:
            return
        self._spare_due[network] = asyncio.get_running_loop().call_later(
            SPARE_AFTER_S, self._make_spare, network)

    def _make_spare(self, network: str) -> None:
        self._spare_due.pop(network, None)
        if self._closed or network in self._spares:
            return
        sb = Sandbox(id=new_sandbox_id(), provider=self.name, labels={})
        base = self._dir(sb)
        try:
            for sub in (base / "workspace" / "home", base / "workspace" / ".hangar",
                        base / "procs"):
                sub.mkdir(parents=True, exist_ok=True)
            me = os.getpid()
            (base / "procs" / SPARE).write_text(f"{me} {_procs.start_time(me)}")
            self._start_ahead(sb, {"dir": str(base), "isolation": "bwrap", "network": network})
        except OSError as exc:
            log.warning("no spare sandbox made: %s", exc)
            shutil.rmtree(base, ignore_errors=True)
            return
        self._spares[network] = sb.id

    def _sweep_spares(self) -> None:
        """Spares a hangar that is gone left: no meta.json, a maker no longer alive."""
        for marker in self.root.glob(f"sb-*/procs/{SPARE}"):
            try:
                pid, started = (int(x) if x != "None" else None
                                for x in marker.read_text().split())
            except (OSError, ValueError):
                pid, started = 0, None
            if not (pid and _procs.is_alive(pid, started)):
                shutil.rmtree(marker.parent.parent, ignore_errors=True)

    async def close(self) -> None:
        """End every bubblewrap started ahead and remove the spares."""
        self._closed = True
        for due in self._spare_due.values():
            due.cancel()
        self._spare_due.clear()
        waiting, self._waiting = self._waiting, {}
        for started in waiting.values():
            started.end()
        spares, self._spares = list(self._spares.values()), {}
        for sb_id in spares:
            await asyncio.to_thread(shutil.rmtree, self.root / sb_id, True)

    async def _start(self, sb: Sandbox, meta: dict[str, Any], full_argv: Argv,
                     env: dict[str, str], *, offline: bool,
                     warm: tuple[Argv, str]) -> asyncio.subprocess.Process | Started:
        """full_argv (the relay, the shell, the command) started in sb: in the bubblewrap
        started ahead for it when there is one it fits, else cold."""
        if not offline:
            argv, cwd = warm
            ahead = await self._start_warm(sb, meta.get("ref", {}), argv, cwd, env)
            if ahead is not None:
                return ahead
        full, host_cwd = self._command(sb, full_argv, meta, detached=False)
        try:
            return await asyncio.create_subprocess_exec(
                *full,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                env=_none_env(env, host_cwd) if host_cwd else env,
                cwd=host_cwd or str(self.root),
                start_new_session=True,
            )
        except FileNotFoundError as exc:
            raise SandboxError(f"cannot start {exc.filename}: not found") from None

    async def run(
        self,
        sb: Sandbox,
        argv: list[str],
        *,
        timeout: float | None = None,
        env: dict[str, str] | None = None,
        cwd: str = WORKSPACE,
        on_output: OutputCallback | None = None,
        offline: bool = False,
    ) -> ExecResult:
        meta = self._require(sb)
        ref = meta.get("ref", {})
        inner = ["/bin/sh", "-c", 'cd "$1" || exit 127; shift; exec "$@"', "hangar-run", cwd]
        proc_env = sandbox_env(env, path=self._path_var())
        if not offline:
            # The relay costs a Python start in the sandbox, each time: only when needed.
            # It starts the shell, which starts the command: a command not found is 127.
            await self._ensure_relay(ref)
            inner = self._wrap_network(ref, inner)
        started = time.monotonic()
        marker = self._running_marker(sb)
        try:
            proc = await self._start(sb, meta, [*inner, *argv], proc_env, offline=offline,
                                     warm=(argv, cwd))
        except BaseException:
            marker.unlink(missing_ok=True)
            raise
        self._running.setdefault(sb.id, set()).add(proc)
        tail = OutputTail()

        async def pump() -> None:
            assert proc.stdout is not None
            while chunk := await proc.stdout.read(65536):
                tail.add(chunk)
                if on_output is not None:
                    on_output(chunk)

        timed_out = False
        try:
            pump_task = asyncio.ensure_future(pump())
            async with asyncio.timeout(timeout):
                await asyncio.shield(pump_task)
            await proc.wait()
        except TimeoutError:
            timed_out = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(2):
                    await pump_task
        except asyncio.CancelledError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()  # reaped here, not by a closed loop's garbage collection
            raise
        finally:
            self._running.get(sb.id, set()).discard(proc)
            marker.unlink(missing_ok=True)
            if self.warm:
                # After this command, not beside it: the two would share the CPU.
                asyncio.get_running_loop().call_soon(self._start_next, sb)
        return ExecResult(
            exit_code=None if timed_out else proc.returncode,
            output=tail.text(),
            timed_out=timed_out,
            duration_s=time.monotonic() - started,
        )

    # ---- detached processes -------------------------------------------------------

    async def start(
        self,
        sb: Sandbox,
        argv: list[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str = REPO_DIR,
        log_path: str = DEFAULT_LOG_PATH,
    ) -> str:
        meta = self._require(sb)
        ref = meta.get("ref", {})
        await self._ensure_relay(ref)
        process_id = new_process_id()
        wrapped = detached_wrapper(
            self._wrap_network(ref, argv), cwd=cwd, log_path=log_path, process_id=process_id,
            # Under bubblewrap the sandbox has a pid namespace of its own: it ends with the
            # agent, relay and leftovers included.
            end_namespace=ref.get("isolation") != "none",
        )
        full, host_cwd = self._command(sb, wrapped, meta, detached=True)
        proc_env = sandbox_env(env, path=self._path_var())
        if host_cwd:
            proc_env = _none_env(proc_env, host_cwd)
        record_path = self._dir(sb) / "procs" / f"{process_id}.json"
        info_path = self._dir(sb) / "procs" / f"{process_id}.info"
        marker = self._running_marker(sb)  # until its record is written
        try:
            record = await asyncio.to_thread(
                _spawn_detached, full, proc_env, host_cwd or str(self.root), info_path
            )
            record["isolation"] = ref.get("isolation")
            record_path.write_text(json.dumps(record))
        finally:
            marker.unlink(missing_ok=True)
        return process_id

    def _record(self, sb: Sandbox, process_id: str) -> dict[str, Any] | None:
        if "/" in process_id or not process_id:
            raise ValueError(f"not a process id: {process_id!r}")
        try:
            return json.loads((self._dir(sb) / "procs" / f"{process_id}.json").read_text())
        except (FileNotFoundError, ValueError):
            return None

    def _exit_code(self, sb: Sandbox, process_id: str) -> int | None:
        try:
            raw = read_beneath(self._workspace(sb), workspace_relative(exit_file(process_id)),
                               EXIT_FILE_BYTES)
            return int(raw.strip())
        except (OSError, ValueError):
            return None

    async def observe(self, sb: Sandbox, process_id: str) -> ProcessStatus:
        # After a restart the engine's first call is often this one: bring the relay back.
        await self._ensure_relay(self._require(sb).get("ref", {}))
        code = self._exit_code(sb, process_id)
        if code is not None:
            return ProcessStatus(state="exited", exit_code=code)
        record = self._record(sb, process_id)
        if record and _procs.is_alive(record["pid"], record.get("started")):
            return ProcessStatus(state="running")
        # The exit file is written before the process ends: look once more.
        code = self._exit_code(sb, process_id)
        if code is not None:
            return ProcessStatus(state="exited", exit_code=code)
        return ProcessStatus(state="gone")

    def host_pids(self, sb: Sandbox, process_id: str) -> list[int]:
        """Host pids of a detached process: its anchor (the sandbox's init) first, then the
        wrapper that records the exit code, then the agent and all it started."""
        record = self._record(sb, process_id)
        if not record or not _procs.is_alive(record["pid"], record.get("started")):
            return []
        return [record["pid"], *_procs.descendants(record["pid"])]

    async def stop(self, sb: Sandbox, process_id: str, grace_s: float = 5) -> None:
        record = self._record(sb, process_id)
        if not record or not _procs.is_alive(record["pid"], record.get("started")):
            return
        anchor = record["pid"]
        below = _procs.descendants(anchor)
        if record.get("isolation") == "none":
            with contextlib.suppress(ProcessLookupError):
                os.killpg(anchor, signal.SIGTERM)
        else:
            # The wrapper is the init's child; TERM the agent beneath it so the wrapper
            # can record how it ended.
            wrapper = below[0] if below else None
            _procs.signal_pids([p for p in below if p != wrapper], signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while _procs.is_alive(anchor, record.get("started")):  # polling /proc: nothing to await
            if time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.05)
        if _procs.is_alive(anchor, record.get("started")):
            self._kill_all(record)

    def _kill_all(self, record: dict[str, Any]) -> None:
        pid, started = record["pid"], record.get("started")
        if not _procs.is_alive(pid, started):
            return
        if record.get("isolation") == "none":
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            _procs.signal_pids(_procs.descendants(pid))
        else:
            # Killing a pid namespace's init kills everything in it.
            _procs.signal_pids([pid])

    # ---- files --------------------------------------------------------------------

    async def copy_in(self, sb: Sandbox, files: dict[str, bytes], mode: int = 0o644) -> None:
        self._require(sb)
        for path, data in files.items():
            host = self._host_path(sb, path)
            await asyncio.to_thread(_write_file, host, data, mode)

    async def copy_out(self, sb: Sandbox, path: str, max_bytes: int = LOG_TAIL_BYTES) -> bytes:
        self._require(sb)
        rel = workspace_relative(path)
        return await asyncio.to_thread(read_beneath, self._workspace(sb), rel, max_bytes)


def _write_file(host: Path, data: bytes, mode: int) -> None:
    host.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(host, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.chmod(host, mode)


def _spawn_detached(
    argv: list[str], env: dict[str, str], cwd: str, info_path: Path
) -> dict[str, Any]:
    """Start argv so it outlives hangar: a shell starts it in the background and exits, so
    the process is adopted by init (no zombie left in hangar) in a session of its own.

    Returns the anchor to observe: bwrap's sandbox init (from --info-fd) or, without
    isolation, the shell that runs the wrapper.
    """
    is_bwrap = bool(argv) and os.path.basename(argv[0]) == "bwrap"
    with open(info_path, "wb") as info:
        if is_bwrap:
            argv = [argv[0], "--info-fd", str(info.fileno()), *argv[1:]]
        launcher = subprocess.Popen(
            ["/bin/sh", "-c", '"$@" </dev/null >/dev/null 2>&1 & echo $!', "hangar-launch", *argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            start_new_session=True,
            pass_fds=(info.fileno(),) if is_bwrap else (),
        )
        out, _ = launcher.communicate(timeout=10)
    launched = int(out.strip())
    pid = launched
    if is_bwrap:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                pid = int(json.loads(info_path.read_text())["child-pid"])
                break
            except (ValueError, KeyError):
                if not _procs.is_alive(launched):
                    raise SandboxError(
                        "bwrap exited before the sandbox started; run the same command with "
                        "`run` to see its error"
                    ) from None
                time.sleep(0.005)
        else:
            raise SandboxError("bwrap did not report its sandbox within 10 s")
    return {"pid": pid, "started": _procs.start_time(pid), "launcher": launched}


def _rewrite(value: str, ws: str) -> str:
    """Without isolation there is no /workspace: point sandbox paths at the host dir."""
    if value == WORKSPACE or value.startswith(WORKSPACE + "/"):
        return ws + value[len(WORKSPACE) :]
    return value.replace(f" {WORKSPACE}/", f" {ws}/").replace(f"'{WORKSPACE}/", f"'{ws}/")


def _none_env(env: dict[str, str], ws: str) -> dict[str, str]:
    out = {k: _rewrite(v, ws) for k, v in env.items()}
    out["HANGAR_WORKSPACE"] = ws
    return out


__all__ = ["BWRAP_MISSING", "HANGAR_DIR", "LocalProvider"]
