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
class Skip:
    """A candidate that did not fit: it needs `needs` GPUs where `scope` has `free`."""

    workload: str
    scope: str  # "cluster" or "queue <name>"
    needs: int
    free: int

    def __str__(self) -> str:
        return f"needs {self.needs} GPUs, {self.scope} quota has {self.free} free"


@dataclass(frozen=True, slots=True)
class AdmissionPlan:
    """The workloads to admit, in order, and why the others were passed over."""

    admit: tuple[str, ...] = ()
    blocked_by: str | None = None  # the admitted-not-ready workload holding the lock
    skips: tuple[Skip, ...] = ()
    refused: tuple[tuple[str, str], ...] = ()  # (workload, why): `queueAccess` says no

    @property
    def skipped(self) -> dict[str, str]:
        """Workload -> why it was passed over (formatted only when asked for)."""
        return {s.workload: str(s) for s in self.skips} | dict(self.refused)


@dataclass(slots=True)
class Usage:
    """GPUs held per queue and in all, and who holds the `blockAdmission` lock.

    A shell may keep it up to date incrementally instead of handing every active
    workload to each pass.
    """

    cluster: int = 0
    queues: dict[str, int] = field(default_factory=dict)
    blocker: str | None = None

    @classmethod
    def of(cls, active: Iterable[Workload]) -> Usage:
        usage = cls()
        for w in active:
            if w.phase in ACTIVE_PHASES:
                usage.cluster += w.gpus
                usage.queues[w.queue] = usage.queues.get(w.queue, 0) + w.gpus
            if w.phase in NOT_READY_PHASES and usage.blocker is None:
                usage.blocker = w.key
        return usage


def queue_order_key(w: Workload, settings: Settings) -> tuple[int, float, str]:
    stamp = settings.for_queue(w.queue).timestamp
    when = w.created_at if stamp is Timestamp.CREATION else w.queued_at
    return (-w.priority, when, w.key)


def plan_admission(
    queued: Iterable[Workload],
    active: Iterable[Workload],
    settings: Settings,
    now: float,
    *,
    usage: Usage | None = None,
    ordered: bool = False,
) -> AdmissionPlan:
    """Pure: the same workloads, settings and time always give the same plan.

    `queued` are the Pending workloads (others are ignored), `active` those that hold
    quota (Admitted, Running, Recovering); shells keep both sets indexed so a pass
    never scans finished workloads. A shell that keeps `usage` itself passes it
    (and no `active`); one that keeps the queue sorted by `queue_order_key` says
    `ordered`, and the pass does not sort again.
    """
    held = usage if usage is not None else Usage.of(active)
    used_cluster = held.cluster
    used_queue = dict(held.queues)
    blocker = held.blocker
    if settings.block_admission and blocker is not None:
        # Blocked before the first candidate: no need to order the queue to know it.
        if any(admissible(w, now) for w in queued):
            return AdmissionPlan((), blocker)
        return AdmissionPlan()
    admissible_now = (w for w in queued if admissible(w, now))
    candidates = (
        admissible_now
        if ordered
        else sorted(admissible_now, key=lambda w: queue_order_key(w, settings))
    )
    chosen: list[str] = []
    skips: list[Skip] = []
    refused: list[tuple[str, str]] = []
    for w in candidates:
        if settings.block_admission and blocker is not None:
            return AdmissionPlan(tuple(chosen), blocker, tuple(skips), tuple(refused))
        refusal = settings.access.refusal(w.queue, w.key, w.priority)
        if refusal is not None:
            refused.append((w.key, refusal))
            continue
        if settings.gpu_quota is not None and used_cluster + w.gpus > settings.gpu_quota:
            skips.append(Skip(w.key, "cluster", w.gpus, settings.gpu_quota - used_cluster))
            continue
        queue_quota = settings.for_queue(w.queue).gpu_quota
        in_queue = used_queue.get(w.queue, 0)
        if queue_quota is not None and in_queue + w.gpus > queue_quota:
            skips.append(Skip(w.key, f"queue {w.queue}", w.gpus, queue_quota - in_queue))
            continue
        chosen.append(w.key)
        used_cluster += w.gpus
        used_queue[w.queue] = in_queue + w.gpus
        if settings.block_admission:
            blocker = w.key
    return AdmissionPlan(tuple(chosen), None, tuple(skips), tuple(refused))
