"""The vocabulary of the decision core: workload states, events in, effects out.

Names follow Kueue's `waitForPodsReady` (conditions, reasons, causes) so that an
administrator who knows Kueue reads Muster's logs and history without a glossary.
Everything here is immutable; the core returns new values instead of mutating.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from operator import attrgetter
from typing import Any

from muster.core.copying import fast_init


class Phase(StrEnum):
    """Where a workload is in its lifecycle; every workload is in exactly one."""

    PENDING = "Pending"  # queued, admissible once its backoff (if any) has passed
    ADMITTED = "Admitted"  # admitted, waiting for all pods Ready (WaitForStart)
    RUNNING = "Running"  # PodsReady
    RECOVERING = "Recovering"  # was PodsReady, lost a pod (WaitForRecovery)
    REQUEUED = "Requeued"  # evicted, waiting out its backoff
    DEACTIVATED = "Deactivated"  # requeuing limit exceeded; `muster reactivate` revives it
    FINISHED = "Finished"  # succeeded, failed or deleted


ACTIVE_PHASES = frozenset({Phase.ADMITTED, Phase.RUNNING, Phase.RECOVERING})
"""Phases that hold quota on the cluster."""

NOT_READY_PHASES = frozenset({Phase.ADMITTED, Phase.RECOVERING})
"""Admitted but not PodsReady: these block admission under `blockAdmission`."""

TERMINAL_PHASES = frozenset({Phase.FINISHED})


class Kind(StrEnum):
    """Workload kinds Muster can hold and release."""

    JOB = "Job"
    JOBSET = "JobSet"
    PYTORCHJOB = "PyTorchJob"
    POD_GROUP = "PodGroup"


class Reason(StrEnum):
    """Reasons and causes, with Kueue's spelling."""

    PODS_READY_TIMEOUT = "PodsReadyTimeout"
    WAIT_FOR_START = "WaitForStart"
    WAIT_FOR_RECOVERY = "WaitForRecovery"
    NODE_FAILURES = "NodeFailures"
    STARTED = "Started"
    RECOVERED = "Recovered"
    BACKOFF_FINISHED = "BackoffFinished"
    REQUEUING_LIMIT_EXCEEDED = "RequeuingLimitExceeded"
    DEACTIVATED = "Deactivated"  # the eviction that deactivates (Kueue's Evicted reason)
    REACTIVATED = "Reactivated"
    # Failure-aware retry (`workloadFaults`): an early eviction of a gang whose
    # not-ready pods all fail on their own, and the deactivation after too many.
    WORKLOAD_FAULT = "WorkloadFault"
    WORKLOAD_FAULTS = "WorkloadFaults"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    DELETED = "Deleted"
    # The cluster refused to release the workload (403, 422): the attempt is withdrawn.
    ADMISSION_REFUSED = "AdmissionRefused"
    # An admitted workload asks for more pods or GPUs than it was admitted with.
    OUTGREW_ADMISSION = "OutgrewAdmission"


class TimerKind(StrEnum):
    STARTUP = "startup"  # from admission until all pods Ready
    RECOVERY = "recovery"  # from losing a Ready pod until whole again
    FAULT = "fault"  # from every not-ready pod failing on its own until `evictAfter`


class LogEvent(StrEnum):
    """Event-log names: history entries, bus detail-types (`Workload <name>`), metrics."""

    SUBMITTED = "Submitted"
    ADMITTED = "Admitted"
    PODS_READY = "PodsReady"
    WAIT_FOR_RECOVERY = "WaitForRecovery"
    EVICTED = "Evicted"
    REQUEUED = "Requeued"
    BACKOFF_FINISHED = "BackoffFinished"
    DEACTIVATED = "Deactivated"
    REACTIVATED = "Reactivated"
    FINISHED = "Finished"


# --------------------------------------------------------------------------- state


