"""Read-only views for operators: `describe` one workload, `status` of the cluster."""

from __future__ import annotations

from typing import Any

from muster.core import Phase
from muster.runtime.ports import WorkloadStore


def describe(store: WorkloadStore, key: str) -> dict[str, Any] | None:
    """A workload's state, its not-ready pods and its history ("why was it evicted?")."""
    snap = store.load(key)
    if snap is None:
        return None
    w = snap.workload
    return {
        **w.summary(),
        "message": w.message,
        "version": snap.version,
        "evictions": dict(w.evictions),
        "notReadyPods": [
            {
                "pod": p.name,
                "phase": p.phase,
                "node": p.node,
                "reason": p.reason,
                "message": p.message,
            }
            for p in w.not_ready_pods()
        ],
        "history": store.history(key),
    }


def status(store: WorkloadStore) -> dict[str, Any]:
    """Workloads by phase, and who holds admission (the ledger)."""
    phases = {
        p.value: [
            {**w.summary(), "evictions": sum(w.evictions.values())} for w in store.by_phase(p.value)
        ]
        for p in Phase
    }
    ledger = store.ledger()
    return {
        "phases": phases,
        "counts": {name: len(items) for name, items in phases.items()},
        "admitted": sorted(ledger.members),
    }
