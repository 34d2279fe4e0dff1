"""The capacity check at admission (`capacityCheck`): does a gang fit the nodes' free GPUs?

Quota says how many GPUs a queue may hold; it does not say whether a gang's pods
can land. Two gangs admitted on the same free GPUs each get some of their pods
placed and wait for the rest until their deadlines evict them (the deadlock that
`blockAdmission` avoids by admitting one workload at a time). With the check, a
candidate is admitted only if every pod of its gang fits on a schedulable node's
free GPUs, after the GPUs of pods already bound (Muster's, from the pods the
control plane tracks; others', as the agent reports them per node) and the GPUs
reserved for gangs admitted earlier whose pods are not placed yet. The pass
reserves what it admits, so two gangs are never admitted on the same free GPUs
in one pass or across passes (as far as the view knows: other schedulers, races
and pods the agent has not reported yet can still take the space, which is why
the readiness deadline still applies).

Placement is first fit over nodes in natural name order (`node-2` before
`node-10`), largest pods first: for pods of one size the number that fit does
not depend on the order, and first fit is what a bin-packing scheduler does.
Pods are handled as (count, GPUs each) groups, never one entry per pod: a Job
may ask for two billion pods, and the fit costs the same for it as for two.

Everything here is pure: the shells build the view from node events (ordered by
`seq`, stale ones ignored) and the pods they track.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from muster.core.model import ACTIVE_PHASES, NodeObserved, Phase, Workload
from muster.core.topology import (
    DomainIndex,
    Topology,
    domain_level,
    first_fit,
    indexed,
    pinned_node,
    reserve_in,
)

Shape = tuple[tuple[int, int], ...]  # (pods, GPUs each) groups
Pods = tuple[tuple[int, int], ...]  # (pods, GPUs each), largest first, one group per size


@dataclass(frozen=True, slots=True)
class NodeCapacity:
    """One node as the capacity check sees it (the latest report by `seq`)."""

    node: str
    seq: int = 0
    gpus: int = 0  # allocatable nvidia.com/gpu
    schedulable: bool = True  # new pods may land on it
    unschedulable: str | None = None  # why not: cordoned, NotReady, a taint, a health label
    foreign_gpus: int = 0  # held by pods Muster does not manage
    topology: Topology = ()  # its topology labels, widest level first (`core.topology`)

    @property
    def free(self) -> int:
        """GPUs not held by others' pods (Muster's own are subtracted by the pass)."""
        return max(0, self.gpus - self.foreign_gpus) if self.schedulable else 0


def observe_node(known: NodeCapacity | None, event: NodeObserved) -> NodeCapacity | None:
    """The node's new capacity entry, or None when the event changes nothing.

    An event without capacity (`gpus` None) is not about capacity; one not newer
    than what is known (by `seq`) is stale or a duplicate. A node reported NotReady
    takes no new pods whatever else it says.
    """
    if event.gpus is None:
        return None
    if known is not None and event.seq <= known.seq:
        return None
    schedulable = event.schedulable and event.ready
    why = event.unschedulable if not event.schedulable else None
    if not event.ready and why is None:
        why = "NotReady"
    return NodeCapacity(
        node=event.node,
        seq=event.seq,
        gpus=max(0, event.gpus),
        schedulable=schedulable,
        unschedulable=None if schedulable else why,
        foreign_gpus=max(0, event.foreign_gpus),
        topology=event.topology,
    )


def superseded(kept: NodeCapacity | None, report: NodeCapacity) -> bool:
    """Whether the node's kept report is newer than `report`: then what `report` says of
    the node's conditions is stale for its pods too (a NotReady delivered after the
    Ready that followed it changes nothing). An equal one is the same report again
    (a redelivery), which its pods still hear."""
    return kept is not None and kept.seq > report.seq


def more_room(before: NodeCapacity | None, after: NodeCapacity) -> bool:
    """Whether a node's new report may let a queued gang in (less room lets nobody in)."""
    return before is None or after.free > before.free or after.topology != before.topology


