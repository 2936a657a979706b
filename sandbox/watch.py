"""Run watching: observations of the agent's process in, run states out.

Pure logic. The engine keeps one `RunWatch` per run (it is JSON-serialisable: store
`watch.model_dump(mode="json")`, restore with `RunWatch.model_validate(...)`), feeds it
each tick's `ProcessStatus`, and acts on what comes back:

    running ──exit code seen──────────────▶ exited
       │ gone twice, no exit code ────────▶ lost        (exit_code -1)
       │ past max_minutes ────────────────▶ timed_out   (caller stops the process)
       │ observing failed or hung ────────▶ lost        (caller stops the process)
       └ stop requested ──────────────────▶ cancelled   (caller stops the process)

One "gone" may be a process that finished between the exit-file check and the process
check; the second tick settles it, so a lost run is detected within two watch ticks.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel

from sandbox.provider import ProcessStatus

LOST_AFTER_GONE_TICKS = 2
NO_EXIT_CODE = -1


class RunState(StrEnum):
    RUNNING = "running"
    EXITED = "exited"
    LOST = "lost"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"


class RunWatch(BaseModel):
    started_at: float
    max_minutes: float | None = None
    state: RunState = RunState.RUNNING
    exit_code: int | None = None
    gone_ticks: int = 0
    finished_at: float | None = None
    reason: str | None = None

    @property
    def finished(self) -> bool:
        return self.state is not RunState.RUNNING

    @property
    def needs_stop(self) -> bool:
        """The caller must stop the process: hangar ended the run, or lost sight of it
        (provider.stop is idempotent: for a gone process it does nothing)."""
        return self.state in (RunState.TIMED_OUT, RunState.CANCELLED, RunState.LOST)

    def deadline(self) -> float | None:
        return None if self.max_minutes is None else self.started_at + self.max_minutes * 60

    def observe(self, status: ProcessStatus, now: float) -> RunState | None:
        """The run's new state if this observation ends it, else None."""
        if self.finished:
            return None
        if status.state == "exited":
            code = NO_EXIT_CODE if status.exit_code is None else status.exit_code
            return self._finish(RunState.EXITED, now, code, f"exited with code {code}")
        if status.state == "gone":
            self.gone_ticks += 1
            if self.gone_ticks >= LOST_AFTER_GONE_TICKS:
                return self._finish(
                    RunState.LOST,
                    now,
                    NO_EXIT_CODE,
                    f"process gone without an exit code for {self.gone_ticks} watch ticks",
                )
            return None
        self.gone_ticks = 0
        deadline = self.deadline()
        if deadline is not None and now >= deadline:
            return self._finish(
                RunState.TIMED_OUT,
                now,
                NO_EXIT_CODE,
                f"ran past max_minutes ({self.max_minutes:g})",
            )
        return None

    def fail(self, now: float, reason: str) -> RunState | None:
        """The provider could not say how the process is (a stuck or failed call): LOST
        with the reason, so one sandbox never holds its slot or the watcher."""
        if self.finished:
            return None
        return self._finish(RunState.LOST, now, NO_EXIT_CODE, reason)

    def cancel(self, now: float, reason: str = "stop requested") -> RunState | None:
        """A stop request. CANCELLED unless the run already ended."""
        if self.finished:
            return None
        return self._finish(RunState.CANCELLED, now, NO_EXIT_CODE, reason)

    def _finish(self, state: RunState, now: float, code: int, reason: str) -> RunState:
        self.state = state
        self.exit_code = code
        self.finished_at = now
        self.reason = reason
        return state
