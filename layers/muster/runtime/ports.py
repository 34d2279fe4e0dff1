"""The ports of the runtime: the cluster, state, timers, queues, the bus and metrics.

`ControlPlane` depends on these small interfaces only; `muster.aws` implements
them with DynamoDB, Step Functions, SQS, EventBridge and CloudWatch EMF, and
`muster.runtime.memory` with dictionaries for unit tests.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from muster.core import Effect, LogEvent, Pod, SnapshotPart, Timer, Workload
from muster.core.admission import holds_quota
from muster.core.capacity import NodeCapacity
from muster.core.model import ACTIVE_PHASES, Admit, Evict, Kind
from muster.core.predecessors import held_by_predecessors

# Rules every store applies to the pods it reads back, the in-memory one and DynamoDB's.


def settle_pod(pod: Pod, pod_epoch: int, epoch: int) -> Pod:
    """A pod written before the workload's last eviction belongs to the evicted attempt."""
    if pod_epoch < epoch and not pod.retired:
        return replace(pod, retired=True, ready=False)
    return pod


def belongs(owner: str, uid: str) -> bool:
    """Was a pod item written for this incarnation of its workload?"""
    return not owner or not uid or owner == uid


class Conflict(Exception):
    """A conditional write lost a race; re-read and decide again."""


@dataclass(frozen=True, slots=True)
class Quarantine:
    """A workload whose effects could not be carried out after a bounded number of tries.

    Its outbox is kept, nothing more is done for it, and every other workload
    goes on; an administrator releases it once the cause is fixed.
    """

    error: str
    effect: str
    tries: int
    since: float


@dataclass(frozen=True, slots=True)
class Stored:
    """A workload as read (consistently), with what conditional writes need.

    `version` guards the workload item; `pod_revs` guard each pod item; `epoch` is
    bumped by every eviction so that all pods of the evicted attempt count as
    retired without rewriting each of them; `outbox` holds effects of the last
    committed decision that were not yet carried out.
    """

    workload: Workload
    version: int
    epoch: int = 0
    pod_revs: Mapping[str, int] = field(default_factory=dict)
    outbox: tuple[Effect, ...] = ()
    ready_count: int = 0  # pods counting ready, kept beside the pods by every pod write
    failures: int = 0  # failed tries at carrying out the outbox
    quarantine: Quarantine | None = None
    # Pods of a finished (or replaced) incarnation are still to be set to expire:
    # whoever next loads the workload carries it on (`expire_leftover_pods`).
    expiring: bool = False
    live_count: int | None = 0  # live pods, kept as `ready_count` is (None: not kept yet)


@dataclass(frozen=True, slots=True)
class StoredPod:
    """The workload item without the gang, and one pod: what a pod event needs first.

    `ready_count` is maintained atomically with every pod write, so a pod event
    loads the whole gang only when the count says the gang may have become whole
    (or stopped being whole). `live_count`, the pods alive, is kept the same way: a
    pod group's admission depends on it. None: an item written before it was kept
    (its pod events take the whole gang until its next eviction resets it).
    """

    workload: Workload  # without pods
    version: int
    epoch: int
    ready_count: int
    outbox: tuple[Effect, ...] = ()
    pod: Pod | None = None
    rev: int | None = None
    live_count: int | None = 0
    failures: int = 0  # failed tries at carrying out the outbox


@dataclass(frozen=True, slots=True)
class StoredPods:
    """The workload item without the gang, and the named pods: what a run of pod events
    of one gang needs (`pods`: those of this incarnation, settled; `revs`: every named
    pod item found, whoever it belongs to)."""

    workload: Workload  # without pods
    version: int
    epoch: int
    ready_count: int
    outbox: tuple[Effect, ...] = ()
    pods: Mapping[str, Pod] = field(default_factory=dict)
    revs: Mapping[str, int] = field(default_factory=dict)
    live_count: int | None = 0
    failures: int = 0  # failed tries at carrying out the outbox


MAX_POD_WRITES = 99
"""Pods in one `write_pods`: a DynamoDB transaction holds at most 100 items, one is the count."""