@dataclass(frozen=True, slots=True)
class Pod:
    """The last known status of one pod of a gang."""

    name: str
    seq: int
    uid: str = ""
    phase: str = "Pending"  # Kubernetes pod phase
    ready: bool = False
    node: str | None = None
    reason: str | None = None  # why it is not ready (e.g. Unschedulable, ImagePullBackOff)
    message: str | None = None
    retired: bool = False  # belonged to an evicted attempt; ignored until replaced
    # A tombstone: the pod was deleted at `seq`; later events of this uid are stale.
    deleted: bool = False
    # Its node reported NotReady (at `node_seq`) after the pod's last report.
    node_down: bool = False
    node_seq: int = 0
    # What Kubernetes says about it, for telling a broken job from a busy cluster
    # (None / 0 when the agent did not say: events of older agents).
    scheduled: bool | None = None  # the PodScheduled condition
    waiting: str | None = None  # a container's waiting reason (ImagePullBackOff, ...)
    restarts: int = 0  # the most restarts of any of its containers
    terminated: str | None = None  # that container's last termination reason (OOMKilled, ...)
    exit_code: int | None = None  # and its exit code

    @property
    def counts_ready(self) -> bool:
        """Kueue counts a pod as ready when it is Ready or has already Succeeded."""
        if self.retired or self.deleted:
            return False
        return (self.ready and not self.node_down) or self.phase == "Succeeded"

    @property
    def live(self) -> bool:
        return not self.retired and not self.deleted and self.phase not in ("Succeeded", "Failed")


_by_name = attrgetter("name")


@dataclass(frozen=True, slots=True)
class Holding:
    """What an earlier object under a workload's key still holds once a new object took
    the key: deleted while it held quota, its pods ran on (orphaned, or terminating).
    Charged to its own queue while any of its pods has not ended (`core.predecessors`)."""

    uid: str
    queue: str
    gpus: int
    pods: Mapping[str, Pod] = field(default_factory=dict)
    # Admitted when the new object was heard of, no pod of it known: its pods may run
    # unheard (an agent gap), so it is charged until one is heard of or a pod listing.
    presumed: bool = False


@dataclass(frozen=True, slots=True)
class Timer:
    """An armed deadline; (workload, attempt, kind, episode) names it uniquely."""

    kind: TimerKind
    attempt: int
    episode: int
    deadline: float
    incarnation: str = ""  # the workload object's uid (a prefix): timers of an older object differ


