"""The model's usage in words: what a held run waits for, a running agent's reading, a
turn's cost, a fan-out's warnings.

The facts come from the credential's ledger (proxy/usage.py) and the pause rule
(app/runs/pause.py); a window's name is the vendor's, shown as data when hangar has no
word for it.
"""

from __future__ import annotations

import time

from app.render.reasons import Sentences, Why, word
from app.render.text import code_span

# The vendors' windows: a subscription's 5-hour and 7-day ones, an API key's per-minute
# limits, and a refusal that named no window (a 429).
WINDOWS = {
    "5h": "5-hour", "7d": "7-day", "7d_oi": "7-day (overage included)",
    "7d_opus": "7-day Opus", "7d_sonnet": "7-day Sonnet",
    "requests": "per-minute request", "tokens": "per-minute token",
    "input-tokens": "per-minute input-token", "output-tokens": "per-minute output-token",
}


def window_name(window: str) -> str:
    return WINDOWS.get(window) or code_span(window)


def when(at: float, now: float | None = None) -> str:
    """'Tue 09:12 UTC'; a time more than six days away gets its date too."""
    now = time.time() if now is None else now
    pattern = "%a %H:%M UTC" if at - now < 6 * 86400 else "%a %d %b %H:%M UTC"
    return time.strftime(pattern, time.gmtime(at))


def percent(utilization: float) -> str:
    return f"{utilization * 100:.0f}%"


def _full(window: str, pct: float, threshold: float, until: float | None, source: str) -> str:
    said = f"the model's {window_name(window)} usage is {pct:.0f}%; hangar pauses new agents at "
    if until is not None:
        return f"{said}{threshold:g}%; resets {when(until)}, or `/hangar resume`"
    return (f"{said}{threshold:g}%; the model did not say when it resets, so a reading below "
            f"{threshold:g}% or `/hangar resume` starts it")


def _refused(window: str, pct: float, threshold: float, until: float | None,
             source: str) -> str:
    said = ("the model refused requests (429)" if window == "429"
            else f"the model's {window_name(window)} limit is used up")
    if until is not None:
        return f"{said}; it takes requests again {when(until)}, or `/hangar resume`"
    return f"{said} and did not say until when; `/hangar resume` starts it"


# A held run's wait, by `app.runs.PauseWhy` code.
PAUSES: Sentences = {"model_window_full": _full, "model_refused": _refused}


def pause_line(why: Why) -> str:
    """A held run's line: what it waits for, the figure, the threshold, the reset and how
    to resume."""
    return f"⏸️ waiting for the model: {word(PAUSES, why)}"


def resumed(why: Why) -> str:
    """What a resume lifted, for its reply."""
    facts = why.facts
    if str(why.code) == "model_refused":
        said = ("the model's refusal (429)" if facts["window"] == "429"
                else f"the model's used-up {window_name(facts['window'])} limit")
    else:
        said = (f"the model's {window_name(facts['window'])} usage was "
                f"{facts['pct']:.0f}% (threshold {facts['threshold']:g}%)")
    return said + (f", until it resets {when(facts['until'])}" if facts.get("until") else "")


def reading_note(window: str, utilization: float) -> str:
    """The latest reading beside a running agent."""
    return f"the model's {window_name(window)} usage: {percent(utilization)}"


def cost_text(cost_usd: float | None, input_tokens: int | None,
              output_tokens: int | None) -> str | None:
    """A turn's own cost; 'cost unknown' with its tokens where the price is not known."""
    if cost_usd is not None:
        return f"${cost_usd:.2f}"
    if input_tokens is None and output_tokens is None:
        return None
    return f"cost unknown ({input_tokens or 0:,} tokens in, {output_tokens or 0:,} out)"


# A fan-out's reply, by `app.fanout.FanoutWarning` code.
FANOUT_WARNINGS: Sentences = {
    "fanout_over_cap": lambda n, cap: (
        f"{n} attempts and hangar runs at most {cap} agents at once per model credential: "
        f"{n - cap} of them wait in the queue (HANGAR_MAX_CONCURRENT_AGENTS)."),
    "fanout_usage_high": lambda n, window, pct, warn_at, threshold: (
        f"the model's {window_name(window)} usage is already {pct:.0f}% (above {warn_at:g}%): "
        f"{n} attempts cost about {n} times one, and hangar pauses new agents at "
        f"{threshold:g}%."),
}


def fanout_warnings(whys: list[Why]) -> str:
    lines = [f"- ⚠️ {word(FANOUT_WARNINGS, why)}" for why in whys]
    return "**Before these attempts start:**\n" + "\n".join(lines)