@dataclass(frozen=True, slots=True)
class PodWrite:
    """Put `pod` (or delete `name` when `pod` is None) if its revision is still `expected`."""

    name: str
    pod: Pod | None
    expected: int | None  # None: the pod must not exist yet
    owner: str = ""  # the uid of the workload incarnation the pod belongs to
    # (revision, uid) the last complete pod listing held under this name, as loaded
    # (`muster.runtime.listing`): the item keeps it when the new record no longer
    # stands for it. None: no listing named it.
    listed: tuple[int, str] | None = None


@dataclass(frozen=True, slots=True)
class Ledger:
    """The admission ledger: a version that every admission moves, and the quota holders.

    Every admission commits on `version`, so two racing passes cannot both admit.
    `recent` names every workload admitted and still holding quota (workload ->
    attempt): the admission puts its entry, and the write that takes it out of
    the active phases removes it, in one transaction each, so a consistent read
    of the ledger names every holder however phase changes interleave with it
    (the phase index, eventually consistent and read one phase at a time, may
    not). Entries left by workloads that stopped holding some other way are
    removed by a pass that reads them consistently (`forget_recent`).
    """

    version: int = 0
    recent: Mapping[str, int] = field(default_factory=dict)


def stops_holding(before: Stored | None, after: Workload, outbox: Sequence[Effect] = ()) -> bool:
    """Whether this write (of `after` with `outbox`) ends the workload's holding of quota.

    Not an eviction whose withdrawal is still in the outbox, nor the deletion of a
    workload whose pods outlive it (`core.admission.holds_quota`): their ledger
    entry stays, and goes once the withdrawal is carried out (`forget_recent`) or
    the pods are gone (a pass that reads the workload then drops it).
    """
    return (
        before is not None
        and holds_quota(before.workload, before.outbox)
        and (
            not holds_quota(after, outbox)
            or (after.uid != before.workload.uid and not held_by_predecessors(after))
        )
    )


def starts_holding(before: Stored | None, after: Workload, outbox: Sequence[Effect] = ()) -> bool:
    """Whether this write starts a holding of quota no admission recorded: a deleted
    workload's pod, or a predecessor's, heard of running after the holding had ended."""
    return (
        before is not None
        and not holds_quota(before.workload, before.outbox)
        and after.phase not in ACTIVE_PHASES
        and holds_quota(after, outbox)
    )