@dataclass(frozen=True)
class Workload:
    """One gang: what it asks for, where it is, and what has happened to it.

    Without slots: `replace` copies its many fields in one step (see `copying`).
    """

    key: str  # "namespace/name"; the simulator uses bare names
    queue: str
    gang_size: int  # pods that must be Ready together
    gpus: int = 0  # GPUs the whole gang requests (for quotas)
    priority: int = 0
    kind: Kind = Kind.JOB
    created_at: float = 0.0
    timeout_override: float | None = None  # the workload's own timeout (annotation)
    spec_seq: int = 0
    uid: str = ""  # the object's uid: a new object under the same key is a new incarnation
    born_seq: int = 0  # the revision it was first seen at: its pods are all newer
    # The last complete snapshot of the cluster's pods: its revision, and this
    # workload's pods in it (name -> uid). An older event of a pod not listed is stale.
    listed_seq: int = 0
    listed: Mapping[str, str] = field(default_factory=dict)
    # A spec change seen while admitted ("queue", "gangSize", "gpus", "timeoutOverride"),
    # applied when the workload next holds nothing (one that asks for more evicts it).
    next_spec: Mapping[str, Any] | None = None

    phase: Phase = Phase.PENDING
    attempt: int = 0  # admissions so far; the current attempt while admitted
    requeue_count: int = 0
    requeue_at: float | None = None
    queued_at: float = 0.0  # the ordering timestamp under `Eviction`
    admitted_at: float | None = None
    ready_at: float | None = None
    first_evicted_at: float | None = None  # start of the current failing cycle
    timer: Timer | None = None
    recovery_episodes: int = 0  # within the current attempt
    recovering_since: float | None = None  # when the gang last lost readiness
    # Readiness timers armed within the current attempt for a deadline a settings
    # change brought back (`dryRun` off, `recoveryTimeout` positive again).
    rearms: int = 0
    reason: str | None = None
    message: str | None = None
    dry_run_evicted: bool = False  # a dry-run eviction was reported for this attempt
    ever_ready: bool = False
    evictions: Mapping[str, int] = field(default_factory=dict)  # "reason/cause" -> count
    pods: Mapping[str, Pod] = field(default_factory=dict)
    # The PriorityClass its pods run at (named, or the cluster's default); `priority`
    # is then that class's value. Missing: the class does not exist in the cluster.
    priority_class: str | None = None
    priority_class_missing: bool = False
    # What its pods ask for, for the capacity check: (pods, GPUs each) groups; empty
    # when unknown (then derived from `gpus` and `gang_size` where they divide).
    shape: tuple[tuple[int, int], ...] = ()
    # Placement rules of its pods the capacity check cannot evaluate (e.g.
    # "nodeSelector"); non-empty: the check falls back to quota for it.
    placement: str = ""
    # Failure-aware retry: consecutive evictions in which every not-ready pod was a
    # workload fault, and the armed `evictAfter` timer (a second deadline slot).
    fault_evictions: int = 0
    fault_timer: Timer | None = None
    fault_episodes: int = 0  # fault timers armed within the current attempt
    # Topology (`core.topology`): what it asks for ("required=<level>", "" for none),
    # and the domain its current or last attempt was admitted into ("" for none).
    topology: str = ""
    domain: str = ""
    # Earlier objects under this key whose pods may still run (`core.predecessors`).
    predecessors: tuple[Holding, ...] = ()

    @property
    def ready_pods(self) -> int:
        ready = 0
        for p in self.pods.values():
            if p.counts_ready:
                ready += 1
        return ready

    @property
    def whole(self) -> bool:
        """All-or-nothing: the gang counts as PodsReady."""
        return self.ready_pods >= self.gang_size

    @property
    def live_pods(self) -> int:
        return sum(1 for p in self.pods.values() if p.live)

    def not_ready_pods(self) -> tuple[Pod, ...]:
        return tuple(
            sorted(
                [
                    p
                    for p in self.pods.values()
                    if not p.retired and not p.deleted and not p.counts_ready
                ],
                key=_by_name,
            )
        )

    def summary(self) -> dict[str, Any]:
        """A compact, JSON-safe view for logs, the CLI and the status API."""
        return {
            "workload": self.key,
            "queue": self.queue,
            "phase": self.phase.value,
            "attempt": self.attempt,
            "requeueCount": self.requeue_count,
            "requeueAt": self.requeue_at,
            "readyPods": self.ready_pods,
            "gangSize": self.gang_size,
            "gpus": self.gpus,
            "priority": self.priority,
            "reason": self.reason,
            "deadline": self.timer.deadline if self.timer else None,
        } | ({"priorityClass": self.priority_class} if self.priority_class else {})


# --------------------------------------------------------------------------- events in


@dataclass(frozen=True, slots=True)
class WorkloadObserved:
    """A workload was submitted or changed (an upsert; the first one submits)."""

    workload: str
    queue: str
    gang_size: int
    gpus: int = 0
    priority: int = 0
    kind: Kind = Kind.JOB
    created_at: float = 0.0
    timeout_override: float | None = None
    seq: int = 0
    uid: str = ""
    # `priority` is the `muster.io/priority` annotation; a PriorityClass (the one its
    # pods run at) and the class's value, None when no such class exists.
    priority_class: str | None = None
    class_priority: int | None = None
    shape: tuple[tuple[int, int], ...] = ()  # (pods, GPUs each) groups of its pod templates
    placement: str = ""  # placement rules the capacity check cannot evaluate
    topology: str = ""  # `muster.io/topology`, canonical ("required=<level>")


@dataclass(frozen=True, slots=True)
class WorkloadFinished:
    """The workload completed (succeeded or failed) or was deleted."""

    workload: str
    reason: Reason = Reason.SUCCEEDED  # SUCCEEDED, FAILED or DELETED
    seq: int = 0
    uid: str = ""


