"""The truth of the history harness: the simulator's `SimulatedCluster` (nodes, job
controllers, scheduler, kubelets) plus what it does not model: Job objects with
uids (deleted, re-created under the same name) and node conditions that flap
without losing pods. It is also the control plane's `ClusterActions`, and every
change it makes is an agent event stamped with one cluster-wide revision.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from muster.core import (
    Admit,
    Event,
    Evict,
    Kind,
    NodeObserved,
    PodObserved,
    Reason,
    SnapshotPart,
    WorkloadFinished,
    WorkloadObserved,
)
from muster.core.keys import MARKERS, parse_workload_key
from muster.harness.clock import VirtualClock
from muster.harness.histories import Action, History
from muster.runtime.ports import WorkloadGone
from muster.sim.kube import JobSpec, PodChange, SimulatedCluster, Wakeup


def pod_stem(key: str) -> str:
    """Pod names of a workload: a Job's `<name>-<i>`; another kind's `<name>-<kind>-<i>`,
    so that the pods of a Job and of a PyTorchJob of one name never share a name."""
    _, name, kind = parse_workload_key(key)
    return name if kind is Kind.JOB else f"{name}-{MARKERS[kind]}"


@dataclass
class JobObject:
    key: str
    uid: str
    sim: str  # the simulator's job name (one per object)
    pods: int
    gpus: int
    seq: int = 0  # the revision of its last change (its creation: specs do not change here)
    deleted: bool = False


@dataclass
class Truth:
    """The cluster as it is; also the control plane's `ClusterActions`."""

    history: History
    loop: VirtualClock
    send: Callable[[Event | SnapshotPart], None]
    capacity: bool = False  # node events report each node's GPUs (for `capacityCheck`)
    sim: SimulatedCluster = field(init=False)
    rev: int = 0
    objects: dict[str, JobObject] = field(default_factory=dict)
    by_sim: dict[str, JobObject] = field(default_factory=dict)
    pods: dict[tuple[str, str], PodObserved] = field(default_factory=dict)
    nodes: dict[str, NodeObserved] = field(default_factory=dict)
    node_down: dict[str, int] = field(default_factory=dict)  # flapped node -> its NotReady rev
    incarnations: int = 0
    relists: int = 0
    # Broken (never-ready) Jobs' placed pods crash loop, as the kubelet reports it.
    crash_loops: bool = False

    def __post_init__(self) -> None:
        self.sim = SimulatedCluster(self.history.nodes, self.history.gpus_per_node)
        for name in self.sim.node_names:
            self.rev += 1
            self.nodes[name] = self.node_event(name, True)

    def node_event(self, name: str, ready: bool) -> NodeObserved:
        gpus = self.history.gpus_per_node if self.capacity else None
        return NodeObserved(name, ready, seq=self.rev, gpus=gpus)

    # ------------------------------------------------------------------ what users do

    def create(self, a: Action) -> None:
        current = self.objects.get(a.job)
        if current is not None and not current.deleted:
            return  # `kubectl apply` of an existing Job: nothing new
        self.incarnations += 1
        obj = JobObject(
            a.job,
            f"{a.job}-o{self.incarnations}",
            f"{a.job}~{self.incarnations}",
            a.pods,
            a.pods * a.gpus_per_pod,
        )
        self.sim.add_job(
            JobSpec(obj.sim, a.pods, a.gpus_per_pod, a.startup, 1e12, never_ready=a.never_ready)
        )
        self.objects[a.job] = obj
        self.by_sim[obj.sim] = obj
        self.rev += 1
        obj.seq = self.rev
        self.send(self.workload_event(obj))

    def delete(self, key: str) -> None:
        obj = self.objects.get(key)
        if obj is None or obj.deleted:
            return
        obj.deleted = True
        self.rev += 1
        self.send(WorkloadFinished(key, Reason.DELETED, self.rev, uid=obj.uid))
        self.sim.suspend(obj.sim, self.loop.now)  # garbage collection of its pods
        self.settle_sim()

    def workload_event(self, obj: JobObject) -> WorkloadObserved:
        kind = parse_workload_key(obj.key)[2]
        return WorkloadObserved(
            obj.key, "default", obj.pods, gpus=obj.gpus, kind=kind, seq=obj.seq, uid=obj.uid
        )

    # ------------------------------------------------------------------ nodes

    def node(self, name: str, *, ready: bool) -> None:
        self.rev += 1
        self.nodes[name] = self.node_event(name, ready)
        self.send(self.nodes[name])

    def flap(self, name: str, *, down: bool) -> None:
        if down == (name in self.node_down):
            return
        self.node(name, ready=not down)
        if down:
            self.node_down[name] = self.rev
        else:
            del self.node_down[name]

    def fail(self, name: str) -> None:
        if not self.sim.node_up(name):
            return
        self.node(name, ready=False)
        self.sim.fail_node(name, self.loop.now)
        self.settle_sim()

    def repair(self, name: str) -> None:
        if self.sim.node_up(name):
            return
        self.sim.repair_node(name, self.loop.now)
        self.node(name, ready=name not in self.node_down)
        self.settle_sim()

    # ------------------------------------------------------------------ the simulator

    def settle_sim(self) -> None:
        """Controllers create pods, the scheduler binds; every change becomes an event."""
        self.sim.reconcile()
        self.sim.bind_pending(self.loop.now)
        self.drain()

    def drain(self) -> None:
        for item in self.sim.outbox:
            if isinstance(item, Wakeup):
                self.loop.at(item.at, "wake", item)
            else:
                self.pod_change(item)
        self.sim.outbox.clear()

    def pod_change(self, change: PodChange) -> None:
        obj = self.by_sim[change.workload]
        name = f"{pod_stem(obj.key)}-{change.pod.rsplit('-', 1)[1]}"
        self.rev += 1
        broken = self.crash_loops and self.sim._jobs[change.workload].spec.never_ready
        crashing = broken and change.node is not None and not change.deleted
        event = PodObserved(
            obj.key,
            name,
            self.rev,
            uid=change.uid,
            phase=change.phase,
            ready=change.ready,
            node=change.node,
            deleted=change.deleted,
            reason="CrashLoopBackOff" if crashing else None,
            scheduled=True if change.node is not None else None,
            waiting="CrashLoopBackOff" if crashing else None,
            restarts=3 if crashing else 0,
            exit_code=1 if crashing else None,
        )
        if change.deleted:
            current = self.pods.get((obj.key, name))
            if current is not None and current.uid == change.uid:
                del self.pods[(obj.key, name)]
        else:
            self.pods[(obj.key, name)] = event
        self.send(event)

    def wake(self, w: Wakeup) -> None:
        if w.what == "ready":
            self.sim.pod_ready(w.job, str(w.ref), self.loop.now)
        else:
            self.sim.complete(w.job, int(w.ref), self.loop.now)
        self.settle_sim()

    # ------------------------------------------------------------------ the agent's relist

    def relist(self) -> None:
        """Everything as it is, each with the revision of its last change, then snapshots."""
        self.relists += 1
        for obj in self.objects.values():
            if not obj.deleted:
                self.send(self.workload_event(obj))
        for event in self.pods.values():
            self.send(event)
        for node_event in self.nodes.values():
            self.send(node_event)
        live: dict[Kind, dict[str, str]] = {Kind.JOB: {}}
        for k, o in self.objects.items():
            listing = live.setdefault(parse_workload_key(k)[2], {})
            if not o.deleted:
                listing[k] = o.uid
        listed: dict[str, dict[str, str]] = {}
        for (key, name), event in self.pods.items():
            listed.setdefault(key, {})[name] = event.uid
        tag = f"{self.relists}"
        # One snapshot per kind (a PyTorchJob's listing says nothing of the Jobs).
        for kind, keys_of_kind in live.items():
            scope = kind.value
            self.send(SnapshotPart(f"{scope.lower()}s.{tag}", 1, 1, scope, self.rev, keys_of_kind))
        # Pods in two parts, so that a lost or late part keeps the snapshot incomplete.
        keys = sorted(listed)
        halves = [keys[: len(keys) // 2], keys[len(keys) // 2 :]]
        for number, half in enumerate(halves, start=1):
            part = {k: listed[k] for k in half}
            self.send(SnapshotPart(f"pods.{tag}", number, 2, "Pod", self.rev, {}, part))

    # ------------------------------------------------------------------ ClusterActions

    def _current(self, key: str, uid: str = "") -> JobObject:
        """The object under `key`; as the Kubernetes adapter does, refuse another object."""
        obj = self.objects.get(key)
        if obj is None or obj.deleted or (uid and obj.uid != uid):
            raise WorkloadGone(key)
        return obj

    def admit(self, effect: Admit) -> None:
        obj = self._current(effect.workload, effect.uid)
        self.sim.unsuspend(obj.sim)
        self.settle_sim()

    def evict(self, effect: Evict) -> None:
        obj = self._current(effect.workload, effect.uid)
        self.sim.suspend(obj.sim, self.loop.now)
        self.settle_sim()

    def record(self, workload: str, kind: Kind, view: Mapping[str, str]) -> None:
        self._current(workload)

    # ------------------------------------------------------------------ what the truth says

    def ready(self, event: PodObserved) -> bool:
        """The newest word wins: the pod's report, or its node's later NotReady."""
        if not event.ready:
            return False
        down = self.node_down.get(event.node or "")
        return down is None or event.seq > down
