"""A few Prometheus metrics, rendered in the text exposition format.

hangar needs a handful of counters, one histogram and the model's usage as gauges; a
small registry keeps the dependency list to the chosen parts.
"""

from __future__ import annotations

import bisect
import threading
from collections import defaultdict

LabelKey = tuple[tuple[str, str], ...]


class Counter:
    def __init__(self, name: str, help_text: str):
        self.name, self.help = name, help_text
        self._values: dict[LabelKey, float] = defaultdict(float)
        self._lock = threading.Lock()

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        with self._lock:
            self._values[tuple(sorted(labels.items()))] += amount

    def value(self, **labels: str) -> float:
        return self._values.get(tuple(sorted(labels.items())), 0.0)

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} counter"]
        values = dict(self._values) or {(): 0.0}
        lines += [f"{self.name}{_labels(k)} {v:g}" for k, v in sorted(values.items())]
        return lines


class Gauge:
    """Values set as a whole each time they are read (the model's usage per credential)."""

    def __init__(self, name: str, help_text: str):
        self.name, self.help = name, help_text
        self._values: dict[LabelKey, float] = {}
        self._lock = threading.Lock()

    def replace(self, values: dict[LabelKey, float]) -> None:
        with self._lock:
            self._values = dict(values)

    def value(self, **labels: str) -> float | None:
        return self._values.get(tuple(sorted(labels.items())))

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} gauge"]
        lines += [f"{self.name}{_labels(k)} {v:g}" for k, v in sorted(self._values.items())]
        return lines


def labels(**values: str) -> LabelKey:
    return tuple(sorted(values.items()))


class Histogram:
    def __init__(self, name: str, help_text: str, buckets: tuple[float, ...]):
        self.name, self.help = name, help_text
        self.buckets = tuple(sorted(buckets))
        self._counts = [0] * (len(self.buckets) + 1)
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        with self._lock:
            self._counts[bisect.bisect_left(self.buckets, value)] += 1
            self._sum += value

    def replace(self, values: list[float]) -> None:
        """Set from every value there is (read from rows when asked for, not kept twice)."""
        counts = [0] * (len(self.buckets) + 1)
        for value in values:
            counts[bisect.bisect_left(self.buckets, value)] += 1
        with self._lock:
            self._counts, self._sum = counts, float(sum(values))

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        running = 0
        for bound, count in zip(self.buckets, self._counts, strict=False):
            running += count
            lines.append(f'{self.name}_bucket{{le="{bound:g}"}} {running}')
        running += self._counts[-1]
        lines.append(f'{self.name}_bucket{{le="+Inf"}} {running}')
        lines.append(f"{self.name}_sum {self._sum:g}")
        lines.append(f"{self.name}_count {running}")
        return lines


class Metrics:
    """Everything /metrics shows; one instance per application."""

    def __init__(self) -> None:
        self.deliveries = Counter(
            "hangar_webhook_deliveries_total", "Webhook deliveries by result."
        )
        self.handler_errors = Counter(
            "hangar_handler_errors_total", "Handler exceptions while dispatching deliveries."
        )
        self.ack_latency = Histogram(
            "hangar_webhook_ack_seconds",
            "Time from receiving a webhook to answering it.",
            (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
        )
        self.github_requests = Counter(
            "hangar_github_requests_total", "REST calls to GitHub by outcome."
        )
        self.engine_steps = Counter("hangar_engine_steps_total", "Engine steps by kind.")
        self.engine_step_errors = Counter(
            "hangar_engine_step_errors_total", "Engine steps that raised, by kind."
        )
        self.engine_looks = Counter(
            "hangar_engine_looks_total", "Times the engine looked over its rows' due times."
        )
        self.model_usage = Gauge(
            "hangar_model_usage_ratio",
            "The model's last reported usage per credential and window, 0 to 1 (windows "
            "whose reset has passed are left out).",
        )
        self.model_paused = Gauge(
            "hangar_model_paused",
            "1 while new agents on a credential wait for its usage to reset, else 0.",
        )
        self.sandbox_gate_refusals = Counter(
            "hangar_sandbox_gate_refusals_total",
            "Connections the sandbox gate refused or closed, by reason (gate_full, "
            "per_sandbox, header_timeout).")
        self.accept_errors = Counter(
            "hangar_accept_errors_total",
            "Connections the event loop could not accept (out of descriptors).")

        # What an operator alerts on, read from hangar's rows when /metrics is asked for.
        self.agents = Gauge(
            "hangar_agents",
            "Agent turns running or queued now, per model credential (state: running, "
            "queued).",
        )
        self.agent_slots = Gauge(
            "hangar_agent_slots", "Agents hangar runs at once per model credential.")
        self.jobs = Gauge("hangar_jobs", "Jobs by state (active, done, failed, cancelled).")
        self.turn_endings = Gauge(
            "hangar_turn_endings",
            "Finished agent turns by how they ended (the reason code of the status comment).",
        )
        self.verifications = Gauge(
            "hangar_verifications",
            "Verifications by result (passed, failed, not_run: could not run).",
        )
        self.land_requests = Gauge("hangar_land_requests", "Land requests by state.")
        self.land_seconds = Histogram(
            "hangar_land_seconds",
            "From a land request to its merge, for the landed ones.",
            (60, 300, 900, 1800, 3600, 3 * 3600, 12 * 3600, 24 * 3600, 3 * 24 * 3600),
        )

    def render(self) -> str:
        parts: list[Counter | Gauge | Histogram] = [
            self.deliveries,
            self.handler_errors,
            self.ack_latency,
            self.github_requests,
            self.engine_steps,
            self.engine_step_errors,
            self.engine_looks,
            self.model_usage,
            self.model_paused,
            self.agents,
            self.agent_slots,
            self.jobs,
            self.turn_endings,
            self.verifications,
            self.land_requests,
            self.land_seconds,
            self.sandbox_gate_refusals,
            self.accept_errors,
        ]
        return "\n".join(line for p in parts for line in p.render()) + "\n"


def _labels(key: LabelKey) -> str:
    if not key:
        return ""
    escaped = (f'{k}="{v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
               for k, v in key)
    return "{" + ",".join(escaped) + "}"
