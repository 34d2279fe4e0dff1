"""What the admission planner needs, read from the store: one way for every caller.

The admission pass, the sweeper (is anyone admissible that no pass has seen?)
and `muster status` (who may be admitted next, and why the others wait) all ask
the core's planner the same question, so they hand it the same inputs: the
queued workloads, the quota holders and, with `capacityCheck`, the nodes'
capacity and where the holders' pods are bound.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace

from muster.core import (
    ACTIVE_PHASES,
    AdmissionPlan,
    AdmissionQueue,
    Kind,
    Settings,
    Workload,
    plan_admission,
    plan_queue,
)
from muster.core.capacity import NodeCapacity
from muster.runtime.ports import WorkloadStore


@dataclass(frozen=True, slots=True)
class AdmissionInputs:
    """The queue, the quota holders and (with `capacityCheck`) the capacity view."""

    queued: Sequence[Workload]
    active: Sequence[Workload]
    nodes: Sequence[NodeCapacity] | None = None

    def plan(self, settings: Settings, now: float) -> AdmissionPlan:
        """The core's plan on these inputs (explaining every workload passed over)."""
        return plan_admission(self.queued, self.active, settings, now, nodes=self.nodes)

    def plan_queue(
        self, queue: AdmissionQueue, settings: Settings, now: float, *, explain: bool = False
    ) -> AdmissionPlan:
        """The core's plan for a queue the caller keeps across rounds (`queued` unused)."""
        return plan_queue(queue, self.active, settings, now, nodes=self.nodes, explain=explain)


@dataclass(slots=True)
class HoldingsReader:
    """Reads the nodes and each quota holder's pods at most once (per attempt) for a pass.

    The capacity check needs where the active gangs' pods are: one read per gang
    and one of the nodes. A pod bound after the read is still counted, as
    reserved for its gang, so reading once per pass is safe.
    """

    store: WorkloadStore
    _nodes: list[NodeCapacity] | None = None
    _placed: dict[str, Workload] = field(default_factory=dict)

    def inputs(
        self, settings: Settings, queued: Sequence[Workload], active: Sequence[Workload]
    ) -> AdmissionInputs:
        if not settings.capacity_check:
            return AdmissionInputs(queued, active)
        if self._nodes is None:
            self._nodes = self.store.nodes()
        return AdmissionInputs(queued, [self._with_pods(w) for w in active], self._nodes)

    def _with_pods(self, w: Workload) -> Workload:
        """`w` as the index shows it, with its pods as its item holds them."""
        known = self._placed.get(w.key)
        if known is None or known.attempt != w.attempt:
            known = self._placed[w.key] = stored(self.store, w)
        return replace(w, pods=known.pods)


def stored(store: WorkloadStore, w: Workload) -> Workload:
    """`w` as the store holds it, pods included (as the index showed it, if it is gone)."""
    found = store.load(w.key)
    return found.workload if found else w


def indexed_holders(store: WorkloadStore) -> list[Workload]:
    """The workloads the phase index shows holding quota (Admitted, Recovering, Running):
    eventually consistent, and read one phase at a time."""
    return [w for p in sorted(ACTIVE_PHASES) for w in store.by_phase(p.value)]


def quota_holders(store: WorkloadStore) -> list[Workload]:
    """Every workload holding quota, as its item holds it now.

    The admission ledger names every admission still holding (a consistent read,
    whatever phase changes land meanwhile); the phase index adds holders admitted
    before the ledger named them all (a deployment from before that), as it shows them.
    """
    named = store.ledger().recent
    held = [w for w in store.get_workloads(sorted(named)) if w.phase in ACTIVE_PHASES]
    return held + [w for w in indexed_holders(store) if w.key not in named]


def admission_inputs(
    store: WorkloadStore,
    settings: Settings,
    *,
    leave_out: Collection[str] = (),
    holders: Sequence[Workload] | None = None,
) -> AdmissionInputs:
    """The planner's inputs as the indexes show them now.

    `leave_out`: keys not to plan for; `holders`: the quota holders, if the caller
    has just read them (`quota_holders`). A pod group is read with its pods: whether
    it may be admitted depends on them, and the index holds none.
    """
    active = quota_holders(store) if holders is None else holders
    queued = [
        stored(store, w) if w.kind is Kind.POD_GROUP else w
        for w in store.pending()
        if w.key not in leave_out
    ]
    return HoldingsReader(store).inputs(settings, queued, active)
