"""The admission pass: which queued workloads to admit now, in order.

Kueue's BestEffortFIFO across queues: candidates are ordered by priority (higher
first), then by the timestamp their queue's `requeuingStrategy.timestamp` names;
a workload that does not fit its quotas is skipped and the next one tried.
Under `blockAdmission` nothing is admitted while an admitted workload is not yet
PodsReady, and the check runs before every candidate, so one pass admits at most
one workload. With `capacityCheck`, a candidate that fits its quotas must also
fit the nodes' free GPUs (`core.capacity`); one that does not is skipped like
one over quota, and what is admitted is reserved for the rest of the pass.

Who holds quota is handed in: the admitted workloads (`active`) and those that
hold it after leaving the admitted phases (`held`, see `holds_quota`). A
candidate the planner cannot judge (an error in what it was told of it) is set
aside with the error (`AdmissionPlan.failed`); the others are planned as if it
were not queued.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, insort
from collections.abc import Iterable
from dataclasses import dataclass, field

from muster.core.capacity import FitSkip, Fitter, NodeCapacity, fit, pod_shape
from muster.core.model import ACTIVE_PHASES, NOT_READY_PHASES, Effect, Evict, Workload
from muster.core.packing import fit_packed
from muster.core.predecessors import charged_predecessors, held_by_predecessors
from muster.core.settings import Settings, Timestamp
from muster.core.topology import TopologySkip
from muster.core.topology_fit import fit_in_domain
from muster.core.workloads import admissible, inadmissible, outlived_by_pods


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
    skips: tuple[Skip | FitSkip | TopologySkip, ...] = ()
    refused: tuple[tuple[str, str], ...] = ()  # (workload, why): `queueAccess` says no
    # (workload, why): admitted or considered on quota alone, the capacity check
    # could not judge it (placement rules it does not evaluate, sizes unknown).
    unchecked: tuple[tuple[str, str], ...] = ()
    # (workload, error): planning it failed; passed over, the others planned without it.
    failed: tuple[tuple[str, str], ...] = ()
    # (workload, domain): the topology domain an admitted workload is kept in.
    domains: tuple[tuple[str, str], ...] = ()

    def domain_of(self, key: str) -> str:
        """The topology domain chosen for `key` ("" for none)."""
        for workload, domain in self.domains:
            if workload == key:
                return domain
        return ""

    @property
    def skipped(self) -> dict[str, str]:
        """Workload -> why it was passed over (formatted only when asked for)."""
        failed = {key: f"could not be planned: {error}" for key, error in self.failed}
        return {s.workload: str(s) for s in self.skips} | dict(self.refused) | failed


def holds_quota(w: Workload, outbox: Iterable[Effect] = ()) -> bool:
    """Whether `w` still holds its quota (`outbox`: its effects not carried out yet).

    An admitted workload does, until what ends its admission took effect on the
    cluster, since its pods may run until then: an eviction whose withdrawal (its
    `Evict`) is not carried out yet holds it, and so does a workload deleted while
    its pods outlive it (`outlived_by_pods`). The quota an eviction frees is freed
    when the withdrawal succeeded, not when it was decided. A record also holds what
    an earlier object under its key holds while its pods run (`core.predecessors`).
    """
    if w.phase in ACTIVE_PHASES or (w.predecessors and held_by_predecessors(w)):
        return True
    for e in outbox:
        if type(e) is Evict and e.workload == w.key and e.attempt == w.attempt:
            return True
    return outlived_by_pods(w)


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
    def of(cls, active: Iterable[Workload], held: Iterable[Workload] = ()) -> Usage:
        """What `active` (the admitted) and `held` (holding quota after, `holds_quota`)
        hold; only an admitted workload can hold the `blockAdmission` lock."""
        usage = cls()
        for w in active:
            if w.phase in ACTIVE_PHASES:
                usage.charge(w)
            if w.phase in NOT_READY_PHASES and usage.blocker is None:
                usage.blocker = w.key
        for w in held:
            # One held only for its predecessors' pods holds nothing of its own (one
            # whose own withdrawal is not carried out yet is left uncharged here).
            own = not held_by_predecessors(w) or outlived_by_pods(w)
            usage.charge(w, own=own)
        return usage

    def charge(self, w: Workload, *, own: bool = True) -> None:
        """What `w` holds: its own GPUs (`own`), and those of its predecessors that run."""
        if own:
            self.cluster += w.gpus
            self.queues[w.queue] = self.queues.get(w.queue, 0) + w.gpus
        if w.predecessors:
            for queue, gpus in charged_predecessors(w):
                self.cluster += gpus
                self.queues[queue] = self.queues.get(queue, 0) + gpus


OrderKey = tuple[int, float, str]
# (queue, GPUs, what the capacity check sees of it: its pod sizes and whether it falls back)
Bucket = tuple[str, int, object]


def queue_order_key(w: Workload, settings: Settings) -> OrderKey:
    """(priority, then the time it queues by, then its name); with `sizeHandicap`, each
    GPU beyond the first puts it that much later."""
    qs = settings.for_queue(w.queue)
    when = w.created_at if qs.timestamp is Timestamp.CREATION else w.queued_at
    if qs.size_handicap and w.gpus > 1:
        when += qs.size_handicap * (w.gpus - 1)
    return (-w.priority, when, w.key)


def quota_skip(
    w: Workload, settings: Settings, used_cluster: int, used_queue: dict[str, int]
) -> Skip | None:
    """Why `w` does not fit the cluster's or its queue's GPU quota now (None: it fits)."""
    if settings.gpu_quota is not None and used_cluster + w.gpus > settings.gpu_quota:
        return Skip(w.key, "cluster", w.gpus, settings.gpu_quota - used_cluster)
    queue_quota = settings.for_queue(w.queue).gpu_quota
    in_queue = used_queue.get(w.queue, 0)
    if queue_quota is not None and in_queue + w.gpus > queue_quota:
        return Skip(w.key, f"queue {w.queue}", w.gpus, queue_quota - in_queue)
    return None


def plan_admission(
    queued: Iterable[Workload],
    active: Iterable[Workload],
    settings: Settings,
    now: float,
    *,
    usage: Usage | None = None,
    nodes: Iterable[NodeCapacity] | None = None,
    held: Iterable[Workload] = (),
) -> AdmissionPlan:
    """Pure: the same workloads, settings and time always give the same plan.

    The planner of a shell that reads the queue afresh for each pass (the
    Lambdas, the sweeper, `muster status`): `queued` are the Pending workloads
    (others are ignored), `active` those that hold quota (Admitted, Running,
    Recovering), `held` those that hold it after that (`holds_quota`). It indexes
    them in an `AdmissionQueue` and plans with it, explaining every workload passed
    over. A shell that keeps `usage` itself passes it (and no `active`). With
    `capacityCheck`, `nodes` is the capacity view and `active` and `held` must carry
    their pods (where they are bound).
    """
    return plan_queue(
        AdmissionQueue.of(settings, queued),
        active,
        settings,
        now,
        usage=usage,
        nodes=nodes,
        held=held,
    )


def plan_queue(
    queue: AdmissionQueue,
    active: Iterable[Workload],
    settings: Settings,
    now: float,
    *,
    usage: Usage | None = None,
    nodes: Iterable[NodeCapacity] | None = None,
    explain: bool = True,
    held: Iterable[Workload] = (),
) -> AdmissionPlan:
    """`plan_admission` on a queue the shell keeps (and updates) across passes."""
    active = list(active)
    held = list(held)
    used = usage if usage is not None else Usage.of(active, held)
    fitter: Fitter | None = None
    if settings.capacity_check:
        fitter = Fitter.of(list(nodes or ()), active, held)
    return queue.plan(now, used, fitter, explain=explain)


class AdmissionQueue:
    """Pending workloads indexed so that a pass looks only at those that can fit.

    `plan_admission` walks every queued workload, which is right for a shell that
    reads the queue afresh for each pass (the Lambdas) but, for one that keeps
    thousands queued in memory (the simulator), makes every pass cost the whole
    queue. This keeps the same workloads ready for the same rules:

    - a workload still in backoff (`requeue_at` later than the pass) waits in a
      timer heap and joins the queue when its time comes;
    - a pod group waiting for replacement pods is not indexed at all (the shell
      adds it again on every change, as it does for every Pending workload);
    - one that `queueAccess` refuses is kept aside, never admitted (it still
      counts as waiting, for `blockAdmission`'s report);
    - the others sit in one bucket per (queue, GPUs), each in queue order, so a
      pass merges only the buckets whose size still fits both the cluster's and
      the queue's quota: a workload that does not fit is never looked at.

    `plan` gives the same `admit` and `blocked_by` as `plan_admission` on the
    same workloads (a property test holds them together); it does not list the
    workloads it passed over, since it never looks at them.
    """

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._buckets: dict[Bucket, list[tuple[OrderKey, Workload]]] = {}
        self._indexed: dict[str, tuple[Bucket, OrderKey]] = {}
        self._refused: dict[str, OrderKey] = {}  # admissible but refused by `queueAccess`
        self._refused_workloads: dict[str, tuple[Workload, str]] = {}  # with the reason
        self._backoff: dict[str, float] = {}  # key -> requeue_at of its waiting entry
        self._waiting: list[tuple[float, int, str, Workload]] = []  # a heap by requeue_at
        self._pushed = 0

    @classmethod
    def of(cls, settings: Settings, queued: Iterable[Workload]) -> AdmissionQueue:
        """A queue holding `queued` (those not admissible at any time are left out)."""
        queue = cls(settings)
        for w in queued:
            queue.add(w)
        return queue

    def __len__(self) -> int:
        return len(self._indexed) + len(self._refused) + len(self._backoff)

    def __contains__(self, key: str) -> bool:
        return key in self._indexed or key in self._refused or key in self._backoff

    def reorder(self, settings: Settings) -> None:
        """New settings may order the queue differently (the `timestamp` per queue)."""
        queued = [w for bucket in self._buckets.values() for _, w in bucket]
        queued += [w for at, _, key, w in self._waiting if self._backoff.get(key) == at]
        queued += [w for w, _ in self._refused_workloads.values()]
        self._settings = settings
        self._buckets.clear()
        self._indexed.clear()
        self._refused.clear()
        self._refused_workloads.clear()
        self._backoff.clear()
        self._waiting.clear()
        for w in queued:
            self.add(w)

    def add(self, w: Workload) -> None:
        """Queue (or queue again, after a change) a workload; one not Pending is dropped."""
        self.discard(w.key)
        if not admissible(w, math.inf):
            return  # not Pending, or a pod group waiting for its pods: not admissible ever
        if w.requeue_at is not None:
            self._backoff[w.key] = w.requeue_at
            self._pushed += 1
            heapq.heappush(self._waiting, (w.requeue_at, self._pushed, w.key, w))
            return
        self._index(w)

    def discard(self, key: str) -> None:
        """Drop a workload (a waiting entry is dropped from the heap when its time comes)."""
        self._backoff.pop(key, None)
        if self._refused.pop(key, None) is not None:
            del self._refused_workloads[key]
            return
        found = self._indexed.pop(key, None)
        if found is None:
            return
        where, order = found
        bucket = self._buckets[where]
        del bucket[bisect_left(bucket, (order,))]
        if not bucket:
            del self._buckets[where]

    def plan(
        self,
        now: float,
        usage: Usage,
        fitter: Fitter | None = None,
        *,
        explain: bool = False,
    ) -> AdmissionPlan:
        """The admission plan at `now` with `usage` held (see the class).

        With `capacityCheck`, `fitter` holds the nodes' free GPUs (an empty one: no
        node has reported capacity). A bucket whose head does not fit is dropped for
        the pass: its workloads have the same pod sizes, and free GPUs only shrink.
        With `explain`, the pass looks at every queued workload instead, to say why
        each one it passed over waits (`skips`, `refused`); it admits the same.
        """
        self._release_due(now)
        if self._settings.block_admission and usage.blocker is not None:
            waiting = self._buckets or self._refused
            return AdmissionPlan((), usage.blocker) if waiting else AdmissionPlan()
        walk = _Pass(self, usage, fitter, explain)
        while walk.heads:
            order, i, where = heapq.heappop(walk.heads)
            if where is None:
                walk.refused.append((order[2], self._refused_workloads[order[2]][1]))
                continue
            bucket = self._buckets[where]
            verdict = walk.fits(bucket[i][1])
            if verdict:
                if self._settings.block_admission:
                    walk.push_next(where, i)
                    return walk.result(blocked=walk.later_than(order))
            elif verdict is False and not explain:
                continue  # the bucket is done for this pass: nothing after it fits either
            walk.push_next(where, i)
        return walk.result()

    def _index(self, w: Workload) -> None:
        order = queue_order_key(w, self._settings)
        refusal = inadmissible(w, self._settings)
        if refusal is not None:
            self._refused[w.key] = order
            self._refused_workloads[w.key] = (w, refusal)
            return
        seen: object = (
            (pod_shape(w), bool(w.placement), w.topology) if self._settings.capacity_check else None
        )
        where = (w.queue, w.gpus, seen)
        self._indexed[w.key] = (where, order)
        insort(self._buckets.setdefault(where, []), (order, w))

    def _release_due(self, now: float) -> None:
        """Backoffs that have ended by `now` join the queue."""
        waiting = self._waiting
        while waiting and waiting[0][0] <= now:
            at, _, key, w = heapq.heappop(waiting)
            if self._backoff.get(key) == at:
                del self._backoff[key]
                self._index(w)


class _Pass:
    """One walk of the queue in order: what is still free, and what was chosen or passed over.

    Only buckets whose size fits the quotas are walked, unless the pass explains
    itself: then every bucket is, and the workloads `queueAccess` refuses too, so
    each is listed with its reason in queue order.
    """

    def __init__(
        self, queue: AdmissionQueue, usage: Usage, fitter: Fitter | None, explain: bool
    ) -> None:
        settings = queue._settings
        self.queue = queue
        self.settings = settings
        self.explain = explain
        self.fitter = fitter if settings.capacity_check else None
        self.known = fitter is not None and fitter.known
        self.used_cluster = usage.cluster
        self.used_queue = dict(usage.queues)
        self.chosen: list[str] = []
        self.skips: list[Skip | FitSkip | TopologySkip] = []
        self.domains: list[tuple[str, str]] = []
        self.refused: list[tuple[str, str]] = []
        self.unchecked: list[tuple[str, str]] = []
        self.failed: list[tuple[str, str]] = []
        self.heads: list[tuple[OrderKey, int, Bucket | None]] = [
            (bucket[0][0], 0, where)
            for where, bucket in queue._buckets.items()
            if explain or self.quota_skip(bucket[0][1]) is None
        ]
        if explain:
            self.heads += [(order, 0, None) for order in queue._refused.values()]
        heapq.heapify(self.heads)

    def quota_skip(self, w: Workload) -> Skip | None:
        return quota_skip(w, self.settings, self.used_cluster, self.used_queue)

    def fits(self, w: Workload) -> bool | None:
        """Choose `w` if it fits what is still free; else note why not (False).

        None: judging it failed (kept in `failed`). One queued workload whose data
        breaks the planner must not stop the pass for every other, so the error is
        its own and the rest of its bucket is still tried.
        """
        try:
            return self._fits(w)
        except Exception as exc:  # isolated to this candidate, and reported
            self.failed.append((w.key, f"{type(exc).__name__}: {exc}"))
            return None

    def _fits(self, w: Workload) -> bool:
        skip = self.quota_skip(w)
        if skip is not None:
            if self.explain:
                self.skips.append(skip)
            return False
        if self.fitter is not None:
            qs = self.settings.for_queue(w.queue)
            domain = ""
            if w.topology:
                no_room, fallback, domain = fit_in_domain(self.fitter, w, self.known, qs)
            elif self.settings.node_packing:
                no_room, fallback, domain = fit_packed(
                    self.fitter, w, self.known, dry_run=qs.dry_run
                )
            else:
                no_room, fallback = fit(self.fitter, w, self.known, dry_run=qs.dry_run)
            if fallback is not None:
                self.unchecked.append((w.key, fallback))
            if no_room is not None:
                self.skips.append(no_room)
                return False
            if domain:
                self.domains.append((w.key, domain))
        self.chosen.append(w.key)
        self.used_cluster += w.gpus
        self.used_queue[w.queue] = self.used_queue.get(w.queue, 0) + w.gpus
        return True

    def push_next(self, where: Bucket, i: int) -> None:
        bucket = self.queue._buckets[where]
        if i + 1 < len(bucket):
            heapq.heappush(self.heads, (bucket[i + 1][0], i + 1, where))

    def later_than(self, order: OrderKey) -> str | None:
        """Under `blockAdmission`: the workload just chosen holds the lock if anyone waits after it."""
        queue = self.queue
        later = any(b[-1][0] > order for b in queue._buckets.values()) or any(
            other > order for other in queue._refused.values()
        )
        return order[2] if later else None

    def result(self, blocked: str | None = None) -> AdmissionPlan:
        return AdmissionPlan(
            tuple(self.chosen),
            blocked,
            tuple(self.skips),
            tuple(self.refused),
            tuple(self.unchecked),
            tuple(self.failed),
            tuple(self.domains),
        )