class WorkloadStore(Protocol):
    def load(self, key: str) -> Stored | None: ...

    def load_pod(self, key: str, pod: str | None) -> StoredPod | None:
        """The workload item and (when named) one pod item, read consistently."""
        ...

    def write_pod(
        self,
        key: str,
        write: PodWrite,
        epoch: int,
        ready_delta: int,
        now: float = 0.0,
        *,
        live_delta: int = 0,
    ) -> None:
        """One pod; with non-zero deltas, atomically with the ready and live counts (same
        epoch only).

        A tombstone (a deleted pod), or a pod of a finished workload, expires on its own.
        """
        ...

    def load_pods(self, key: str, names: Sequence[str]) -> StoredPods | None:
        """The workload item and the named pod items, read consistently."""
        ...

    def write_pods(
        self,
        key: str,
        writes: Sequence[PodWrite],
        epoch: int,
        ready_delta: int,
        now: float = 0.0,
        *,
        live_delta: int = 0,
    ) -> None:
        """Pods (at most `MAX_POD_WRITES`), each on its revision, with the summed changes of
        the counts (same epoch only), all or none; as `write_pod` otherwise."""
        ...

    def write_workload(
        self,
        before: Stored | None,
        after: Workload,
        epoch: int,
        outbox: Sequence[Effect],
        now: float,
        pods: Sequence[PodWrite] = (),
        ready_delta: int = 0,
        *,
        live_delta: int = 0,
        expiring: bool = False,
    ) -> int:
        """The workload (on its version) with its pod writes, atomically; a new epoch resets the
        counts (to the deltas: what the pods written with it count).

        `expiring`: the write ends an incarnation (finished, or replaced by a new
        object); it records that the pods stored so far (all of them if `after` is
        finished, else those not of `after`'s uid) are to expire, which
        `expire_leftover_pods` then carries out.
        """
        ...

    def clear_outbox(self, key: str, version: int) -> None:
        """The outbox was carried out: remove it and its failed tries (on `version`)."""
        ...

    def record_failure(self, key: str, version: int, error: str) -> int:
        """One more failed try at the outbox of `version`; returns the tries so far."""
        ...

    def quarantine(self, key: str, version: int, quarantine: Quarantine) -> None: ...

    def release(self, key: str) -> bool:
        """Lift a quarantine (False if there was none); the outbox is tried again."""
        ...

    def quarantined(self) -> list[tuple[str, Quarantine]]: ...

    def expire_pods(self, key: str, names: Sequence[str], now: float) -> None:
        """These pods (of a finished incarnation): set to expire, off the node index."""
        ...

    def expire_leftover_pods(self, key: str) -> bool:
        """Carry out (or on) the expiry a write with `expiring` recorded, in chunks;
        idempotent and resumable. True when nothing is left to expire."""
        ...

    def expiring(self) -> list[str]:
        """Workloads with pods still to be set to expire (for the sweeper)."""
        ...

    def put_snapshot_part(self, part: SnapshotPart, now: float) -> list[SnapshotPart] | None:
        """Keep one part of a cluster snapshot; all its parts once every one has arrived."""
        ...

    def snapshot_revision(self, scope: str) -> int:
        """The revision of the last complete snapshot of `scope` acted on (0: none)."""
        ...

    def set_snapshot_revision(self, scope: str, revision: int) -> None:
        """Record that the snapshot of `scope` at `revision` was acted on (never moves back)."""
        ...

    def snapshot_parts(self, scope: str, snapshot: str) -> list[SnapshotPart]:
        """The parts of a snapshot kept so far (all of them once it is complete)."""
        ...

    def open_slices(self, scope: str, snapshot: str, count: int, now: float) -> list[int]:
        """Open slices 1..`count` of a snapshot's reconciliation, once (a second call keeps
        the first's); returns the numbers of those not yet done."""
        ...

    def close_slice(self, scope: str, snapshot: str, number: int) -> int:
        """One slice done (again: no change); how many of the snapshot's remain open."""
        ...

    def workloads_on_node(self, node: str) -> list[str]: ...

    def put_node(
        self, node: NodeCapacity, now: float | None = None
    ) -> tuple[bool, NodeCapacity | None]:
        """Keep a node's capacity report if it is newer (by `seq`) than the one kept:
        (whether it was kept, the report it replaced, or the one kept instead). A
        deleted node's report (`NODE_DELETED`) is kept only to order later ones, and
        expires."""
        ...

    def nodes(self) -> list[NodeCapacity]:
        """Every node's latest capacity report (the capacity view), read consistently;
        deleted nodes left out."""
        ...

    def pending(self) -> list[Workload]: ...

    def unsettled(self, phase: str) -> list[str]:
        """Workloads of `phase` whose outbox is not empty (from the phase index)."""
        ...

    def get_workloads(
        self,
        keys: Iterable[str],
        unsettled: set[str] | None = None,
        quarantined: set[str] | None = None,
    ) -> list[Workload]:
        """Consistent reads without pods; adds to `unsettled` the keys with an outbox
        and to `quarantined` the quarantined ones."""
        ...

    def ledger(self) -> Ledger: ...

    def ledger_version(self) -> int:
        """The ledger's version alone (a consistent read of one small item)."""
        ...

    def admit(
        self,
        before: Stored,
        after: Workload,
        outbox: Sequence[Effect],
        ledger: Ledger,
        now: float,
    ) -> int:
        """The admission, on the workload's and the ledger's versions, recorded as recent."""
        ...

    def forget_recent(self, entries: Mapping[str, int]) -> None:
        """Drop ledger entries (workload -> attempt) of workloads read consistently as no
        longer holding that attempt; an entry of a newer attempt stays. Never fails."""
        ...

    def hold_again(self, key: str, attempt: int) -> None:
        """Name `key` in the ledger again (at `attempt`), moving the ledger's version: a
        write about to be made starts a holding that had ended (pods of a deleted
        workload heard of running after it), and a pass that read the ledger before
        must not commit an admission on the quota it thought free."""
        ...

    def append_history(
        self,
        key: str,
        version: int,
        index: int,
        event: LogEvent,
        detail: Mapping[str, Any],
        at: float,
    ) -> None: ...

    def history(self, key: str) -> list[dict[str, Any]]: ...

    def by_phase(self, phase: str) -> list[Workload]: ...

    def settings_record(self) -> tuple[dict[str, Any], int] | None: ...

    def put_settings_record(self, doc: Mapping[str, Any], expected: int | None) -> None: ...


