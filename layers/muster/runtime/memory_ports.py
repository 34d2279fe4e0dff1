"""In-memory adapters of the timer, queue, bus and metrics ports, for unit tests and
local runs (the store's is `muster.runtime.memory.MemoryStore`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from muster.core import LogEvent, Timer


@dataclass
class MemoryTimers:
    running: dict[tuple[str, int, str, int, str], Timer] = field(default_factory=dict)
    started: list[tuple[str, Timer]] = field(default_factory=list)
    stopped: list[tuple[str, Timer]] = field(default_factory=list)

    @staticmethod
    def name(workload: str, timer: Timer) -> tuple[str, int, str, int, str]:
        """The execution's name: a start under a name already used is a no-op."""
        return (workload, timer.attempt, timer.kind.value, timer.episode, timer.incarnation)

    def start(self, workload: str, timer: Timer) -> None:
        name = self.name(workload, timer)
        if name not in self.running and (workload, timer) not in self.started:
            self.started.append((workload, timer))
            self.running[name] = timer

    def stop(self, workload: str, timer: Timer) -> None:
        self.running.pop(self.name(workload, timer), None)
        self.stopped.append((workload, timer))


@dataclass
class MemoryMessages:
    requeues: list[tuple[str, int, float]] = field(default_factory=list)
    admission_requests: list[tuple[str, str | None]] = field(default_factory=list)
    retries: list[int] = field(default_factory=list)  # the `retry` of each admission request
    admission_delays: list[float] = field(default_factory=list)  # the `delay` of each
    deadlines: list[tuple[str, Timer, float]] = field(default_factory=list)

    def requeue(self, workload: str, count: int, delay: float) -> None:
        self.requeues.append((workload, count, delay))

    def request_admission(
        self, reason: str, workload: str | None, *, retry: int = 0, delay: float = 0.0
    ) -> None:
        self.admission_requests.append((reason, workload))
        self.retries.append(retry)
        self.admission_delays.append(delay)

    def deadline_later(self, workload: str, timer: Timer, delay: float) -> None:
        self.deadlines.append((workload, timer, delay))


@dataclass
class MemoryBus:
    events: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)

    def publish(
        self, event: LogEvent, workload: str, detail: Mapping[str, Any], event_id: str, at: float
    ) -> None:
        self.events.append((event.value, workload, dict(detail)))
        self.ids.append(event_id)

    def names(self, workload: str | None = None) -> list[str]:
        return [e for e, w, _ in self.events if workload is None or w == workload]


@dataclass
class MemoryMetrics:
    counts: dict[tuple[str, tuple[tuple[str, str], ...]], float] = field(default_factory=dict)
    samples: dict[str, list[float]] = field(default_factory=dict)

    def count(self, name: str, value: float = 1, **dimensions: str) -> None:
        key = (name, tuple(sorted(dimensions.items())))
        self.counts[key] = self.counts.get(key, 0) + value

    def seconds(self, name: str, value: float, **dimensions: str) -> None:
        self.samples.setdefault(name, []).append(value)

    def total(self, name: str, **dimensions: str) -> float:
        return sum(
            v
            for (n, dims), v in self.counts.items()
            if n == name and all((k, d) in dims for k, d in dimensions.items())
        )