PACE_SECONDS = 5.0
"""At most one admission request per node-report window, and one trailing it."""


@dataclass(frozen=True, slots=True)
class Pace:
    """The requests a writer sent for node reports: the window's start, and whether a
    request trailing the window is already on its way."""

    since: float
    trailing: bool = False


def pace_request(
    pace: Pace | None, now: float, window: float = PACE_SECONDS
) -> tuple[float | None, Pace | None]:
    """After a report with more room: ask for a pass now (0.0), after a delay, or not
    at all (None), and the pace after that.

    Every report still gets a pass that starts after it: the first of a window asks
    at once, the others share one request sent for the window's end. A busy
    cluster's reports then ask for at most two passes per window, not one each.
    """
    if pace is None or now >= pace.since + window or now < pace.since:
        return 0.0, Pace(now)
    if not pace.trailing:
        return pace.since + window - now, Pace(pace.since, trailing=True)
    return None, pace


def pod_shape(w: Workload) -> Shape | None:
    """The gang's pods as (pods, GPUs each) groups; None when unknown.

    Reported by the agent from the pod templates; without a report, `gpus` spread
    evenly over `gang_size` pods when they divide evenly.
    """
    if w.shape:
        return w.shape
    if w.gang_size > 0 and w.gpus % w.gang_size == 0:
        return ((w.gang_size, w.gpus // w.gang_size),)
    return None


def gang_pods(w: Workload, shape: Shape) -> Pods:
    """The pods that must be placed for the gang to start, as (count, GPUs each)
    groups, largest first; pods without GPUs are left out (they need no room).

    A gang smaller than its pods (`muster.io/min-available`) needs only `gang_size`
    of them; the check asks for the largest ones, so it never under-counts.
    """
    return _gang_pods(shape, w.gang_size)


@lru_cache(maxsize=4096)
def _gang_pods(shape: Shape, gang_size: int) -> Pods:
    """`gang_pods` by shape (a busy queue holds many gangs of the same few shapes)."""
    merged: dict[int, int] = {}
    for count, gpus in shape:
        if count > 0:
            merged[gpus] = merged.get(gpus, 0) + count
    groups: list[tuple[int, int]] = []
    left = gang_size
    for gpus in sorted(merged, reverse=True):
        if left <= 0:
            break
        take = min(merged[gpus], left)
        left -= take
        if gpus > 0:
            groups.append((take, gpus))
    return tuple(groups)


def pod_count(pods: Pods) -> int:
    """How many pods the groups hold."""
    return sum(count for count, _ in pods)


def after_first(pods: Pods, placed: int) -> Pods:
    """The groups without their first `placed` pods (the largest, already placed)."""
    rest: list[tuple[int, int]] = []
    for count, gpus in pods:
        if placed >= count:
            placed -= count
            continue
        rest.append((count - placed, gpus))
        placed = 0
    return tuple(rest)


def _natural(name: str) -> tuple[tuple[int, str | int], ...]:
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", name) if part
    )


@dataclass(frozen=True, slots=True)
class FitSkip:
    """A candidate whose gang does not fit the free GPUs now."""

    workload: str
    pods: int  # of the size that did not fit
    gpus: int  # GPUs each
    fitting: int  # how many of those the free blocks hold
    largest: int  # the largest free block, on one node

    def __str__(self) -> str:
        need = f"needs {self.pods} \u00d7 {self.gpus} GPUs on one node each"
        if self.fitting == 0:
            return f"{need}; largest free block is {self.largest}"
        return f"{need}; free blocks hold {self.fitting} of them (largest {self.largest})"


def schedulable_order(nodes: Iterable[NodeCapacity]) -> list[NodeCapacity]:
    """The nodes new pods may land on, in the order first fit tries them."""
    return sorted((n for n in nodes if n.schedulable), key=lambda n: _natural(n.node))


def room(ordered: list[NodeCapacity], bound: dict[str, int]) -> list[int]:
    """Each node's free GPUs after Muster's bound pods (`room_on`, node by node)."""
    return [room_on(n, bound) for n in ordered]


def room_on(n: NodeCapacity, bound: dict[str, int]) -> int:
    """A node's free GPUs after Muster's bound pods.

    A node's bound pods are subtracted together: free GPUs never go below zero, and
    subtracting one pod at a time with that floor gives the same result.
    """
    return max(0, n.free - bound.get(n.node, 0))


class Holdings:
    """What Muster's own gangs hold of the nodes: GPUs of their bound pods per node,
    and the pods of admitted gangs not placed yet (reserved in admission order).

    Kept per workload, so a shell that holds every workload in memory updates it as
    each one changes instead of walking every active gang's pods at every pass.
    """

    __slots__ = ("_held", "bound", "domains", "unplaced")

    def __init__(self) -> None:
        self.bound: dict[str, int] = {}  # node -> GPUs of Muster's live pods bound there
        self.unplaced: dict[str, tuple[float, str, Pods]] = {}  # key -> (admitted, key, pods)
        self._held: dict[str, dict[str, int]] = {}  # key -> its part of `bound`
        self.domains: dict[str, str] = {}  # key -> the domain its unplaced pods are kept in

    def update(self, w: Workload) -> Iterable[str]:
        """Take `w` as it is now (holding nothing unless it is admitted); returns the
        nodes whose bound GPUs may have changed."""
        bound = self.bound
        before = self._held.pop(w.key, None)
        if before:
            for node, gpus in before.items():
                left = bound[node] - gpus
                if left:
                    bound[node] = left
                else:
                    del bound[node]
        self.unplaced.pop(w.key, None)
        self.domains.pop(w.key, None)
        if w.phase not in ACTIVE_PHASES:
            return before or ()
        shape = pod_shape(w)
        sizes = gang_pods(w, shape) if shape is not None else ()
        biggest = sizes[0][1] if sizes else 0
        placed = 0
        held: dict[str, int] = {}
        for pod in w.pods.values():
            if pod.node is None or not pod.live:
                continue
            placed += 1
            if biggest:
                held[pod.node] = held.get(pod.node, 0) + biggest
        if held:
            self._held[w.key] = held
            for node, gpus in held.items():
                bound[node] = bound.get(node, 0) + gpus
        if placed < pod_count(sizes):
            self.unplaced[w.key] = (w.admitted_at or 0.0, w.key, after_first(sizes, placed))
            if w.domain:
                self.domains[w.key] = w.domain
        if not before:
            return held
        if held == before:
            return ()
        return before.keys() | held.keys()

    def still_bound(self, w: Workload) -> None:
        """Take `w`'s bound pods, evicted on the record but not yet withdrawn from the
        cluster: retired, yet where they were until the withdrawal takes effect.

        A deleted workload's pods that outlive it are left out: with no workload to
        belong to they are others' pods, which the agent counts on their nodes.
        """
        if w.phase is Phase.FINISHED or w.key in self._held:
            return
        shape = pod_shape(w)
        sizes = gang_pods(w, shape) if shape is not None else ()
        biggest = sizes[0][1] if sizes else 0
        held: dict[str, int] = {}
        for pod in w.pods.values():
            if pod.node is None or pod.deleted or pod.phase in ("Succeeded", "Failed"):
                continue
            held[pod.node] = held.get(pod.node, 0) + biggest
        if biggest and held:
            self._held[w.key] = held
            for node, gpus in held.items():
                self.bound[node] = self.bound.get(node, 0) + gpus


@dataclass(slots=True)
class Fitter:
    """Free GPUs per schedulable node during one admission pass; admissions reserve them."""

    names: list[str] = field(default_factory=list)
    free: list[int] = field(default_factory=list)
    # A pod of this many GPUs or more fits on no node any more in this pass (free GPUs
    # only shrink), so the many candidates a busy queue holds fail without a scan.
    no_room_from: float = float("inf")
    # Has any node reported its capacity (schedulable or not)? Without a report the
    # check cannot judge anyone, and gangs are admitted on quota alone.
    known: bool = True
    # Each node's topology labels, by `names`, and their domains (`core.topology`).
    topology: list[Topology] = field(default_factory=list)
    domains: DomainIndex = field(default_factory=dict)
    # (level, pods) that fit no domain of the level in this pass, with the most of
    # them one domain held then: free GPUs only shrink, so the answer stands.
    no_domain: dict[tuple[str, Pods], tuple[int, int]] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        nodes: Iterable[NodeCapacity],
        active: Iterable[Workload] = (),
        held: Iterable[Workload] = (),
    ) -> Fitter:
        """The free GPUs after others' pods, Muster's bound pods and earlier reservations.

        `active` are the workloads that hold quota, with their pods: a live pod bound
        to a node uses its GPUs there; the gang's other pods are reserved in the
        order the gangs were admitted, wherever they fit. `held` hold quota after
        their admission ended (`admission.holds_quota`): their pods still bound use
        their GPUs too.
        """
        nodes = list(nodes)
        holdings = Holdings()
        for w in active:
            holdings.update(w)
        for w in held:
            holdings.still_bound(w)
        fitter = cls.within(schedulable_order(nodes), holdings)
        fitter.known = bool(nodes)
        return fitter

    @classmethod
    def within(cls, ordered: list[NodeCapacity], holdings: Holdings) -> Fitter:
        """`of`, from the schedulable nodes in order and Muster's holdings."""
        return cls.reserving(
            [n.node for n in ordered],
            room(ordered, holdings.bound),
            holdings.unplaced.values(),
            topology=[n.topology for n in ordered],
            domains=holdings.domains,
        )

    @classmethod
    def reserving(
        cls,
        names: list[str],
        free: list[int],
        unplaced: Iterable[tuple[float, str, Pods]],
        *,
        known: bool = True,
        topology: list[Topology] | None = None,
        domains: Mapping[str, str] | None = None,
        index: DomainIndex | None = None,
    ) -> Fitter:
        """The nodes' free GPUs after bound pods (`room`), less the pods of gangs admitted
        earlier and not placed yet, reserved in the order they were admitted (those
        admitted into a topology domain, `domains`, inside it). `index`: the nodes'
        domains grouped, kept by a caller whose nodes have not changed since."""
        fitter = cls(names, list(free), known=known, topology=topology or [])
        if index is not None:
            fitter.domains = index
        at: dict[str, int] | None = None
        for _, key, rest in sorted(unplaced):
            domain = domains.get(key) if domains else None
            node = pinned_node(domain) if domain else None
            if node is not None:  # packed onto one node (`core.packing`): kept there
                at = at if at is not None else {name: i for i, name in enumerate(names)}
                if node in at:
                    first_fit(fitter.free, (at[node],), rest)
            elif domain and fitter.topology:
                found = indexed(fitter.domains, fitter.topology, domain_level(domain))
                reserve_in(fitter.free, found, domain, rest)
            else:
                fitter.reserve(rest)
        return fitter

    def reserve(self, sizes: Pods) -> None:
        """Take what fits of `sizes` (a gang admitted earlier: some of it may be placed)."""
        self._first_fit(self.free, sizes, partial=True)

    def place(self, sizes: Pods) -> FitSkip | None:
        """Reserve the gang's pods (largest first) if all fit; else say why not (nothing taken)."""
        if sizes and sizes[0][1] >= self.no_room_from:
            count, gpus = sizes[0]
            return FitSkip("", count, gpus, 0, max(self.free, default=0))
        free = list(self.free)
        failed = self._first_fit(free, sizes, partial=False)
        if failed is None:
            self.free = free
            return None
        index, fitting = failed
        count, gpus = sizes[index]
        if index == 0 and fitting == 0:
            self.no_room_from = min(self.no_room_from, gpus)
        return FitSkip("", count, gpus, fitting, max(self.free, default=0))

    @staticmethod
    def _first_fit(free: list[int], sizes: Pods, *, partial: bool) -> tuple[int, int] | None:
        """Place `sizes` (largest first) into `free`: (the group that did not fit, how
        many of its pods did), or None when all did.

        First fit, pod after pod, fills a node with pods of one size until it has no
        room for another and then goes on to the next node: so each node takes as
        many of a group as fit, in one step, whatever the group's count.
        """
        for index, (count, gpus) in enumerate(sizes):
            left = count
            for i, room in enumerate(free):
                if room >= gpus:
                    take = min(left, room // gpus)
                    free[i] = room - take * gpus
                    left -= take
                    if not left:
                        break
            if left and not partial:
                return index, count - left
        return None


def overcommitted(nodes: Iterable[NodeCapacity], active: Iterable[Workload]) -> list[str]:
    """Gangs admitted on GPUs that other gangs hold or were promised (what the check prevents).

    Bound pods count where they are; each gang's other pods, in admission order,
    must fit in what is left. Returns the gangs whose pods do not. Only what the
    view knows is judged: pods on nodes it has no report of are not counted, and
    bound pods beyond a node's GPUs (the view learnt of one gang's end after the
    scheduler reused its GPUs) are the view being late, not a promise broken.
    """
    fitter = Fitter.of(nodes, ())
    index = {name: i for i, name in enumerate(fitter.names)}
    found: list[str] = []
    unplaced: list[tuple[float, str, Pods]] = []
    for w in active:
        if w.phase not in ACTIVE_PHASES:
            continue
        shape = pod_shape(w)
        if shape is None or w.placement:
            continue  # admitted on quota alone: nothing was promised
        sizes = gang_pods(w, shape)
        placed = 0
        for pod in w.pods.values():
            if pod.node is None or not pod.live or not sizes:
                continue
            placed += 1
            at = index.get(pod.node)
            if at is not None:
                fitter.free[at] -= sizes[0][1]
        if placed < pod_count(sizes):
            unplaced.append((w.admitted_at or 0.0, w.key, after_first(sizes, placed)))
    fitter.free = [max(0, room) for room in fitter.free]
    for _, key, rest in sorted(unplaced):
        if fitter.place(rest) is not None:
            found.append(key)
    return found


def fallback_reason(w: Workload, known: bool) -> str | None:
    """Why the check cannot judge `w` (it is admitted on quota alone), or None."""
    if not known:
        return "no node has reported its capacity yet"
    if w.placement:
        return f"its pods set {w.placement}, which the check does not evaluate"
    if pod_shape(w) is None:
        return f"its pod sizes are unknown ({w.gpus} GPUs over {w.gang_size} pods)"
    return None


def fit(
    fitter: Fitter, w: Workload, known: bool, *, dry_run: bool = False
) -> tuple[FitSkip | None, str | None]:
    """(why `w` does not fit, why the check fell back to quota for it); reserves on success.

    In a `dryRun` queue the check holds nothing back: a gang that does not fit is
    admitted on quota, and the note says what the check would have done.
    """
    reason = fallback_reason(w, known)
    if reason is not None:
        shape = pod_shape(w)
        if shape is not None and known:
            fitter.reserve(gang_pods(w, shape))  # best effort: others see it as taken
        return None, f"capacity check not applied: {reason}; judged on quota alone"
    shape = pod_shape(w)
    assert shape is not None
    sizes = gang_pods(w, shape)
    skip = fitter.place(sizes)
    if skip is not None:
        found = FitSkip(w.key, skip.pods, skip.gpus, skip.fitting, skip.largest)
        if dry_run:
            fitter.reserve(sizes)
            return None, f"dry run: the capacity check would hold it back ({found})"
        return found, None
    return None, None


__all__ = [
    "FitSkip",
    "Fitter",
    "Holdings",
    "NodeCapacity",
    "Pods",
    "Shape",
    "after_first",
    "fallback_reason",
    "fit",
    "gang_pods",
    "more_room",
    "observe_node",
    "overcommitted",
    "pod_count",
    "pod_shape",
    "room",
    "room_on",
    "schedulable_order",
]
