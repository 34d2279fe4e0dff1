"""What the admission planner needs, read from the store: one way for every caller.

The admission pass, the sweeper (is anyone admissible that no pass has seen?)
and `muster status` (who may be admitted next, and why the others wait) all ask
the core's planner the same question, so they hand it the same inputs: the
queued workloads, the quota holders and, with `capacityCheck`, the nodes'
capacity and where the holders' pods are bound.

A quota holder is an admitted workload, or one the ledger still names after its
admission ended because that end has not taken effect on the cluster
(`core.admission.holds_quota`: an eviction not yet carried out, a deleted
workload whose pods still run). The second kind is read whole, pods and outbox.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
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
from muster.core.admission import holds_quota
from muster.core.capacity import NodeCapacity
from muster.runtime.ports import WorkloadStore


@dataclass(frozen=True, slots=True)
class AdmissionInputs:
    """The queue, the quota holders and (with `capacityCheck`) the capacity view.

    `active` are the admitted holders, `held` those holding quota after their
    admission ended (`core.admission.holds_quota`).
    """

    queued: Sequence[Workload]
    active: Sequence[Workload]
    nodes: Sequence[NodeCapacity] | None = None
    held: Sequence[Workload] = ()

    def plan(self, settings: Settings, now: float) -> AdmissionPlan:
        """The core's plan on these inputs (explaining every workload passed over)."""
        return plan_admission(
            self.queued, self.active, settings, now, nodes=self.nodes, held=self.held
        )

    def plan_queue(
        self, queue: AdmissionQueue, settings: Settings, now: float, *, explain: bool = False
    ) -> AdmissionPlan:
        """The core's plan for a queue the caller keeps across rounds (`queued` unused)."""
        return plan_queue(
            queue, self.active, settings, now, nodes=self.nodes, explain=explain, held=self.held
        )


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
        self, settings: Settings, queued: Sequence[Workload], holders: Sequence[Workload]
    ) -> AdmissionInputs:
        """The inputs for `queued` and the quota `holders` (admitted, or held after:
        `quota_holders`; the second kind comes with its pods)."""
        active = [w for w in holders if w.phase in ACTIVE_PHASES]
        held = [w for w in holders if w.phase not in ACTIVE_PHASES]
        if not settings.capacity_check:
            return AdmissionInputs(queued, active, held=held)
        if self._nodes is None:
            self._nodes = self.store.nodes()
        return AdmissionInputs(queued, [self._with_pods(w) for w in active], self._nodes, held)

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
    A workload it names that left the admitted phases holds on while the end of its
    admission has not taken effect (`still_holding`).
    """
    named = store.ledger().recent
    read = store.get_workloads(sorted(named))
    held = [w for w in read if w.phase in ACTIVE_PHASES]
    held += still_holding(store, named, [w for w in read if w.phase not in ACTIVE_PHASES])
    return held + [w for w in indexed_holders(store) if w.key not in named]


def still_holding(
    store: WorkloadStore, named: Mapping[str, int], left: Sequence[Workload]
) -> list[Workload]:
    """Of `left`, workloads out of the admitted phases whose ledger entry (`named`) is
    still there for their attempt, those that hold quota all the same
    (`core.admission.holds_quota`), read whole: pods, and the effects not yet carried out.

    Entries outlive a holding only while it ends on the cluster, so these are few.
    """
    found: list[Workload] = []
    for w in left:
        attempt = named.get(w.key)
        # A new object's record carrying its predecessor's holding may be named at the
        # predecessor's attempt (the entry is the key's).
        if attempt is None or (attempt != w.attempt and not w.predecessors):
            continue
        snap = store.load(w.key)
        if snap is not None and holds_quota(snap.workload, snap.outbox):
            found.append(snap.workload)
    return found


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
