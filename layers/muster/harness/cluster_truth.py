"""The truth of the history harness: the simulator's `SimulatedCluster` (nodes, job
controllers, scheduler, kubelets) plus what it does not model: Job objects with
uids (deleted, re-created under the same name, their pods terminating a while
after the deletion), node conditions that flap without losing pods, and plain pod
groups (pods under `muster.io/pod-group`, gated until released, kept by their own
controller, run again under their name); and a tenant's attacks: a Job's
`parallelism` raised after admission, a Job deleted with its pods orphaned (they
run on, then end), pods forged with a Job's labels (`forged`). It is also the
control plane's `ClusterActions`, and every change it makes is an agent event
stamped with one cluster-wide revision.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial

from muster.agent.mapping import orphaned_from
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
from muster.harness.forged import ForgedPods
from muster.harness.group_truth import GroupObject, PodGroups
from muster.harness.histories import Action, History
from muster.harness.injectors import AdmitRefused
from muster.runtime.ports import WorkloadGone
from muster.sim.kube import JobSpec, PodChange, SimulatedCluster, Wakeup

RUN_FOREVER = 1e12  # a Job of the history runs until it is deleted


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
    queue: str = "default"
    stem: str = ""  # its pods' names start so (another than its predecessor's, if that
    # one's pods still terminate when it is created)
    charged: int = 0  # the GPUs the control plane admitted it with (set by the watch)
    grown_seq: int = 0  # the revision of its last growth
    heard_seq: int = 0  # ... the last one the control plane's record of it held
    orphaned: bool = False  # deleted with `--cascade=orphan`, its pods running on


@dataclass
class Truth:
    """The cluster as it is; also the control plane's `ClusterActions`.

    `send` hands an agent event to the way to the control plane and returns when its
    copies arrive (none: lost); `deliver` puts one copy there at a given time, past
    the perturbation (a late redelivery played on purpose). `watch`, when set, is told
    of every release before and after it is carried out (`admitting`, `released`).
    """

    history: History
    loop: VirtualClock
    send: Callable[[Event | SnapshotPart], list[float]]
    capacity: bool = False  # node events report each node's GPUs (for `capacityCheck`)
    # Broken (never-ready) Jobs' placed pods crash loop, as the kubelet reports it.
    crash_loops: bool = False
    deliver: Callable[[float, Event], None] | None = None
    sim: SimulatedCluster = field(init=False)
    rev: int = 0
    objects: dict[str, JobObject] = field(default_factory=dict)
    by_sim: dict[str, JobObject] = field(default_factory=dict)
    pod_groups: PodGroups = field(init=False)
    forged: ForgedPods = field(init=False)
    pods: dict[tuple[str, str], PodObserved] = field(default_factory=dict)
    nodes: dict[str, NodeObserved] = field(default_factory=dict)
    node_down: dict[str, int] = field(default_factory=dict)  # flapped node -> its NotReady rev
    lingering: dict[str, JobObject] = field(default_factory=dict)  # sim job -> deleted object
    grown: list[JobObject] = field(default_factory=list)  # objects that grew
    refusing: set[str] = field(default_factory=set)  # the next release of these is refused
    refused_attempts: set[tuple[str, str, int]] = field(default_factory=set)  # key, uid, attempt
    owners: dict[str, str] = field(default_factory=dict)  # pod uid -> its object's uid
    # pod uid -> the watch's step the control plane's record first held it bound at
    told_bound: dict[str, int] = field(default_factory=dict)
    incarnations: int = 0
    relists: int = 0
    triggers: Counter[str] = field(default_factory=Counter)
    watch: ReleaseWatch | None = None

    def __post_init__(self) -> None:
        self.pod_groups = PodGroups(self)
        self.sim = SimulatedCluster(self.history.nodes, self.history.gpus_per_node)
        self.forged = ForgedPods(self, list(self.sim.node_names))
        for name in self.sim.node_names:
            self.rev += 1
            self.nodes[name] = self.node_event(name, True)

    def node_event(self, name: str, ready: bool) -> NodeObserved:
        reported = self.capacity or self.history.node_gpus
        gpus = self.history.gpus_per_node if reported else None
        return NodeObserved(name, ready, seq=self.rev, gpus=gpus)

    # ------------------------------------------------------------------ what users do

    def create(self, a: Action) -> None:
        if parse_workload_key(a.job)[2] is Kind.POD_GROUP:
            self.pod_groups.create(a)
            return
        current = self.objects.get(a.job)
        if current is not None and not current.deleted:
            return  # `kubectl apply` of an existing Job: nothing new
        self.incarnations += 1
        if any(o.key == a.job and o.orphaned for o in self.lingering.values()):
            self.triggers["recreatedWhileOrphansRun"] += 1
        stem = pod_stem(a.job)
        if any(k == a.job for k, _ in self.pods):
            stem = f"{stem}-o{self.incarnations}"  # its predecessor's pods still terminate
        obj = JobObject(
            a.job,
            f"{a.job}-o{self.incarnations}",
            f"{a.job}~{self.incarnations}",
            a.pods,
            a.pods * a.gpus_per_pod,
            queue=a.queue,
            stem=stem,
        )
        self.sim.add_job(
            JobSpec(
                obj.sim, a.pods, a.gpus_per_pod, a.startup, RUN_FOREVER, never_ready=a.never_ready
            )
        )
        self.objects[a.job] = obj
        self.by_sim[obj.sim] = obj
        self.rev += 1
        obj.seq = self.rev
        self.send(self.workload_event(obj))

    def delete(self, key: str, linger: float = 0.0, orphan: bool = False) -> None:
        """Delete the object; with `linger`, its pods terminate that much later (they keep
        reporting meanwhile, owned by the deleted object). With `orphan` (`kubectl
        delete --cascade=orphan`) they lose their owner reference first and run on
        until `linger` has passed: the agent keeps them the workload's pods, as it knew
        them (`muster.agent.memory.Memory.workload_of`), so no event says it; an agent
        that lists them afresh knows them by their labels (`relisted_orphan`)."""
        obj = self.objects.get(key)
        if obj is None or obj.deleted:
            return
        obj.deleted = True
        self.rev += 1
        self.send(WorkloadFinished(key, Reason.DELETED, self.rev, uid=obj.uid))
        if linger and self.sim._jobs[obj.sim].pods:
            self.lingering[obj.sim] = obj
            obj.orphaned = orphan
            self.triggers["orphaningDeletes" if orphan else "podsOutlivingTheirJob"] += 1
            now = self.loop.now
            if not orphan:
                self.loop.at(now + min(1.0, linger / 2), "cluster", partial(self.terminating, obj))
            self.loop.at(now + linger, "cluster", partial(self.terminated, obj.sim))
            return
        self.sim.suspend(obj.sim, self.loop.now)  # garbage collection of its pods
        self.settle_sim()

    def terminating(self, obj: JobObject) -> None:
        """The garbage collector marks a deleted object's pods for deletion a moment
        later (a change of each pod, with a new revision: maybe newer than the object
        re-created under the name meanwhile); they run on until terminated."""
        if obj.sim not in self.lingering:
            return
        for where, event in list(self.pods.items()):
            if event.owner == obj.uid:
                self.rev += 1
                self.pods[where] = replace(event, seq=self.rev)
                self.send(self.pods[where])

    def terminated(self, sim: str) -> None:
        """A deleted object's pods are gone at last."""
        if self.lingering.pop(sim, None) is not None:
            self.sim.suspend(sim, self.loop.now)
            self.settle_sim()

    def workload_event(self, obj: JobObject) -> WorkloadObserved:
        kind = parse_workload_key(obj.key)[2]
        return WorkloadObserved(
            obj.key, obj.queue, obj.pods, gpus=obj.gpus, kind=kind, seq=obj.seq, uid=obj.uid
        )

    def grow(self, a: Action) -> None:
        """The tenant raises the Job's `parallelism` by `a.pods` (to at most `a.value`
        GPUs): a released Job's controller creates the new pods at once."""
        obj = self.objects.get(a.job)
        if obj is None or obj.deleted:
            return
        each = obj.gpus // obj.pods
        pods = obj.pods + a.pods
        while pods > obj.pods and pods * each > a.value:
            pods -= 1
        if pods == obj.pods:
            return
        running = self.sim._jobs[obj.sim].running
        self.triggers["grownWhileReleased" if running else "grownWhileHeld"] += 1
        obj.pods, obj.gpus = pods, pods * each
        self.sim.resize(obj.sim, pods, self.loop.now)
        self.rev += 1
        obj.seq = obj.grown_seq = self.rev
        if obj not in self.grown:
            self.grown.append(obj)
        self.send(self.workload_event(obj))
        self.settle_sim()

    def forge(self, a: Action) -> None:
        obj = self.objects.get(a.job)
        self.forged.forge(a, obj.uid if obj is not None else "")

    def refuse(self, key: str) -> None:
        """The API server (an admission webhook, say) refuses the next release of `key`."""
        self.refusing.add(key)

    @property
    def groups(self) -> dict[str, GroupObject]:
        return self.pod_groups.groups

    # ------------------------------------------------------------------ nodes

    def node(self, name: str, *, ready: bool) -> list[float]:
        self.rev += 1
        self.nodes[name] = self.node_event(name, ready)
        return self.send(self.nodes[name])

    def flap(self, name: str, *, down: bool, late: bool = False) -> None:
        if down == (name in self.node_down):
            return
        before = self.nodes[name]
        times = self.node(name, ready=not down)
        if down:
            self.node_down[name] = self.rev
        else:
            del self.node_down[name]
            if late:
                self._late(before, times)

    def fail(self, name: str) -> None:
        if not self.sim.node_up(name):
            return
        self.node(name, ready=False)
        for job in self.sim.fail_node(name, self.loop.now):
            # A lost pod of a deleted object, or of a pod group, is not re-created by
            # a job controller (the group's own controller makes a new, gated one).
            if job in self.pod_groups.member_of or self.lingering.pop(job, None) is not None:
                self.sim.suspend(job, self.loop.now)
        self.settle_sim()

    def repair(self, name: str, late: bool = False) -> None:
        if self.sim.node_up(name):
            return
        before = self.nodes[name]
        self.sim.repair_node(name, self.loop.now)
        ready = name not in self.node_down
        times = self.node(name, ready=ready)
        if late and ready:
            self._late(before, times)
        self.settle_sim()

    def _late(self, stale: NodeObserved, times: list[float]) -> None:
        """The node's NotReady delivered once more after its later Ready (redelivered
        after a failed batch, say)."""
        if self.deliver is None or stale.ready:
            return
        self.triggers["lateNodeConditions"] += 1
        self.deliver(max(times, default=self.loop.now) + 1.0, stale)

    # ------------------------------------------------------------------ the simulator

    def settle_sim(self) -> None:
        """Controllers create pods, the scheduler binds; every change becomes an event."""
        self.sim.reconcile()
        self.sim.bind_pending(self.loop.now)
        self.drain()

    def drain(self) -> None:
        while self.sim.outbox:
            items = list(self.sim.outbox)
            self.sim.outbox.clear()
            for item in items:
                if isinstance(item, Wakeup):
                    self.loop.at(item.at, "wake", item)
                elif item.workload in self.pod_groups.member_of:
                    self.pod_groups.pod_change(item)
                else:
                    self.pod_change(item)

    def pod_change(self, change: PodChange) -> None:
        obj = self.by_sim[change.workload]
        name = f"{obj.stem or pod_stem(obj.key)}-{change.pod.rsplit('-', 1)[1]}"
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
            owner=obj.uid,
        )
        self.owners[change.uid] = obj.uid
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
        for g in self.groups.values():
            self.pod_groups.send_view(g)
        orphaned = {o.uid: o for o in self.lingering.values() if o.orphaned}
        if orphaned:
            self.triggers["relistsWhileOrphansRun"] += 1
        unmapped: set[tuple[str, str]] = set()
        for where, event in self.pods.items():
            if event.owner in orphaned:
                relisted = relisted_orphan(event, orphaned[event.owner])
                if relisted is None:
                    unmapped.add(where)
                    continue
                event = relisted
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
            if (key, name) not in unmapped:
                listed.setdefault(key, {})[name] = event.uid
        tag = f"{self.relists}"
        # One snapshot per kind (a PyTorchJob's listing says nothing of the Jobs); pod
        # groups have no objects to list, only their pods.
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

    def refused(self, effect: Admit) -> bool:
        """Whether the API server refuses this release (every try of a refused attempt)."""
        attempt = (effect.workload, effect.uid, effect.attempt)
        if attempt not in self.refused_attempts and effect.workload in self.refusing:
            self.refusing.discard(effect.workload)
            self.refused_attempts.add(attempt)
            self.triggers["refusedAdmits"] += 1
        return attempt in self.refused_attempts

    def admit(self, effect: Admit) -> None:
        if self.watch is not None:
            self.watch.admitting(effect)
        if effect.kind is Kind.POD_GROUP:
            self.pod_groups.ungate(effect)
            return
        obj = self._current(effect.workload, effect.uid)
        if self.sim._jobs[obj.sim].running:
            return  # released already (a retried effect)
        if self.refused(effect):
            raise AdmitRefused(f"{effect.workload}: 403 Forbidden")
        self.sim.unsuspend(obj.sim)
        self.settle_sim()
        if self.watch is not None:
            self.watch.released(effect)

    def evict(self, effect: Evict) -> None:
        if effect.kind is Kind.POD_GROUP:
            self.pod_groups.evict(effect.workload)
            return
        obj = self._current(effect.workload, effect.uid)
        self.sim.suspend(obj.sim, self.loop.now)
        self.settle_sim()

    def record(self, workload: str, kind: Kind, view: Mapping[str, str]) -> None:
        if kind is not Kind.POD_GROUP:
            self._current(workload)

    # ------------------------------------------------------------------ what the truth says

    def ready(self, event: PodObserved) -> bool:
        """The newest word wins: the pod's report, or its node's later NotReady."""
        if not event.ready:
            return False
        down = self.node_down.get(event.node or "")
        return down is None or event.seq > down

    def released(self, key: str) -> bool:
        """Whether the workload under `key` is released on the cluster (runs or may)."""
        g = self.groups.get(key)
        if g is not None:
            return g.released
        obj = self.objects.get(key)
        return obj is not None and not obj.deleted and self.sim._jobs[obj.sim].running

    def queue(self, key: str) -> str:
        found = self.groups.get(key) or self.objects.get(key)
        return found.queue if found is not None else "default"

    def released_gpus(self, heard: Callable[[JobObject], bool], told: int) -> Counter[str]:
        """GPUs in use per queue, counting what runs: each released workload's charge,
        or all it asks for once the control plane has heard it grew (`heard`); and the
        bound pods of deleted Jobs that still run (orphaned, or terminating; a Job
        re-created under the name meanwhile or not) that the control plane heard were
        bound by the watch's step `told`, at most their charge if it never heard they
        grew."""
        held: Counter[str] = Counter()
        for obj in self.objects.values():
            if not obj.deleted and self.sim._jobs[obj.sim].running:
                grown = obj.grown_seq and heard(obj)
                held[obj.queue] += obj.gpus if grown else (obj.charged or obj.gpus)
        for sim, obj in self.lingering.items():
            bound = self.bound_gpus(sim, told)
            if obj.grown_seq and obj.charged and not heard(obj):
                bound = min(bound, obj.charged)
            held[obj.queue] += bound
        for g in self.groups.values():
            if g.released:
                held[g.queue] += g.held_gpus
        return held

    def bound_gpus(self, sim: str, told: int) -> int:
        """GPUs of the simulator job's bound pods whose records at the control plane held
        them bound by the watch's step `told` (what it never heard of, an agent gap say,
        it cannot charge)."""
        pods = self.sim._jobs[sim].pods.values()
        told_bound = self.told_bound
        return sum(
            p.gpus
            for p in pods
            if p.node is not None and not p.deleted and told_bound.get(p.uid, told + 1) <= told
        )

    def own_pods(self, key: str) -> dict[str, PodObserved]:
        """The pods of the current object (or pod group run) under `key`, by name: not
        those of an earlier object still terminating, nor an earlier run's left over."""
        g = self.groups.get(key)
        if g is not None:
            return self.pod_groups.own_pods(g)
        obj = self.objects.get(key)
        owner = obj.uid if obj is not None else ""
        return {
            name: e for (k, name), e in self.pods.items() if k == key and e.owner in ("", owner)
        }


class ReleaseWatch:
    """Told of every release the control plane asks the cluster for (see `Truth`)."""

    def admitting(self, effect: Admit) -> None: ...

    def released(self, effect: Admit) -> None: ...


def relisted_orphan(event: PodObserved, obj: JobObject) -> PodObserved | None:
    """An orphaned pod of `obj` as an agent that lists it afresh reports it: by the labels
    the Job controller put on it, its owner reference gone (`orphaned_from`), never
    Ready; None (nobody's: not reported, nor listed) should the mapping not name `obj`."""
    namespace, job, _ = parse_workload_key(obj.key)
    labels = {"batch.kubernetes.io/job-name": job, "batch.kubernetes.io/controller-uid": obj.uid}
    pod = {"metadata": {"name": event.pod, "namespace": namespace, "labels": labels}}
    found = orphaned_from(pod)
    if found is None or found[1:] != (obj.key, obj.uid):
        return None
    return replace(event, workload=found[1], owner=found[2], ready=False)
