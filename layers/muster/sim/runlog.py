"""The run's event log, one entry per event the core publishes, and the counts
its summary is made of."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from muster.core import LogEvent, Outcome, Publish, StepResult
from muster.sim.kube import node_line
from muster.sim.summary import Tracking, num

# Event-log fields copied from the core's Publish details.
_LOG_FIELDS = ("attempt", "reason", "cause", "count", "requeueAt", "readyPods", "gangSize", "node")
_EVENT_NAMES = {e: e.value for e in LogEvent}
# The log events the summary counts, looked up once: reading a member off its enum
# class costs more than the rest of a log entry.
_EVICTED, _REQUEUED, _PODS_READY, _DEACTIVATED, _FINISHED = (
    LogEvent.EVICTED,
    LogEvent.REQUEUED,
    LogEvent.PODS_READY,
    LogEvent.DEACTIVATED,
    LogEvent.FINISHED,
)


class RunLog:
    """The run's event log, and the counts its summary is made of.

    With `keep` off the log's entries are not made at all, only the counts (a run
    whose caller reads the summary alone: a benchmark, a tuner's run); `events`
    stays empty.
    """

    def __init__(self, workloads: int, failures: bool = False, *, keep: bool = True) -> None:
        self.events: list[dict[str, Any]] = []
        self.keep = keep
        # Only when the scenario models failure modes: each eviction's class in the
        # log, and evictions by class for the summary (otherwise the log is unchanged).
        self.failures = failures
        self.by_class: dict[str, int] = {}
        self.tracking: dict[str, Tracking] = {}
        self.outcomes: dict[Outcome, int] = dict.fromkeys(Outcome, 0)  # unseen ones stay 0
        self.delivered = 0  # events the core decided on
        self.evictions = 0
        self.requeues = 0
        self.open_workloads = workloads  # neither finished nor deactivated
        self._instant = math.nan  # the last instant logged, and its "t" as logged
        self._t: float | int = 0
        # The log fields (in `_LOG_FIELDS` order) of each shape of detail seen: an
        # event's details have one of a few shapes, so each is worked out once.
        self._fields: dict[tuple[str, ...], tuple[str, ...]] = {}

    def submitted(self, workload: str, now: float) -> None:
        self.tracking[workload] = Tracking(now)

    def decided(self, step: StepResult) -> None:
        """Count what became of each event the core decided on in `step`."""
        outcomes = self.outcomes
        for _, outcome, _ in step.outcomes:
            outcomes[outcome] += 1

    def outcome_counts(self) -> dict[str, int]:
        """Events by what became of them (only the outcomes that happened)."""
        return {outcome.value: n for outcome, n in self.outcomes.items() if n}

    def node_changed(self, now: float, node: str, *, failed: bool) -> None:
        """A node fault (or its repair) as a line of its own, before what it causes."""
        if self.keep:
            self.events.append(node_line(num(now), node, failed=failed))

    def published(self, effect: Publish, now: float) -> None:
        """One event-log entry (when kept), and what it means for the summary."""
        name, workload, detail = effect.event, effect.workload, effect.detail
        entry = self._entry(effect, now) if self.keep else None
        if name is _EVICTED:
            self.evictions += 1
            if self.failures:
                label = eviction_class(detail)
                if entry is not None:
                    entry["class"] = label
                if not detail.get("dryRun"):
                    self.by_class[label] = self.by_class.get(label, 0) + 1
        elif name is _REQUEUED:
            self.requeues += 1
        elif name is _PODS_READY:
            track = self.tracking[workload]
            if track.first_ready is None:
                track.first_ready = now
        elif name is _DEACTIVATED:
            track = self.tracking[workload]
            track.deactivated = True
            track.deactivated_reason = detail.get("reason")
            self.open_workloads -= 1
        elif name is _FINISHED:
            self.tracking[workload].finished = now
            self.open_workloads -= 1

    def _entry(self, effect: Publish, now: float) -> dict[str, Any]:
        """The log entry of `effect`, appended to the log."""
        if now != self._instant:
            self._instant, self._t = now, num(now)
        detail = effect.detail
        entry: dict[str, Any] = {
            "t": self._t,
            "workload": effect.workload,
            "event": _EVENT_NAMES[effect.event],
        }
        shape = tuple(detail)
        fields = self._fields.get(shape)
        if fields is None:
            fields = self._fields[shape] = tuple(k for k in _LOG_FIELDS if k in detail)
        for key in fields:
            value = detail[key]
            if value is not None:
                entry[key] = num(value) if type(value) is float else value
        self.events.append(entry)
        return entry


def eviction_class(detail: Mapping[str, Any]) -> str:
    """The diagnosis of an eviction's not-ready pods, in one word (`NodeFault` for a
    node being replaced, which is decided before any pod is looked at)."""
    if detail.get("reason") == "NodeFailures":
        return "NodeFault"
    found = detail.get("diagnosis")
    return str(found.get("class")) if isinstance(found, Mapping) else "None"
