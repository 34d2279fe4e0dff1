"""A run's summary: finished, evicted and deactivated workloads, GPU-hours used,
wasted and idle, queue delays and completion times (docs/simulator.md)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from muster.sim.blocks import BlockCluster
from muster.sim.kube import SimulatedCluster
from muster.sim.scenario import Scenario
from muster.sim.topology import spans_blocks


@dataclass(slots=True)
class Tracking:
    """When one workload was submitted, first PodsReady, finished (for the summary)."""

    submitted: float
    first_ready: float | None = None
    finished: float | None = None
    deactivated: bool = False
    deactivated_reason: str | None = None


def summarize(
    sc: Scenario,
    kube: SimulatedCluster,
    tracking: Mapping[str, Tracking],
    end: float,
    evictions: int,
    requeues: int,
    delivered: int,
    outcomes: Mapping[str, int],
    wall: float,
) -> dict[str, Any]:
    """The figures `muster simulate` reports for one run (docs/simulator.md, "Outputs")."""
    finished = [t for t in tracking.values() if t.finished is not None]
    deactivated = sum(1 for t in tracking.values() if t.deactivated)
    useful = kube.useful_gpu_seconds / 3600.0
    wasted = (kube.held_gpu_seconds - kube.useful_gpu_seconds) / 3600.0
    # One window for every policy (the scenario's horizon): GPU-hours used over
    # GPU-hours available in it. Each run's own length would favour a policy that
    # finishes later, and differ between the runs being compared.
    window = sc.until
    capacity = kube.total_gpus * window / 3600.0
    delays = [t.first_ready - t.submitted for t in tracking.values() if t.first_ready is not None]
    jcts = [t.finished - t.submitted for t in finished if t.finished is not None]
    return {
        "scenario": sc.name,
        "seed": sc.seed,
        "workloads": len(sc.workloads),
        "finished": len(finished),
        "deactivated": deactivated,
        "unfinished": len(sc.workloads) - len(finished) - deactivated,
        "evictions": evictions,
        "requeues": requeues,
        "usefulGpuHours": round(useful, 3),
        "wastedGpuHours": round(wasted, 3),
        "idleGpuHours": round(capacity - useful - wasted, 3),
        "utilization": round(useful / capacity, 4) if capacity > 0 else 0.0,
        "windowSeconds": num(window),
        "queueDelaySeconds": _percentiles(delays),
        "jctSeconds": _percentiles(jcts),
        "makespanSeconds": num(end),
        "simulatedEvents": delivered,
        "outcomes": dict(sorted(outcomes.items())),
        "wallSeconds": round(wall, 3),
    }


def failure_summary(
    sc: Scenario,
    kube: SimulatedCluster,
    tracking: Mapping[str, Tracking],
    by_class: Mapping[str, int],
) -> dict[str, Any]:
    """Evictions by class and wasted GPU-hours by failure mode, for scenarios that model them."""
    healthy = {w.name for w in sc.workloads if not w.never_ready}
    wasted = {
        (category or "healthy"): round((held - kube.useful_by.get(category, 0.0)) / 3600.0, 3)
        for category, held in sorted(kube.held_by.items())
    }
    reasons: dict[str, int] = {}
    for t in tracking.values():
        if t.deactivated:
            key = t.deactivated_reason or "unknown"
            reasons[key] = reasons.get(key, 0) + 1
    return {
        "evictionsByClass": dict(sorted(by_class.items())),
        "wastedGpuHoursByFailure": wasted,
        "deactivatedHealthy": sum(
            1 for name, t in tracking.items() if t.deactivated and name in healthy
        ),
        "deactivatedByReason": dict(sorted(reasons.items())),
    }


def topology_summary(
    sc: Scenario, kube: BlockCluster, tracking: Mapping[str, Tracking]
) -> dict[str, Any]:
    """For a scenario with network blocks: of the multi-node gangs (more GPUs than one
    node has), how many asked for a topology and how many started, the share of their
    whole releases whose pods the cluster bound inside one block at each level, and
    their queue delay."""
    multi = {w.name for w in sc.workloads if w.gpus > sc.gpus_per_node}
    delays = [
        t.first_ready - t.submitted
        for name, t in tracking.items()
        if name in multi and t.first_ready is not None
    ]
    return {
        "blocks": {level: size for level, size in sc.topology},
        "multiNodeGangs": len(multi),
        "asked": sum(1 for w in sc.workloads if w.topology and w.name in multi),
        "started": len(delays),  # reached PodsReady: the queue delay is theirs
        **spans_blocks(kube.spans, sc.topology, multi),
        "multiNodeQueueDelaySeconds": _percentiles(delays),
    }


def _percentiles(values: list[float]) -> dict[str, float | None]:
    """Nearest-rank p50, p95 and max (None when no workload got there)."""
    if not values:
        return {"p50": None, "p95": None, "max": None}
    ordered = sorted(values)

    def rank(q: float) -> float:
        return num(ordered[max(0, math.ceil(q * len(ordered)) - 1)])

    return {"p50": rank(0.5), "p95": rank(0.95), "max": num(ordered[-1])}


def num(value: float) -> float | int:
    """Seconds as JSON-friendly numbers: whole ones without a fraction."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return round(value, 3)
