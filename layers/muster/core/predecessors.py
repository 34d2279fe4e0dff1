"""Pods of an earlier object under a workload's key that still run: charged until they end.

A Job deleted while it held quota holds it while its pods run on (`kubectl delete
--cascade=orphan`, or pods still terminating: `workloads.outlived_by_pods`). The
record is one per key, so when a new object takes the key meanwhile, the earlier
object's holding moves onto the new record as a `Holding`: charged to the earlier
object's queue, with its pods kept apart from the new object's (they never count
for its readiness: they are another uid's), until the last of them is heard ended.
The newest holding stays on the record after that, charging nothing, so that a late
event of one of its pods is judged against what is known of it (and a pod first
heard of then, bound, is charged again). An earlier object still admitted on the
record when the new one is heard of (its deletion unheard, after an agent gap say)
with no pod of it known is charged as if its pods ran, until one of them is heard
of or a pod listing says which run: a relist sends the objects before the pods.
"""

from __future__ import annotations

from muster.core.copying import replace
from muster.core.model import (
    ACTIVE_PHASES,
    Holding,
    Kind,
    Phase,
    Pod,
    PodObserved,
    PodsListed,
    Reason,
    Workload,
)

PREDECESSOR_ENDED = "pods of a deleted workload gone"
"""The admission request when the last running pod of a predecessor ends."""


def running(p: Pod) -> bool:
    """Not ended, of whichever attempt: bound, its GPUs are in use; pending, it may
    still be bound (an orphaned pod is scheduled as any other)."""
    return not p.deleted and p.phase not in ("Succeeded", "Failed")


def runs(h: Holding) -> bool:
    """Whether the holding charges its GPUs: a pod of it has not ended (or none of its
    pods is known yet, `Holding.presumed`)."""
    return h.presumed or any(running(p) for p in h.pods.values())


def held_by_predecessors(w: Workload) -> bool:
    return any(runs(h) for h in w.predecessors)


def charged_predecessors(w: Workload) -> list[tuple[str, int]]:
    """(queue, GPUs) of each earlier object under `w`'s key whose pods may still run."""
    return [(h.queue, h.gpus) for h in w.predecessors if runs(h)]


def handed_over(w: Workload) -> tuple[Holding, ...]:
    """The holdings a new object under `w`'s key takes over from `w`: those `w` carried
    that still run, and `w`'s own if it held quota when it went (admitted, or deleted
    while its pods ran; a pod group's run is gone with its pods, so never)."""
    kept = [h for h in w.predecessors if runs(h)]
    if w.kind is not Kind.POD_GROUP and w.uid and w.attempt > 0:
        if w.phase in ACTIVE_PHASES:
            # Its deletion unheard: the pods of its attempt may run on (an evicted
            # attempt's were withdrawn with it).
            pods = {name: compact(p) for name, p in w.pods.items() if not p.retired}
            unknown = not any(running(p) for p in pods.values())
            kept.append(Holding(w.uid, w.queue, w.gpus, pods, presumed=unknown))
        elif w.phase is Phase.FINISHED and w.reason == Reason.DELETED:
            # As `workloads.outlived_by_pods` counts them: any attempt's.
            pods = {name: compact(p) for name, p in w.pods.items()}
            kept.append(Holding(w.uid, w.queue, w.gpus, pods))
    return tuple(kept)


def compact(p: Pod) -> Pod:
    """What a holding needs of a pod: whether it ended, and its revision and uid to order
    later events of it."""
    return Pod(p.name, p.seq, p.uid, p.phase, node=p.node, deleted=p.deleted)


def predecessor_of(w: Workload, e: PodObserved) -> int | None:
    """The index of the holding that owns the pod of `e` (its owner is known, and is an
    earlier object's whose holding `w` carries), or None."""
    if not e.owner or e.owner == w.uid:
        return None
    for i, h in enumerate(w.predecessors):
        if h.uid == e.owner:
            return i
    return None


def predecessors_listed(w: Workload, e: PodsListed) -> tuple[Workload, bool]:
    """`w` with its holdings' pods that a complete snapshot lacks (and older than it)
    deleted; True when that ended a holding."""
    if not w.predecessors:
        return w, False
    ended = False
    holdings: list[Holding] = []
    for h in w.predecessors:
        pods = dict(h.pods)
        for p in h.pods.values():
            listed = e.pods.get(p.name)
            gone = listed is None or bool(p.uid and listed and listed != p.uid)
            if not p.deleted and gone and p.seq < e.revision:
                pods[p.name] = Pod(p.name, p.seq, p.uid, p.phase, deleted=True)
        after = replace(h, pods=pods, presumed=False)
        ended = ended or (runs(h) and not runs(after))
        holdings.append(after)
    return replace(w, predecessors=tuple(holdings)), ended


def with_holding(holdings: tuple[Holding, ...], i: int, h: Holding) -> tuple[Holding, ...]:
    return (*holdings[:i], h, *holdings[i + 1 :])
