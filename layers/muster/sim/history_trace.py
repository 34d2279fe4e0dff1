"""A running Muster's history as a job trace the simulator replays.

Every workload leaves a history in the state table (Submitted, Admitted,
PodsReady, Evicted, Requeued, Deactivated, Finished, with their times and
details). `trace_rows` turns the histories of the workloads submitted since a
moment into one row per workload: when it was submitted, its gang and GPUs, the
startup and run times that were observed, how it ended, and what the diagnosis
of its last eviction knew (its class, e.g. `WorkloadFault`, and the pods' reason,
e.g. `ImagePullBackOff`), so a job that failed on its own is replayed failing the
same way and `workloadFaults` can be tuned on it. `write_trace` writes
them as CSV (the format docs/simulator.md documents under "Muster traces");
`muster.sim.traces` reads it back, so an administrator tunes on their own
cluster's last week.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

TRACE_COLUMNS = (
    "workload",
    "queue",
    "submitted",
    "gangSize",
    "gpus",
    "priority",
    "startupSeconds",
    "runSeconds",
    "outcome",
    "attempts",
    "evictions",
    "failureClass",
    "failureReason",
)
OUTCOMES = ("Succeeded", "Failed", "Deleted", "Deactivated", "Running", "Pending")


@dataclass(frozen=True, slots=True)
class TraceRow:
    """One workload of the trace; None where it was never observed."""

    workload: str
    queue: str
    submitted: float  # epoch seconds
    gang_size: int
    gpus: int
    priority: int
    startup_seconds: float | None  # admission to all pods Ready, of the attempt that started
    run_seconds: float | None  # PodsReady to Finished (or to the export, while Running)
    outcome: str
    attempts: int
    evictions: int
    # The diagnosis of its last eviction: the class its not-ready pods shared
    # (`WorkloadFault`, `Capacity`, `Starting`, `NodeFault`, `Mixed`) and their reason.
    failure_class: str | None = None
    failure_reason: str | None = None


def trace_rows(
    histories: Mapping[str, Sequence[Mapping[str, Any]]], since: float, now: float
) -> list[TraceRow]:
    """Rows for the workloads submitted at or after `since`, in submission order.

    `histories` maps a workload to its history entries (`event`, `at`, `detail`),
    in any order; entries are ordered by time (then by their `version`, and their
    place in the list) before they are read.
    """
    rows = []
    for key, entries in histories.items():
        row = _row(key, _ordered(entries), now)
        if row is not None and row.submitted >= since:
            rows.append(row)
    rows.sort(key=lambda r: (r.submitted, r.workload))
    return rows


def _ordered(entries: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    indexed = list(enumerate(entries))
    indexed.sort(key=lambda pair: (float(pair[1]["at"]), int(pair[1].get("version", 0)), pair[0]))
    return [e for _, e in indexed]


def _row(key: str, entries: Iterable[Mapping[str, Any]], now: float) -> TraceRow | None:
    replay = _Replay()
    for e in entries:
        replay.read(e["event"], float(e["at"]), e.get("detail") or {})
    return replay.row(key, now)


@dataclass(slots=True)
class _Replay:
    """One workload's history read entry by entry, into what its row reports."""

    submitted: Mapping[str, Any] | None = None
    submitted_at: float = 0.0
    admitted_at: float | None = None
    ready_at: float | None = None
    startup: float | None = None
    run: float | None = None
    outcome: str = "Pending"
    attempts: int = 0
    evictions: int = 0
    failure_class: str | None = None
    failure_reason: str | None = None

    def read(self, event: str, at: float, detail: Mapping[str, Any]) -> None:
        reader = _READERS.get(event)
        if reader is not None:
            reader(self, at, detail)

    def _submitted(self, at: float, detail: Mapping[str, Any]) -> None:
        if self.submitted is None:
            self.submitted, self.submitted_at = detail, at

    def _admitted(self, at: float, detail: Mapping[str, Any]) -> None:
        self.attempts += 1
        self.admitted_at, self.ready_at = at, None
        self.outcome = "Running"

    def _pods_ready(self, at: float, detail: Mapping[str, Any]) -> None:
        if detail.get("reason", "Started") != "Started":
            return
        self.ready_at = at
        seconds = detail.get("secondsSinceAdmission")
        if seconds is None and self.admitted_at is not None:
            seconds = at - self.admitted_at
        if seconds is not None:
            self.startup = float(seconds)

    def _evicted(self, at: float, detail: Mapping[str, Any]) -> None:
        # A dry run's diagnosis is as good as an enforced one's: it is kept either way.
        found = diagnosis_of(detail)
        if found is not None:
            self.failure_class, self.failure_reason = found
        if not detail.get("dryRun"):
            self.evictions += 1
            self.ready_at = None
            self.outcome = "Pending"

    def _deactivated(self, at: float, detail: Mapping[str, Any]) -> None:
        self.outcome = "Deactivated"

    def _reactivated(self, at: float, detail: Mapping[str, Any]) -> None:
        self.outcome = "Pending"

    def _finished(self, at: float, detail: Mapping[str, Any]) -> None:
        self.outcome = str(detail.get("reason") or "Succeeded")
        if self.ready_at is not None:
            self.run = at - self.ready_at

    def row(self, key: str, now: float) -> TraceRow | None:
        submitted, outcome, run = self.submitted, self.outcome, self.run
        if submitted is None:
            return None  # submitted before the history we read (or its entries expired)
        if outcome == "Running" and self.ready_at is not None:
            run = now - self.ready_at  # still running: what it has run so far
        elif outcome == "Running":
            outcome = "Pending"  # admitted, not Ready yet
        return TraceRow(
            workload=key,
            queue=str(submitted.get("queue") or "default"),
            submitted=self.submitted_at,
            gang_size=int(submitted.get("gangSize") or 1),
            gpus=int(submitted.get("gpus") or 0),
            priority=int(submitted.get("priority") or 0),
            startup_seconds=self.startup,
            run_seconds=run,
            outcome=outcome,
            attempts=self.attempts,
            evictions=self.evictions,
            failure_class=self.failure_class,
            failure_reason=self.failure_reason,
        )


