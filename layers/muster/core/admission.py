"""The admission pass: which queued workloads to admit now, in order.

Kueue's BestEffortFIFO across queues: candidates are ordered by priority (higher
first), then by the timestamp their queue's `requeuingStrategy.timestamp` names;
a workload that does not fit its quotas is skipped and the next one tried.
Under `blockAdmission` nothing is admitted while an admitted workload is not yet
PodsReady, and the check runs before every candidate, so one pass admits at most
one workload.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from muster.core.decide import admissible
from muster.core.model import ACTIVE_PHASES, NOT_READY_PHASES, Workload
from muster.core.settings import Settings, Timestamp


@dataclass(frozen=True, slots=True)
class AdmissionPlan:
    """The workloads to admit, in order, and why the others were passed over."""

    admit: tuple[str, ...] = ()
    blocked_by: str | None = None  # the admitted-not-ready workload holding the lock
    skipped: dict[str, str] = field(default_factory=dict)  # workload -> reason


def queue_order_key(w: Workload, settings: Settings) -> tuple[int, float, str]:
    stamp = settings.for_queue(w.queue).timestamp
    when = w.created_at if stamp is Timestamp.CREATION else w.queued_at
    return (-w.priority, when, w.key)


def plan_admission(
    queued: Iterable[Workload], active: Iterable[Workload], settings: Settings, now: float
) -> AdmissionPlan:
    """Pure: the same workloads, settings and time always give the same plan.

    `queued` are the Pending workloads (others are ignored), `active` those that hold
    quota (Admitted, Running, Recovering); shells keep both sets indexed so a pass
    never scans finished workloads.
    """
    used_cluster = 0
    used_queue: dict[str, int] = {}
    blocker: str | None = None
    for w in active:
        if w.phase in ACTIVE_PHASES:
            used_cluster += w.gpus
            used_queue[w.queue] = used_queue.get(w.queue, 0) + w.gpus
        if w.phase in NOT_READY_PHASES and blocker is None:
            blocker = w.key
    if settings.block_admission and blocker is not None:
        # Blocked before the first candidate: no need to order the queue to know it.
        if any(admissible(w, now) for w in queued):
            return AdmissionPlan((), blocker, {})
        return AdmissionPlan()
    candidates = sorted(
        (w for w in queued if admissible(w, now)), key=lambda w: queue_order_key(w, settings)
    )
    chosen: list[str] = []
    skipped: dict[str, str] = {}
    for w in candidates:
        if settings.block_admission and blocker is not None:
            return AdmissionPlan(tuple(chosen), blocker, skipped)
        queue_quota = settings.for_queue(w.queue).gpu_quota
        in_queue = used_queue.get(w.queue, 0)
        if settings.gpu_quota is not None and used_cluster + w.gpus > settings.gpu_quota:
            skipped[w.key] = (
                f"needs {w.gpus} GPUs, cluster quota has {settings.gpu_quota - used_cluster} free"
            )
            continue
        if queue_quota is not None and in_queue + w.gpus > queue_quota:
            skipped[w.key] = (
                f"needs {w.gpus} GPUs, queue {w.queue} quota has {queue_quota - in_queue} free"
            )
            continue
        chosen.append(w.key)
        used_cluster += w.gpus
        used_queue[w.queue] = in_queue + w.gpus
        if settings.block_admission:
            blocker = w.key
    return AdmissionPlan(tuple(chosen), None, skipped)