@dataclass(frozen=True, slots=True)
class PodObserved:
    workload: str
    pod: str
    seq: int
    uid: str = ""
    phase: str = "Pending"
    ready: bool = False
    node: str | None = None
    deleted: bool = False
    reason: str | None = None
    message: str | None = None
    scheduled: bool | None = None
    waiting: str | None = None
    restarts: int = 0
    terminated: str | None = None
    exit_code: int | None = None
    # The uid of the workload object that owns the pod ("" unknown, as from an older
    # agent): a pod of an earlier object under the same name never counts for this one.
    owner: str = ""


@dataclass(frozen=True, slots=True)
class PodsListed:
    """A complete snapshot of the cluster's pods at `revision`; this workload's were `pods`."""

    workload: str
    revision: int
    pods: Mapping[str, str] = field(default_factory=dict)  # name -> uid


@dataclass(frozen=True, slots=True)
class NodeObserved:
    """A node's condition, fed to each workload with pods on it."""

    node: str
    ready: bool = True
    health: str | None = None  # HyperPod `sagemaker.amazonaws.com/node-health-status`
    workload: str = ""  # filled in by the shell when routing to a workload
    seq: int = 0  # the node's resourceVersion; 0: unordered (overrides every pod report)
    # Its capacity (None: the event does not report it, as from an older agent):
    # allocatable GPUs, whether new pods may land on it and if not why, and the GPUs
    # held on it by pods Muster does not manage.
    gpus: int | None = None
    schedulable: bool = True
    unschedulable: str | None = None
    foreign_gpus: int = 0
    topology: tuple[tuple[str, str], ...] = ()  # (level, label value), widest first


@dataclass(frozen=True, slots=True)
class DeadlineReached:
    workload: str
    attempt: int
    kind: TimerKind
    episode: int = 1
    incarnation: str = ""  # empty: any incarnation (timers armed before incarnations existed)


@dataclass(frozen=True, slots=True)
class RequeueDue:
    """The backoff of requeue `count` has (probably) elapsed."""

    workload: str
    count: int


@dataclass(frozen=True, slots=True)
class AdmissionGranted:
    """The admission pass chose this workload for attempt `attempt`."""

    workload: str
    attempt: int
    domain: str = ""  # the topology domain chosen for it ("" for none)


@dataclass(frozen=True, slots=True)
class AdmissionRefused:
    """The cluster refused, for good, to release attempt `attempt` (a 403 or 422 on Admit)."""

    workload: str
    attempt: int
    error: str = ""


@dataclass(frozen=True, slots=True)
class Reactivate:
    workload: str


@dataclass(frozen=True, slots=True)
class PodsCounted:
    """A store that keeps pods apart from the workload re-read the whole gang after a
    pod write: what follows from its pods as they are now. Of two concurrent "last"
    pods, the writer that reads second sees the gang whole."""

    workload: str


@dataclass(frozen=True, slots=True)
class PodChange:
    """One pod event applied to one stored pod, without the rest of the gang.

    `recount`: the gang's ready count moved, or its `workloadFaults` watch may have;
    the shell writes the pod, reads the count back and asks `gang_may_have_moved`.
    `whole_gang`: the decision needs every pod (the store does not count live pods
    yet, a finished pod group's pods may be a new run's, an admitted pod group's new
    pod is to be released): the shell loads the gang and calls `decide`.
    `live_delta`: the change of the gang's live pods (a waiting pod group's admission
    depends on them: the shell asks `gang_may_have_moved` with the count read back).
    """

    outcome: Outcome
    pod: Pod | None
    note: str = ""
    ready_delta: int = 0
    recount: bool = False
    faults: bool = False
    whole_gang: bool = False
    live_delta: int = 0


Event = (
    WorkloadObserved
    | WorkloadFinished
    | PodObserved
    | PodsListed
    | PodsCounted
    | NodeObserved
    | DeadlineReached
    | RequeueDue
    | AdmissionGranted
    | AdmissionRefused
    | Reactivate
)


# --------------------------------------------------------------------------- effects out


