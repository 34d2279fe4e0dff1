"""The fleet: the in-memory control plane, all workloads of one cluster with `decide`
plus the admission pass.

The simulator, the property tests and the local views use this; the Lambdas do
the same with DynamoDB in place of the dictionary. It performs no I/O: effects are
returned for the caller to carry out, except `RunAdmission`, which it answers by
running the admission pass itself.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from muster.core.admission import AdmissionPlan, AdmissionQueue, Usage
from muster.core.capacity import (
    Fitter,
    Holdings,
    NodeCapacity,
    more_room,
    observe_node,
    room,
    room_on,
    schedulable_order,
)
from muster.core.decide import decide
from muster.core.model import (
    ACTIVE_PHASES,
    NOT_READY_PHASES,
    AdmissionGranted,
    Effect,
    Event,
    NodeObserved,
    Outcome,
    Phase,
    RunAdmission,
    Workload,
)
from muster.core.predecessors import charged_predecessors
from muster.core.settings import Settings
from muster.core.topology import DomainIndex, Topology
from muster.core.workloads import outlived_by_pods

# Read per event: a member off its enum class costs a metaclass lookup each time.
_APPLIED, _PENDING, _FINISHED = Outcome.APPLIED, Phase.PENDING, Phase.FINISHED


@dataclass(slots=True)
class StepResult:
    effects: list[Effect] = field(default_factory=list)
    outcomes: list[tuple[str, Outcome, str]] = field(default_factory=list)
    plans: list[AdmissionPlan] = field(default_factory=list)
    admission_wanted: bool = False  # a RunAdmission was left to the caller (deferred mode)

    def extend(self, other: StepResult) -> None:
        self.effects.extend(other.effects)
        self.outcomes.extend(other.outcomes)
        self.plans.extend(other.plans)
        self.admission_wanted = self.admission_wanted or other.admission_wanted


class ForgottenWorkload(LookupError):
    """An event for a workload the fleet dropped when it finished (`forget_finished`)."""


def _no_jitter() -> float:
    return 0.0


class Fleet:
    """The in-memory control plane: workloads by key, with the indexes an admission
    pass needs.

    With `defer_admission`, `apply` does not answer RunAdmission itself but sets
    `StepResult.admission_wanted`; a shell that batches the events of one instant
    (the simulator) then runs a single `admission_pass` after all of them.

    With `forget_finished`, a workload that finished (and holds nothing) is dropped
    with its pods: for a shell whose cluster says nothing more of a finished
    workload (the simulator, whose completed jobs take their pods with them), so
    that what is kept grows with the workloads in flight, not with all there were.
    An event for a forgotten workload is refused (`ForgottenWorkload`), never
    decided without what it would have been decided on.

    With `details` off, evictions are published without their diagnosis and
    not-ready pods (`decide`'s `details`), for a shell that reads neither.
    """

    def __init__(
        self,
        settings: Settings,
        draw: Callable[[], float] = _no_jitter,
        *,
        defer_admission: bool = False,
        forget_finished: bool = False,
        details: bool = True,
    ) -> None:
        self.defer_admission = defer_admission
        self.workloads: dict[str, Workload] = {}
        self._forget = forget_finished
        self._details = details
        self._forgotten: set[str] = set()  # their keys
        self._draw = draw
        self._active: set[str] = set()
        # Out of the admitted phases and still charged: deleted while holding quota
        # with pods still running, or carrying a predecessor's that run.
        self._outlived: set[str] = set()
        self._charged: dict[str, list[tuple[str, int]]] = {}  # (queue, GPUs) per holder
        # Kept up to date in `_store`, so a pass neither re-adds every active
        # workload's GPUs nor sorts the queue again.
        self._usage = Usage()
        self._not_ready: set[str] = set()
        self._not_ready_order: list[str] = []  # a heap of `_not_ready`, stale keys dropped late
        self._queue = AdmissionQueue(settings)
        self._settings = settings
        # The capacity view: the latest report of each node (by `seq`), the nodes new
        # pods may land on in first-fit order (None: to be sorted again), and what
        # the active gangs hold of them (kept only with `capacityCheck`).
        self.nodes: dict[str, NodeCapacity] = {}
        self._schedulable: list[NodeCapacity] | None = None
        self._names: list[str] = []  # the names of `_schedulable`
        self._room: list[int] = []  # free GPUs after bound pods, by `_schedulable`
        self._room_at: dict[str, int] = {}  # node -> its place in `_schedulable`
        self._topology: list[Topology] = []  # the topology labels, by `_schedulable`
        self._domains: DomainIndex = {}  # their domains, grouped as passes need them
        self._holdings = Holdings()

    @property
    def settings(self) -> Settings:
        return self._settings

    @settings.setter
    def settings(self, settings: Settings) -> None:
        """New settings (e.g. a runtime change) may change the queue's order."""
        self._settings = settings
        self._queue.reorder(settings)
        self._holdings = Holdings()
        self._schedulable = None
        if settings.capacity_check:
            for key in self._active:
                self._holdings.update(self.workloads[key])

    def __iter__(self) -> Iterator[Workload]:
        return iter(self.workloads.values())

    def get(self, key: str) -> Workload | None:
        return self.workloads.get(key)

    def apply(self, event: Event, now: float) -> StepResult:
        """Apply one event; a node event goes to every active workload with pods on it.

        A node event that reports capacity also updates the capacity view; with
        `capacityCheck`, a change there may let a queued gang in.
        """
        result = StepResult()
        if type(event) is not NodeObserved or event.workload:
            self._apply_one(event, now, result)
            return result
        before = self.nodes.get(event.node)
        entry = observe_node(before, event)
        if entry is not None:
            self.nodes[event.node] = entry
            self._schedulable = None
            if self._settings.capacity_check and more_room(before, entry):
                if self.defer_admission:
                    result.admission_wanted = True
                else:
                    self._admission_pass(now, result)
        for key in sorted(self._active):
            w = self.workloads[key]
            if any(p.node == event.node and not p.retired for p in w.pods.values()):
                self._apply_one(
                    NodeObserved(event.node, event.ready, event.health, key), now, result
                )
        return result

    def admission_pass(self, now: float) -> StepResult:
        """Admit whatever may be admitted now (also after a settings change)."""
        result = StepResult()
        self._admission_pass(now, result)
        return result

    @property
    def queued(self) -> bool:
        """Whether any workload waits for admission (else a pass has nothing to plan)."""
        return bool(self._queue)

    def _admission_pass(self, now: float, result: StepResult) -> None:
        queued = len(self._queue)
        if not queued:
            return  # nothing queued: no plan to make (most passes on a busy cluster)
        for _ in range(queued + 1):
            self._usage.blocker = self._first_not_ready() if self.settings.block_admission else None
            plan = self._queue.plan(now, self._usage, self.fitter())
            result.plans.append(plan)
            if not plan.admit:
                break
            again = False
            for key in plan.admit:
                w = self.workloads[key]
                grant = AdmissionGranted(key, w.attempt + 1, plan.domain_of(key))
                again = self._decide(w, grant, now, result) or again
            if not again:
                break

    def fitter(self) -> Fitter | None:
        """The nodes' free GPUs for a pass (None without `capacityCheck`)."""
        if not self._settings.capacity_check:
            return None
        holdings = self._holdings
        if self._schedulable is None:
            ordered = self._schedulable = schedulable_order(self.nodes.values())
            self._names = [n.node for n in ordered]
            self._room = room(ordered, holdings.bound)
            self._room_at = {name: i for i, name in enumerate(self._names)}
            self._topology = [n.topology for n in ordered]
            self._domains = {}
        return Fitter.reserving(
            self._names,
            self._room,
            holdings.unplaced.values(),
            known=bool(self.nodes),
            topology=self._topology,
            domains=holdings.domains,
            index=self._domains,
        )

    def _apply_one(self, event: Event, now: float, result: StepResult) -> None:
        key = event.workload
        if self._forgotten and key in self._forgotten:
            raise ForgottenWorkload(
                f"{type(event).__name__} for {key!r}, which finished and was "
                "forgotten (forget_finished)"
            )
        if self._decide(self.workloads.get(key), event, now, result):
            if self.defer_admission:
                result.admission_wanted = True
            else:
                self._admission_pass(now, result)

    def _decide(self, w: Workload | None, event: Event, now: float, result: StepResult) -> bool:
        """Decide one event into `result`; True if the core asked for an admission pass."""
        decision = decide(w, event, self._settings, now, draw=self._draw(), details=self._details)
        outcome, stored = decision.outcome, decision.workload
        result.outcomes.append((event.workload, outcome, decision.note))
        wants = False
        if outcome is _APPLIED and stored is not None:
            wants = self._store(stored)
        effects = result.effects
        for effect in decision.effects:
            if type(effect) is RunAdmission:
                wants = True
            else:
                effects.append(effect)
        return wants

    def _store(self, w: Workload) -> bool:
        """Keep `w` and the indexes; True when a deleted workload's pods that outlived
        it are gone, which frees its quota (no decision asks for that pass)."""
        key, phase, workloads = w.key, w.phase, self.workloads
        old = workloads.get(key)
        workloads[key] = w
        if self._settings.capacity_check and (
            phase in ACTIVE_PHASES or (old is not None and old.phase in ACTIVE_PHASES)
        ):
            self._held_changed(self._holdings.update(w))
        outlived = key in self._outlived
        if old is not None and not outlived and _charged_alike(old, w):
            return False  # e.g. a pod event of a running gang: no index depends on what changed
        self._charge(old, w)
        if phase in NOT_READY_PHASES:
            if key not in self._not_ready:
                self._not_ready.add(key)
                heapq.heappush(self._not_ready_order, key)
        else:
            self._not_ready.discard(key)
        if phase is _PENDING or key in self._queue:
            self._queue.add(w)
        if self._forget and phase is _FINISHED and key not in self._outlived:
            del workloads[key]
            self._forgotten.add(key)
        return outlived and key not in self._outlived

    def _charge(self, old: Workload | None, w: Workload) -> None:
        """Move what `w` holds of the quotas from its old state to its new one: its own
        GPUs while admitted or outlived by its pods, and its predecessors' that run."""
        usage = self._usage
        for queue, gpus in self._charged.pop(w.key, ()):
            usage.cluster -= gpus
            usage.queues[queue] -= gpus
        active = w.phase in ACTIVE_PHASES
        charges = [(w.queue, w.gpus)] if active or outlived_by_pods(w) else []
        if w.predecessors:
            charges += charged_predecessors(w)
        for queue, gpus in charges:
            usage.cluster += gpus
            usage.queues[queue] = usage.queues.get(queue, 0) + gpus
        if charges:
            self._charged[w.key] = charges
        if active:
            self._active.add(w.key)
        else:
            self._active.discard(w.key)
        if charges and not active:
            self._outlived.add(w.key)
        else:
            self._outlived.discard(w.key)

    def _held_changed(self, nodes: Iterable[str]) -> None:
        """Bound GPUs changed on `nodes`: their room for the next pass, without a full sort."""
        if self._schedulable is None:
            return  # sorted again, with the room of every node, at the next pass
        bound, ordered, at = self._holdings.bound, self._schedulable, self._room_at
        for node in nodes:
            i = at.get(node)
            if i is not None:
                self._room[i] = room_on(ordered[i], bound)

    def _first_not_ready(self) -> str | None:
        """The `blockAdmission` holder: the first admitted-not-ready workload by key."""
        order = self._not_ready_order
        while order and order[0] not in self._not_ready:
            heapq.heappop(order)
        return order[0] if order else None

    def by_phase(self) -> dict[Phase, list[str]]:
        out: dict[Phase, list[str]] = {p: [] for p in Phase}
        for w in self.workloads.values():
            out[w.phase].append(w.key)
        return out


def _charged_alike(old: Workload, w: Workload) -> bool:
    """Whether `w`, not charged as a holder after its admission, is charged and indexed
    as `old` was: the same phase, GPUs and queue, not queued, carrying no predecessor's
    holding, and no pod of it heard running after its deletion."""
    return (
        old.phase is w.phase
        and old.gpus == w.gpus
        and old.queue == w.queue
        and w.phase is not _PENDING
        and not w.predecessors
        and not (w.phase is _FINISHED and outlived_by_pods(w))
    )
