"""A ceiling on sandboxes: every sandbox this hangar holds, across providers, against
`HANGAR_MAX_SANDBOXES` (the fleet cap).

Agents, verifications and environment builds each reserve their sandbox before they make
it (`reserve`, with no await between the look and the reservation, so two steps never
both take the last place); one that finds the fleet full waits where it is and is woken
when a sandbox ends. A reservation becomes the sandbox when it is made (the providers
hangar uses are wrapped in `CountedProvider`), and one never made lapses after a while,
so a step cut short leaks nothing. Other sandboxes (a push of held commits) are counted
but never wait: they are short and rare.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Callable, Iterable
from typing import Any

from sandbox.envspec import EnvSpec
from sandbox.exits import ExitWaits
from sandbox.provider import (
    DEFAULT_LOG_PATH,
    OUTPUT_TAIL_BYTES,
    REPO_DIR,
    WORKSPACE,
    ExecResult,
    OutputCallback,
    ProcessStatus,
    Provider,
    Sandbox,
)

# A reservation not turned into a sandbox by then is forgotten (its step was cut short).
RESERVATION_S = 600.0


def fleet_key(labels: dict[str, str]) -> str | None:
    """What a sandbox is reserved under, from its labels: a run's agent or verify
    sandbox, or a build's."""
    if labels.get("hangar.build"):
        return f"{labels['hangar.build']}:build"
    if labels.get("hangar.run") and labels.get("hangar.role") in ("agent", "verify"):
        return f"{labels['hangar.run']}:{labels['hangar.role']}"
    return None


class Fleet:
    def __init__(self, cap: int, freed: Callable[[list[str]], None] = lambda _rows: None):
        self.cap = cap
        self.freed = freed  # told which rows wait, when a place comes free
        self.live: dict[str, str | None] = {}  # sandbox id -> its key
        self._reserved: dict[str, float] = {}  # key -> when
        self._waiting: dict[str, None] = {}  # row ids waiting for a place, in order

    def in_use(self) -> int:
        now = time.monotonic()
        self._reserved = {k: at for k, at in self._reserved.items()
                          if now - at < RESERVATION_S}
        return len(self.live) + len(self._reserved)

    def reserve(self, key: str, *, waiter: str) -> bool:
        """Take a place for `key` (a sandbox about to be made); False when the fleet is
        full, and `waiter` (a row id) is woken when a place comes free."""
        if key in self._reserved or key in self.live.values():
            return True
        if self.in_use() >= self.cap:
            self._waiting[waiter] = None
            return False
        self._reserved[key] = time.monotonic()
        self._waiting.pop(waiter, None)
        return True

    def made(self, sandbox_id: str, key: str | None) -> None:
        if key is not None:
            self._reserved.pop(key, None)
        self.live[sandbox_id] = key

    def ended(self, sandbox_id: str) -> None:
        if self.live.pop(sandbox_id, "") == "":
            return
        waiting, self._waiting = list(self._waiting), {}
        if waiting:
            self.freed(waiting)

    def already(self, sandboxes: Iterable[Sandbox]) -> None:
        """Sandboxes this hangar held before it started (a restart): they count."""
        for sb in sandboxes:
            self.live.setdefault(sb.id, fleet_key(sb.labels))


class CountedProvider(Provider):
    """A provider whose sandboxes the fleet counts; everything else is the provider's.

    It is a `Provider` (each method hands on to the provider it counts); what only one
    provider has (docker's engine client, kubernetes' build registry) is read through to it.
    """

    def __init__(self, provider: Provider, fleet: Fleet):
        self._provider = provider
        self._fleet = fleet

    def __getattr__(self, name: str) -> Any:  # `name` too: the provider's own
        return getattr(self._provider, name)

    async def create(self, spec: EnvSpec, labels: dict[str, str]) -> Sandbox:
        sb = await self._provider.create(spec, labels)
        self._fleet.made(sb.id, fleet_key(labels))
        return sb

    async def destroy(self, sb: Sandbox) -> None:
        await self._provider.destroy(sb)
        self._fleet.ended(sb.id)

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
        return await self._provider.run(sb, argv, timeout=timeout, env=env, cwd=cwd,
                                        on_output=on_output, offline=offline)

    async def start(
        self,
        sb: Sandbox,
        argv: list[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str = REPO_DIR,
        log_path: str = DEFAULT_LOG_PATH,
    ) -> str:
        return await self._provider.start(sb, argv, env=env, cwd=cwd, log_path=log_path)

    async def observe(self, sb: Sandbox, process_id: str) -> ProcessStatus:
        return await self._provider.observe(sb, process_id)

    async def stop(self, sb: Sandbox, process_id: str, grace_s: float = 5) -> None:
        await self._provider.stop(sb, process_id, grace_s)

    async def copy_in(self, sb: Sandbox, files: dict[str, bytes], mode: int = 0o644) -> None:
        await self._provider.copy_in(sb, files, mode)

    async def copy_out(self, sb: Sandbox, path: str, max_bytes: int = OUTPUT_TAIL_BYTES) -> bytes:
        return await self._provider.copy_out(sb, path, max_bytes)

    async def list(self, labels: dict[str, str]) -> builtins.list[Sandbox]:
        return await self._provider.list(labels)

    async def end_abandoned(self) -> builtins.list[str]:
        return await self._provider.end_abandoned()

    async def close(self) -> None:
        await self._provider.close()


class Providers:
    """The providers hangar uses, by name, each made once (by `make`) and counted: every
    sandbox made or ended through one is the fleet's. `exits` waits for the ends of the
    detached processes started in them (sandbox.exits), until `close`."""

    def __init__(self, make: Callable[[str], Provider], fleet: Fleet):
        self._make = make
        self._fleet = fleet
        self._made: dict[str, Provider] = {}
        self.exits = ExitWaits()

    async def close(self) -> None:
        """Every provider closed (what it started ahead ended), even when one's close
        fails; the first failure is raised after."""
        failed: Exception | None = None
        for close in (self.exits.close, *(p.close for p in self._made.values())):
            try:
                await close()
            except Exception as exc:
                failed = failed or exc
        if failed is not None:
            raise failed

    def __getitem__(self, name: str) -> Provider:
        if name not in self._made:
            self._made[name] = CountedProvider(self._make(name), self._fleet)
        return self._made[name]
