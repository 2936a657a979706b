"""When a model credential's agents wait: the pause, a pure rule on its usage readings.

At or above `pause_at_pct` in any window (or refused by the model: a 429, a window the
vendor calls rejected), no new agent starts on that credential. The pause lasts until
the window's reset; with no reset known, until a fresh reading below the threshold; or
until a person resumes it. Where several windows hold (a 429's retry-after in a second,
the 7-day window at 91% until Tuesday), the latest reset holds. A reading whose reset has
passed is over. A resume lifts the windows that held when it was given, each until its
reset; a refusal by the model after it pauses again. Verification needs no model and is
never paused (app/runs/queue.py asks only for agent runs).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from app.render.reasons import Why
from proxy.usage import Reading, Resume

# Past this a fan-out's reply warns that its attempts may use up the credential.
FANOUT_WARN_PCT = 70.0


class PauseWhy(StrEnum):
    """What a held run waits for (worded by render.usage)."""

    WINDOW_FULL = "model_window_full"  # a window at or above the threshold
    REFUSED = "model_refused"  # the model refused requests (429, or a window rejected)


@dataclass(frozen=True)
class Pause:
    credential: str
    reading: Reading  # the window that holds longest: the one the sentence names
    threshold_pct: float
    until: float | None  # the latest reset of the holding windows; None: not known
    holding: dict[str, float | None]  # every holding window and its reset

    @property
    def why(self) -> Why:
        code = PauseWhy.REFUSED if self.reading.refused else PauseWhy.WINDOW_FULL
        return Why(code, window=self.reading.window, pct=self.reading.utilization * 100,
                   threshold=self.threshold_pct, until=self.until, source=self.reading.source)


def holds(reading: Reading, threshold_pct: float, now: float) -> bool:
    """Whether this reading alone keeps new agents from starting."""
    if reading.reset_at is not None and reading.reset_at <= now:
        return False  # its window has reset since
    return reading.refused or reading.utilization * 100 >= threshold_pct - 1e-9


def pause_of(credential: str, readings: list[Reading], resume: Resume | None,
             threshold_pct: float, now: float) -> Pause | None:
    holding = [r for r in readings if holds(r, threshold_pct, now)
               and not _lifted(r, resume, now)]
    if not holding:
        return None
    unknown = [r for r in holding if r.reset_at is None]
    binding = (max(unknown, key=lambda r: r.utilization) if unknown
               else max(holding, key=lambda r: (r.reset_at, r.utilization)))
    return Pause(credential, binding, threshold_pct,
                 None if unknown else binding.reset_at,
                 {r.window: r.reset_at for r in holding})


def _lifted(reading: Reading, resume: Resume | None, now: float) -> bool:
    """A person's resume lifts a window that held when it was given, until its reset,
    unless the model refused again since."""
    if resume is None or reading.window not in resume.windows:
        return False
    until = resume.windows[reading.window]
    if until is not None and until <= now:
        return False
    return not (reading.refused and reading.at > resume.at)


def highest(readings: list[Reading], now: float) -> Reading | None:
    """The most used window whose reset has not passed: what a fan-out's warning names."""
    live = [r for r in readings if r.reset_at is None or r.reset_at > now]
    return max(live, key=lambda r: r.utilization) if live else None
