"""Muster's view against the truth: what must hold after every run (and during it).

- every workload is in the state the truth implies: an object that exists is
  known under its uid, admitted exactly when its Job runs, PodsReady exactly
  when all its pods are Ready, with the pods the cluster has; an object that is
  gone is Finished (or expired);
- no GPUs are held by anything gone;
- the quota is never exceeded (checked after every step);
- nothing waits without a timer or message that would move it.
"""

from __future__ import annotations

from collections.abc import Set
from typing import TYPE_CHECKING

from muster.core import (
    ACTIVE_PHASES,
    NOT_READY_PHASES,
    Phase,
    Settings,
    Workload,
)
from muster.runtime.memory import MemoryStore
from muster.runtime.planning import HoldingsReader, quota_holders

if TYPE_CHECKING:
    from muster.harness.cluster_truth import Truth


def check_quota(store: MemoryStore, settings: Settings) -> str | None:
    held = sum(w.gpus for w in store.active())
    quota = settings.gpu_quota
    if quota is not None and held > quota:
        return f"quota exceeded: {held} GPUs admitted, quota {quota}"
    return None


def check_final(
    store: MemoryStore,
    truth: Truth,
    timers: Set[tuple[str, int, str, int, str]],
    requeues: Set[tuple[str, int]],
    settings: Settings,
    now: float,
) -> list[str]:
    problems: list[str] = []
    queued = [snap.workload for w in store.pending() if (snap := store.load(w.key))]
    # What a pass would be given: the quota holders (those still holding after their
    # admission ended included) and, with the capacity check, the nodes.
    plan = HoldingsReader(store).inputs(settings, queued, quota_holders(store)).plan(settings, now)
    if plan.admit:
        problems.append(f"admissible but left waiting: {', '.join(plan.admit)}")
    keys = set(truth.objects) | set(store.items)
    for key in sorted(keys):
        snap = store.load(key)
        problems += _workload_problems(
            key, truth, snap.workload if snap else None, timers, requeues
        )
    for w in store.active():
        obj = truth.objects.get(w.key)
        if obj is None or obj.deleted or obj.uid != w.uid:
            problems.append(f"{w.key}: holds {w.gpus} GPUs but is gone from the cluster")
    return problems


def _workload_problems(
    key: str,
    truth: Truth,
    w: Workload | None,
    timers: Set[tuple[str, int, str, int, str]],
    requeues: Set[tuple[str, int]],
) -> list[str]:
    """What is wrong with Muster's view of one key; a wrong identity or phase is all
    that is said of it."""
    obj = truth.objects.get(key)
    if obj is None or obj.deleted:
        if w is not None and w.phase is not Phase.FINISHED:
            return [f"{key}: gone from the cluster but {w.phase.value} in Muster"]
        return []
    if w is None:
        return [f"{key}: exists (uid {obj.uid}) but Muster does not know it"]
    if w.uid != obj.uid:
        return [f"{key}: Muster follows uid {w.uid}, the cluster has {obj.uid}"]
    if w.phase is Phase.FINISHED:
        return [f"{key}: exists but Finished ({w.reason}) in Muster"]
    job = truth.sim._jobs[obj.sim]
    if job.running != (w.phase in ACTIVE_PHASES):
        state = "runs" if job.running else "is suspended"
        return [f"{key}: the Job {state} but Muster has it {w.phase.value}"]
    problems = _pod_problems(key, truth, w, job.running)
    problems += _timer_problems(key, w, timers)
    if w.reason == "WorkloadFaults" and not job.spec.never_ready:
        problems.append(f"{key}: a healthy Job deactivated as failing on its own")
    if w.phase is Phase.REQUEUED and (key, w.requeue_count) not in requeues:
        problems.append(f"{key}: Requeued with no requeue message")
    return problems


def _pod_problems(key: str, truth: Truth, w: Workload, running: bool) -> list[str]:
    """The pods Muster sees against the cluster's, and whether the gang is whole."""
    problems: list[str] = []
    cluster = {name: (e.uid, truth.ready(e)) for (k, name), e in truth.pods.items() if k == key}
    seen = {p.name: (p.uid, p.counts_ready) for p in w.pods.values() if not p.deleted}
    if seen != cluster:
        problems.append(f"{key}: pods {seen} in Muster, {cluster} in the cluster")
    if running:
        whole = sum(ready for _, ready in cluster.values()) >= w.gang_size
        if whole != (w.phase is Phase.RUNNING):
            problems.append(f"{key}: whole={whole} in the cluster but {w.phase.value}")
    return problems


def _timer_problems(
    key: str, w: Workload, timers: Set[tuple[str, int, str, int, str]]
) -> list[str]:
    """A phase that waits for a timer has one running; a fault timer only while not Ready."""
    problems: list[str] = []
    if w.phase in NOT_READY_PHASES and w.timer is not None:
        t = w.timer
        if (key, t.attempt, t.kind.value, t.episode, t.incarnation) not in timers:
            problems.append(f"{key}: {w.phase.value} with no timer running")
    if w.phase is Phase.ADMITTED and w.timer is None:
        problems.append(f"{key}: Admitted with no timer")
    if w.fault_timer is not None:
        t = w.fault_timer
        if w.phase not in NOT_READY_PHASES:
            problems.append(f"{key}: {w.phase.value} with a workloadFaults timer armed")
        elif (key, t.attempt, t.kind.value, t.episode, t.incarnation) not in timers:
            problems.append(f"{key}: workloadFaults timer armed but not running")
    return problems