@dataclass(frozen=True, slots=True)
class Admit:
    """Release the workload on the cluster (unsuspend, or remove the scheduling gate)."""

    workload: str
    attempt: int
    kind: Kind
    uid: str = ""  # the object admitted: another object under the name is not released
    # A pod group's admitted gang size and the GPUs it is charged for: at most that
    # many of its pods are released, none asking for more than its share of the GPUs
    # (`muster.core.pod_groups.pods_to_release`); 0 for a kind whose object is held.
    size: int = 0
    gpus: int = 0
    domain: str = ""  # keep its pods inside this topology domain ("" for anywhere)
    # Its topology request ("" for none): then Muster owns its pod templates' topology
    # labels, set to the domain's (none when placed anywhere).
    topology: str = ""

    @staticmethod
    def of(w: Workload, attempt: int) -> Admit:
        """The release of attempt `attempt` of `w` (a pod group's: of its charge), inside
        its topology domain."""
        size, gpus = (w.gang_size, w.gpus) if w.kind is Kind.POD_GROUP else (0, 0)
        return Admit(w.key, attempt, w.kind, w.uid, size, gpus, w.domain, w.topology)


@dataclass(frozen=True, slots=True)
class Evict:
    """Withdraw the whole workload (suspend, or delete a pod group's pods)."""

    workload: str
    attempt: int
    kind: Kind
    reason: Reason
    cause: Reason | None
    not_ready: tuple[Pod, ...] = ()
    uid: str = ""


@dataclass(frozen=True, slots=True)
class StartTimer:
    workload: str
    timer: Timer


@dataclass(frozen=True, slots=True)
class StopTimer:
    workload: str
    timer: Timer


@dataclass(frozen=True, slots=True)
class Requeue:
    """Deliver `RequeueDue(workload, count)` after `delay` seconds (at `requeue_at`)."""

    workload: str
    count: int
    delay: float
    requeue_at: float


@dataclass(frozen=True, slots=True)
class Publish:
    """An event-log entry: history, bus event and metric."""

    event: LogEvent
    workload: str
    detail: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RunAdmission:
    """Something changed that may let a queued workload in: run an admission pass."""

    reason: str


@dataclass(frozen=True, slots=True)
class RecordView:
    """Muster's view of the workload (phase, attempt, requeues, reason) changed: write it
    onto the workload for `kubectl` users. Kept in the outbox like every other effect, so
    a crash after the commit still writes it; the shells add it, the core never does."""

    workload: str


Effect = Admit | Evict | StartTimer | StopTimer | Requeue | Publish | RunAdmission | RecordView


class Outcome(StrEnum):
    """What became of an event; everything but APPLIED is counted and logged."""

    APPLIED = "applied"
    DUPLICATE = "duplicate"  # seen already (at-least-once delivery)
    STALE = "stale"  # older than what is known, or for an earlier attempt
    UNKNOWN_WORKLOAD = "unknown-workload"
    IGNORED = "ignored"  # valid but irrelevant in the current phase


@dataclass(frozen=True, slots=True)
class Decision:
    """The workload's next state, the effects that carry it out, and what became of
    the event. `withdrawn` and `reborn` say what a store that keeps pods apart from
    the workload must do with them: `withdrawn`, the attempt's pods were all retired
    at once (an eviction); `reborn`, a new object took the key, and the old one's
    pods are not its own. Either starts a new epoch of pod items."""

    workload: Workload | None
    effects: tuple[Effect, ...] = ()
    outcome: Outcome = Outcome.APPLIED
    note: str = ""
    withdrawn: bool = False
    reborn: bool = False

    @property
    def new_epoch(self) -> bool:
        """The pods stored so far no longer belong to the workload's current attempt."""
        return self.withdrawn or self.reborn

    @property
    def changed(self) -> bool:
        return self.outcome is Outcome.APPLIED


# Every record above is built per event; give each frozen one the cheap `__init__`.
for _record in list(globals().values()):
    if isinstance(_record, type) and _record.__module__ == __name__:
        fast_init(_record)