class Timers(Protocol):
    def start(self, workload: str, timer: Timer) -> None: ...

    def stop(self, workload: str, timer: Timer) -> None: ...


class Messages(Protocol):
    """The admission queue: delayed requeues and admission-pass requests."""

    def requeue(self, workload: str, count: int, delay: float) -> None: ...

    def request_admission(
        self, reason: str, workload: str | None, *, retry: int = 0, delay: float = 0.0
    ) -> None:
        """Ask for a pass; `retry` > 0 is a pass that failed before, sent with a backoff;
        `delay`: not before that many seconds."""
        ...

    def deadline_later(self, workload: str, timer: Timer, delay: float) -> None:
        """The timer's "deadline reached" signal again after `delay` (re-arming an early one)."""
        ...


class Bus(Protocol):
    def publish(
        self, event: LogEvent, workload: str, detail: Mapping[str, Any], event_id: str, at: float
    ) -> None: ...


class Metrics(Protocol):
    def count(self, name: str, value: float = 1, **dimensions: str) -> None: ...

    def seconds(self, name: str, value: float, **dimensions: str) -> None: ...


def workload_state(w: Workload | None) -> Workload | None:
    """The workload without its pods, and of its pod listing only the revision: what
    the workload item stores (the stores keep the listing on the pod items)."""
    return None if w is None else replace(w, pods={}, listed={})


class WorkloadGone(Exception):
    """The workload no longer exists in the cluster; the core should mark it Finished."""

    def __init__(self, workload: str) -> None:
        super().__init__(f"workload {workload} no longer exists")
        self.workload = workload


class ClusterActions(Protocol):
    """What the control plane does to a cluster. Every call must be idempotent.

    `admit` releases the workload (unsuspend, or lift the scheduling gate);
    `evict` withdraws it (suspend, or delete a pod group's pods); `record` writes
    Muster's view (phase, attempt, reason) onto the workload for `kubectl` users.
    Each raises `WorkloadGone` when the workload has been deleted.
    """

    def admit(self, effect: Admit) -> None: ...

    def evict(self, effect: Evict) -> None: ...

    def record(self, workload: str, kind: Kind, view: Mapping[str, str]) -> None: ...


@runtime_checkable
class WorkloadAnnouncer(Protocol):
    """Shows a lifecycle event where the workload's users look (Kubernetes Events).

    Best effort: the caller logs a failure and carries on; `key` is the lifecycle
    event's idempotency key, so a retried effect announces nothing twice.
    """

    def announce(
        self,
        workload: str,
        kind: Kind,
        event: LogEvent,
        detail: Mapping[str, Any],
        *,
        key: str,
        at: float,
    ) -> None: ...


@dataclass
class RecordingCluster:
    """An in-memory `ClusterActions` for tests and the simulator: it records every call.

    `gone` lists workloads that behave as deleted; `fail_next` makes the next call
    raise the given exception once (to inject API failures).
    """

    calls: list[tuple[str, str, int]] = field(default_factory=list)
    views: dict[str, dict[str, str]] = field(default_factory=dict)
    announced: list[tuple[str, str]] = field(default_factory=list)  # (workload, event)
    gone: set[str] = field(default_factory=set)
    fail_next: Exception | None = None

    def _check(self, workload: str) -> None:
        if self.fail_next is not None:
            error, self.fail_next = self.fail_next, None
            raise error
        if workload in self.gone:
            raise WorkloadGone(workload)

    def admit(self, effect: Admit) -> None:
        self._check(effect.workload)
        self.calls.append(("admit", effect.workload, effect.attempt))

    def evict(self, effect: Evict) -> None:
        self._check(effect.workload)
        self.calls.append(("evict", effect.workload, effect.attempt))

    def record(self, workload: str, kind: Kind, view: Mapping[str, str]) -> None:
        self._check(workload)
        self.views[workload] = dict(view)

    def announce(
        self,
        workload: str,
        kind: Kind,
        event: LogEvent,
        detail: Mapping[str, Any],
        *,
        key: str,
        at: float,
    ) -> None:
        self._check(workload)
        self.announced.append((workload, event.value))
