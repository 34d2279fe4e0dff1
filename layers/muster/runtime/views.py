"""Read-only views for operators: `describe` one workload, `status` of the cluster."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from muster.core import ACTIVE_PHASES, Phase, Pod, Workload
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
    } | _topology(w)


def _topology(w: Workload) -> dict[str, Any]:
    """What it asks of the topology and the domain it was admitted into, when it asks."""
    if not w.topology:
        return {}
    return {"topology": w.topology, "domain": w.domain or None}


def current_workloads(store: WorkloadStore) -> list[Workload]:
    """Every workload, each once and as its item holds it now.

    The phase index is read one phase at a time and lags: a workload that changed
    phase meanwhile shows in two phases, or in none. So the index only says which
    workloads there are; each one not Finished (and every quota holder the ledger
    names) is then read consistently, in batches.
    """
    indexed: dict[str, Workload] = {}
    for phase in Phase:
        for w in store.by_phase(phase.value):
            known = indexed.get(w.key)
            if known is None or known.phase is Phase.FINISHED:
                indexed[w.key] = w
    settled = {k for k, w in indexed.items() if w.phase is Phase.FINISHED}
    wanted = (set(indexed) - settled) | set(store.ledger().recent)
    fresh = {w.key: w for w in store.get_workloads(sorted(wanted))}
    current = {k: w for k, w in indexed.items() if k in settled and k not in wanted}
    current.update(fresh)
    return [current[k] for k in sorted(current)]


def status(store: WorkloadStore, workloads: Sequence[Workload] | None = None) -> dict[str, Any]:
    """Workloads by phase, who holds admission, and who is quarantined (with the error).

    One view: each workload once, as read by `current_workloads` (or as handed in).
    """
    current = current_workloads(store) if workloads is None else workloads
    phases: dict[str, list[dict[str, Any]]] = {p.value: [] for p in Phase}
    for w in current:
        phases[w.phase.value].append({**w.summary(), "evictions": sum(w.evictions.values())})
    quarantined = {key: q for key, q in store.quarantined()}
    for items in phases.values():
        for doc in items:
            q = quarantined.get(doc["workload"])
            doc["quarantined"] = q is not None
            if q is not None:
                doc["quarantineError"] = q.error
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
