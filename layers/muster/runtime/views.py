"""Read-only views for operators: `describe` one workload, `status` of the cluster."""

from __future__ import annotations

from typing import Any

from muster.core import ACTIVE_PHASES, Phase
from muster.runtime.ports import WorkloadStore


def describe(store: WorkloadStore, key: str) -> dict[str, Any] | None:
    """A workload's state, its not-ready pods and its history ("why was it evicted?")."""
    snap = store.load(key)
    if snap is None:
        return None
    w = snap.workload
    quarantine = snap.quarantine
    return {
        **w.summary(),
        "message": w.message,
        "version": snap.version,
        "quarantine": (
            None
            if quarantine is None
            else {
                "error": quarantine.error,
                "effect": quarantine.effect,
                "tries": quarantine.tries,
                "since": quarantine.since,
            }
        ),
        "pendingEffects": [type(e).__name__ for e in snap.outbox],
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
    """Workloads by phase, who holds admission, and who is quarantined (with the error)."""
    phases = {
        p.value: [
            {**w.summary(), "evictions": sum(w.evictions.values())} for w in store.by_phase(p.value)
        ]
        for p in Phase
    }
    quarantined = {key: q for key, q in store.quarantined()}
    for items in phases.values():
        for w in items:
            q = quarantined.get(w["workload"])
            w["quarantined"] = q is not None
            if q is not None:
                w["quarantineError"] = q.error
    return {
        "phases": phases,
        "counts": {name: len(items) for name, items in phases.items()},
        "admitted": sorted(w["workload"] for p in sorted(ACTIVE_PHASES) for w in phases[p.value]),
        "quarantined": [
            {
                "workload": key,
                "error": q.error,
                "effect": q.effect,
                "tries": q.tries,
                "since": q.since,
            }
            for key, q in sorted(quarantined.items())
        ],
    }
