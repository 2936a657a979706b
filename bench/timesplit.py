"""Where a latency goes, for a bench that runs hangar in its own process (ServiceThread):

- github waits: the waits GitHub asks for (write spacing, the minute's and the hour's
  content-creation budget, rate-limit pauses);
- github: GitHub (fakehub) answering hangar's REST calls;
- sandbox: the provider's calls (create, run, copy, observe, destroy, ...);
- agent: the agent's process, from its start to its exit (the exit file's time);
- hangar: the rest, where none of the above ran: hangar's own work and its own waits.

Each instant counts once, for the first of agent, sandbox, github waits, github that
covers it (hangar runs several steps at a time), so the parts add up to the whole.

    split = TimeSplit.install()        # before hangar starts; wraps the classes, once
    begun = time.monotonic()
    ...                                # the measured stretch
    parts = split.parts(begun, time.monotonic())   # seconds per part, and "total"
"""

from __future__ import annotations

import functools
import itertools
import threading
import time
from collections.abc import Iterable

PARTS = ("agent", "sandbox", "github waits", "github", "hangar")
_PROVIDER_CALLS = ("create", "run", "start", "observe", "stop", "copy_in", "copy_out",
                   "destroy", "list")


class TimeSplit:
    _installed: TimeSplit | None = None

    def __init__(self) -> None:
        self._intervals: list[tuple[str, float, float]] = []
        self._lock = threading.Lock()
        self._started: dict[tuple[str, str], float] = {}  # (sandbox, process) -> when

    def add(self, part: str, begun: float, ended: float) -> None:
        if ended > begun:
            with self._lock:
                self._intervals.append((part, begun, ended))

    @classmethod
    def install(cls) -> TimeSplit:
        """Wrap GitHub's client and the local and docker providers (once per process)."""
        if cls._installed is None:
            split = cls()
            split._wrap_github()
            split._wrap_providers()
            cls._installed = split
        return cls._installed

    # -- what is wrapped ---------------------------------------------------------------

    def _wrap_github(self) -> None:
        from app.github.client import GitHubClient, RateLimited

        split = self

        def timed(part: str, original):
            @functools.wraps(original)
            async def wrapper(*args, **kwargs):
                begun = time.monotonic()
                try:
                    return await original(*args, **kwargs)
                except RateLimited as exc:  # the step waits until then, doing nothing
                    split.add("github waits", begun,
                              time.monotonic() + max(0.0, exc.until - time.time()))
                    raise
                finally:
                    split.add(part, begun, time.monotonic())
            return wrapper

        GitHubClient.manage_rate_limit = timed("github waits", GitHubClient.manage_rate_limit)
        GitHubClient._request = timed("github", GitHubClient._request)
        GitHubClient.handle_rate_limit_error = timed(
            "github waits", GitHubClient.handle_rate_limit_error)

    def _wrap_providers(self) -> None:
        from sandbox.providers.local import LocalProvider

        classes: list[type] = [LocalProvider]
        try:
            from sandbox.providers.docker import DockerProvider
        except ImportError:  # no docker SDK: only the local provider is measured
            pass
        else:
            classes.append(DockerProvider)
        for cls in classes:
            for name in _PROVIDER_CALLS:
                setattr(cls, name, self._timed_call(name, getattr(cls, name)))

    def _timed_call(self, name: str, original):
        split = self

        @functools.wraps(original)
        async def wrapper(provider, sb, *args, **kwargs):
            begun = time.monotonic()
            try:
                result = await original(provider, sb, *args, **kwargs)
            finally:
                split.add("sandbox", begun, time.monotonic())
            if name == "start":
                split._started[(sb.id, result)] = time.monotonic()
            elif name == "observe" and result.state != "running":
                split._agent_ended(provider, sb, args[0] if args else kwargs["process_id"])
            return result

        return wrapper

    def _agent_ended(self, provider, sb, process_id: str) -> None:
        started = self._started.pop((sb.id, process_id), None)
        if started is None:
            return
        ended = time.monotonic()
        exit_path = _exit_path(provider, sb, process_id)
        if exit_path is not None:
            try:  # when the agent really ended, not when hangar looked
                ended = min(ended, time.monotonic() - (time.time() - exit_path.stat().st_mtime))
            except OSError:
                pass
        self.add("agent", started, ended)

    # -- the figures -------------------------------------------------------------------

    def parts(self, begun: float, ended: float) -> dict[str, float]:
        """Seconds of [begun, ended] per part (PARTS), and the total."""
        with self._lock:
            intervals = [(p, max(b, begun), min(e, ended)) for p, b, e in self._intervals
                         if e > begun and b < ended]
        edges = sorted({begun, ended, *(b for _, b, _ in intervals),
                        *(e for _, _, e in intervals)})
        out = dict.fromkeys(PARTS, 0.0)
        for left, right in itertools.pairwise(edges):
            middle = (left + right) / 2
            covering = {p for p, b, e in intervals if b <= middle < e}
            part = next((p for p in PARTS[:-1] if p in covering), "hangar")
            out[part] += right - left
        out["total"] = ended - begun
        return out


def _exit_path(provider, sb, process_id: str):
    """The host path of a local sandbox's exit file (None for other providers)."""
    workspace = getattr(provider, "_workspace", None)
    if workspace is None:
        return None
    from sandbox.provider import HANGAR_DIR, WORKSPACE

    relative = HANGAR_DIR.removeprefix(WORKSPACE).lstrip("/")
    return workspace(sb) / relative / f"{process_id}.exit"


def summarize(splits: Iterable[dict[str, float]]) -> dict[str, float]:
    """The median of each part over several measured stretches."""
    import statistics

    splits = list(splits)
    return {key: statistics.median(s[key] for s in splits) for key in (*PARTS, "total")}


def line(parts: dict[str, float]) -> str:
    """`hangar 0.42 s | github waits 3.00 s | ...` in PARTS order, then the total."""
    shown = [f"{name} {parts[name]:.2f} s" for name in PARTS]
    return " | ".join(shown) + f"  (total {parts['total']:.2f} s)"


__all__ = ["PARTS", "TimeSplit", "line", "summarize"]
