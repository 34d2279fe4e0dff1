"""Node events: a node NotReady overrides its pods' reports; one being replaced evicts."""

from __future__ import annotations

from muster.core.copying import replace
from muster.core.diagnosis import diagnose
from muster.core.eviction import had_live_pods, withdrawn
from muster.core.gang import readiness
from muster.core.model import (
    ACTIVE_PHASES,
    Decision,
    Effect,
    Evict,
    LogEvent,
    NodeObserved,
    Outcome,
    Phase,
    Pod,
    Publish,
    Reason,
    RunAdmission,
    StopTimer,
    Workload,
)
from muster.core.settings import QueueSettings

# A node's health (HyperPod health monitoring's; the agent reads it from the label
# in `muster.kube.conventions`) that means it must be replaced or rebooted: its pods
# will not come back, so waiting out the recovery timeout only wastes the rest of
# the gang's GPUs.
NODE_REPLACEMENT_HEALTH = frozenset(
    {"UnschedulablePendingReplacement", "UnschedulablePendingReboot"}
)


def observe_node(w: Workload, e: NodeObserved, qs: QueueSettings, now: float) -> Decision:
    """A node's condition or health, for the gang's pods on it."""
    on_node = _live_pods_on(w, e.node)
    if not on_node or w.phase not in ACTIVE_PHASES:
        return Decision(w, outcome=Outcome.IGNORED)
    if e.seq:
        # A node condition never overrides a pod report (or node report) newer than it.
        on_node = [p for p in on_node if p.seq < e.seq and p.node_seq < e.seq]
        if not on_node:
            return Decision(w, outcome=Outcome.STALE, note=f"node {e.node}: older than its pods")
    if e.health in NODE_REPLACEMENT_HEALTH and qs.node_replacement_eviction:
        return _evict_for_node(w, e, qs, now)
    if not e.ready:
        return readiness(w, _node_down(w, e, on_node), qs, now)
    down = [p for p in on_node if p.node_down]
    if not e.seq or not down:
        return Decision(w, outcome=Outcome.IGNORED)
    return readiness(w, _node_back(w, e, down), qs, now)


def _live_pods_on(w: Workload, node: str) -> list[Pod]:
    """The gang's pods on `node` that a node condition can still concern."""
    return [p for p in w.pods.values() if p.node == node and not p.retired and not p.deleted]


def _node_down(w: Workload, e: NodeObserved, on_node: list[Pod]) -> Workload:
    """The node's pods can no longer be Ready, whatever the kubelet last reported."""
    pods = dict(w.pods)
    for p in on_node:
        pods[p.name] = replace(
            p,
            node_down=True,
            node_seq=e.seq,
            reason="NodeNotReady",
            message=f"node {e.node} is not Ready",
        )
    return replace(w, pods=pods)


def _node_back(w: Workload, e: NodeObserved, down: list[Pod]) -> Workload:
    """Ready again, and newer than the NotReady that overrode these pods' reports."""
    pods = dict(w.pods)
    for p in down:
        pods[p.name] = replace(
            p,
            node_down=False,
            node_seq=e.seq,
            reason=None if p.ready else p.reason,
            message=None if p.ready else p.message,
        )
    return replace(w, pods=pods)


def _evict_for_node(w: Workload, e: NodeObserved, qs: QueueSettings, now: float) -> Decision:
    """The node is being replaced: evict now and requeue at once, without counting it.

    The eviction is not the workload's fault, so it neither waits out a backoff nor
    moves towards its requeuing limit.
    """
    detail = {
        "attempt": w.attempt,
        "reason": str(Reason.NODE_FAILURES),
        "node": e.node,
        "health": e.health,
        "notReady": [p.name for p in w.not_ready_pods()][:20],
        "diagnosis": diagnose(w).to_dict(),
    }
    if qs.dry_run:
        if w.dry_run_evicted:
            return Decision(w, outcome=Outcome.IGNORED)
        return Decision(
            replace(w, dry_run_evicted=True),
            (Publish(LogEvent.EVICTED, w.key, {**detail, "dryRun": True}),),
        )
    effects: list[Effect] = []
    if w.timer is not None:
        effects.append(StopTimer(w.key, w.timer))
    if w.fault_timer is not None:
        effects.append(StopTimer(w.key, w.fault_timer))
    effects.append(
        Evict(w.key, w.attempt, w.kind, Reason.NODE_FAILURES, None, w.not_ready_pods(), w.uid)
    )
    evicted = withdrawn(w, now, qs, reason=Reason.NODE_FAILURES, cause=None)
    # Not the workload's fault: it also ends a streak of workload-fault evictions.
    evicted = replace(evicted, phase=Phase.PENDING, requeue_at=None, fault_evictions=0)
    effects.append(Publish(LogEvent.EVICTED, w.key, detail))
    effects.append(
        Publish(
            LogEvent.REQUEUED,
            w.key,
            {"count": w.requeue_count, "requeueAt": now, "delaySeconds": 0},
        )
    )
    effects.append(RunAdmission("evicted"))
    return Decision(evicted, tuple(effects), withdrawn=had_live_pods(w))
