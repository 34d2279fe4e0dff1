"""Read-only views for operators: `describe` one workload, `status` of the cluster."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from muster.core import ACTIVE_PHASES, Phase, Pod
from muster.core.diagnosis import PodDiagnosis, diagnose
from muster.runtime.ports import WorkloadStore


def _health(p: Pod, found: Mapping[str, PodDiagnosis]) -> dict[str, Any]:
    """What tells a broken job from a busy cluster, for one pod."""
    doc: dict[str, Any] = {"class": found[p.name].cls.value} if p.name in found else {}
    if p.restarts:
        doc["restarts"] = p.restarts
    if p.exit_code is not None:
        doc["exitCode"] = p.exit_code
    if p.terminated is not None:
        doc["terminated"] = p.terminated
    return doc


def describe(store: WorkloadStore, key: str) -> dict[str, Any] | None:
    """A workload's state, its not-ready pods and its history ("why was it evicted?")."""
    snap = store.load(key)
    if snap is None:
        return None
    w = snap.workload
    found = {d.pod: d for d in diagnose(w).pods}
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
        "faultEvictions": w.fault_evictions,
        "notReadyPods": [
            {
                "pod": p.name,
                "phase": p.phase,
                "node": p.node,
                "reason": p.reason,
                "message": p.message,
            }
            | _health(p, found)
            for p in w.not_ready_pods()
        ],
        "diagnosis": (diagnose(w).to_dict() if w.phase in ACTIVE_PHASES and not w.whole else None),
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