def diagnosis_of(detail: Mapping[str, Any]) -> tuple[str, str | None] | None:
    """(class, reason) of an eviction's diagnosis: the class of its not-ready pods and
    the reason most of them gave (of those failing on their own, when some are)."""
    found = detail.get("diagnosis")
    if not isinstance(found, Mapping) or not found.get("class"):
        return None
    cls = str(found["class"])
    pods = [p for p in found.get("pods") or [] if isinstance(p, Mapping)]
    faults = [p for p in pods if p.get("class") == "WorkloadFault"]
    counts: dict[str, int] = {}
    for p in faults or pods:
        reason = p.get("reason")
        if reason:
            counts[str(reason)] = counts.get(str(reason), 0) + 1
    reason = max(counts, key=lambda r: counts[r]) if counts else None
    return cls, reason


_READERS: dict[str, Callable[[_Replay, float, Mapping[str, Any]], None]] = {
    "Submitted": _Replay._submitted,
    "Admitted": _Replay._admitted,
    "PodsReady": _Replay._pods_ready,
    "Evicted": _Replay._evicted,
    "Deactivated": _Replay._deactivated,
    "Reactivated": _Replay._reactivated,
    "Finished": _Replay._finished,
}


def write_trace(rows: Iterable[TraceRow], handle: TextIO) -> int:
    """The rows as CSV with `TRACE_COLUMNS`; returns how many were written."""
    writer = csv.writer(handle, lineterminator="\n")
    writer.writerow(TRACE_COLUMNS)
    n = 0
    for r in rows:
        writer.writerow(
            [
                r.workload,
                r.queue,
                format_time(r.submitted),
                r.gang_size,
                r.gpus,
                r.priority,
                _seconds(r.startup_seconds),
                _seconds(r.run_seconds),
                r.outcome,
                r.attempts,
                r.evictions,
                r.failure_class or "",
                r.failure_reason or "",
            ]
        )
        n += 1
    return n


def format_time(epoch: float) -> str:
    """ISO 8601 in UTC with milliseconds, e.g. 2026-12-01T09:30:00.250Z."""
    stamp = datetime.fromtimestamp(epoch, UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"


def parse_time(text: str) -> float:
    """The inverse of `format_time` (any ISO 8601 time; a bare one is read as UTC)."""
    stamp = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return stamp.timestamp()


def _seconds(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}".rstrip("0").rstrip(".")


def is_muster_trace(path: Path) -> bool:
    """Does the file start with the header `write_trace` writes?"""
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            header = next(csv.reader(handle), [])
    except OSError:
        return False
    return "gangSize" in header and "submitted" in header
