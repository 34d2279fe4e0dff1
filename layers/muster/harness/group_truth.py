"""Plain pod groups in the history harness's truth: pods under `muster.io/pod-group`,
with no object of their own, gated until released, kept by their own controller.

A group's controller keeps `size` pods while its run lasts: a pod deleted (by an
eviction, a rollout that replaces members, its node failing) is replaced by a new,
gated one after a while, so that a rollout of every member leaves the group without
pods meanwhile. A run succeeds once all its pods were Ready together for `run`
seconds; then the group may run again under its name. The agent reports a group
from its pods: active while one of them has not finished, Succeeded once they all
have (`muster.agent.mapping.workloads.pod_group_view`), with the newest pod's revision.

A released pod is a one-pod job of the simulator, so that nodes, the scheduler and
the kubelets treat it as any other.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

from muster.core import (
    Admit,
    Event,
    Kind,
    PodObserved,
    Reason,
    SnapshotPart,
    WorkloadFinished,
    WorkloadObserved,
)
from muster.core.keys import MARKERS, parse_workload_key
from muster.core.pod_groups import ListedMember, gpus_each, pods_to_release
from muster.harness.clock import VirtualClock
from muster.harness.histories import Action, History
from muster.harness.injectors import AdmitRefused
from muster.runtime.ports import WorkloadGone
from muster.sim.kube import JobSpec, PodChange, SimulatedCluster

RUN_FOREVER = 1e12  # a released pod runs until its group's run ends or it is deleted
RERUN_POLL = 10.0  # how often a group waiting to run again looks whether it may


@dataclass
class Member:
    """A pod of a pod group: gated until released; then a one-pod job of the simulator."""

    name: str
    uid: str
    run: int
    gated: bool = True
    sim: str = ""
    ready: bool = False
    node: str | None = None
    succeeded: bool = False
    respawn: float | None = None  # the controller's delay before its replacement
    leaving: bool = False  # deleted, winding down (terminating)


@dataclass
class GroupObject:
    """A plain pod group: its pods and their controller, which keeps `size` of them
    until the run succeeds (all Ready for `run` seconds)."""

    key: str
    size: int
    gpus_per_pod: int
    startup: float
    run: float
    never_ready: bool
    queue: str
    respawn: float
    runs: int = 0
    start_rev: int = 0  # the revision of the current run's first pod
    members: dict[str, Member] = field(default_factory=dict)
    done: bool = False
    end_delivered_at: float | None = None  # when the control plane first got its end
    serial: int = 0
    token: int = 0
    whole: bool = False
    peak: int = 0  # the most released pods that ran at once

    @property
    def live(self) -> list[Member]:
        return [m for m in self.members.values() if not m.succeeded]

    @property
    def released(self) -> bool:
        return any(not m.gated for m in self.live)

    @property
    def gpus(self) -> int:
        return self.size * self.gpus_per_pod

    @property
    def running(self) -> int:
        """Released pods that run or wait to (not leaving): at most the gang."""
        return sum(1 for m in self.live if not m.gated and not m.leaving)

    @property
    def held_gpus(self) -> int:
        """What the released group holds: its gang's GPUs, or more if it runs more."""
        return max(self.size, self.running) * self.gpus_per_pod


def stem(key: str) -> str:
    """A group's pods are named `<name>-podgroup-<run>-<serial>`."""
    return f"{parse_workload_key(key)[1]}-{MARKERS[Kind.POD_GROUP]}"


class Shared(Protocol):
    """What the pod groups share with the rest of the truth (`cluster_truth.Truth`)."""

    rev: int
    pods: dict[tuple[str, str], PodObserved]
    sim: SimulatedCluster
    loop: VirtualClock
    history: History
    triggers: Counter[str]
    watch: Any  # told of releases (`cluster_truth.ReleaseWatch`)

    def send(self, event: Event | SnapshotPart) -> list[float]: ...

    def settle_sim(self) -> None: ...

    def refused(self, effect: Admit) -> bool: ...


class PodGroups:
    """The pod groups of one truth, which they share revisions, pods and the simulator with."""

    def __init__(self, truth: Shared) -> None:
        self.truth = truth
        self.groups: dict[str, GroupObject] = {}
        self.member_of: dict[str, tuple[GroupObject, Member]] = {}  # sim job -> member

    # ------------------------------------------------------------------ what users do

    def create(self, a: Action) -> None:
        if a.job in self.groups:
            return  # its pods exist already
        g = GroupObject(
            a.job,
            a.pods,
            a.gpus_per_pod,
            a.startup,
            a.run or 60.0,
            a.never_ready,
            a.queue,
            a.delay or 2.0,
        )
        self.groups[a.job] = g
        self._start_run(g)

    def rerun(self, key: str, keep_old: bool = False) -> None:
        """The group run again under its name, once its last run has ended and the
        control plane has been told so (a pipeline re-submits a finished run); the old
        run's pods are deleted first unless `keep_old`."""
        g, t = self.groups.get(key), self.truth
        if g is None:
            return
        now = t.loop.now
        if not g.done or g.end_delivered_at is None or g.end_delivered_at > now:
            if now + RERUN_POLL < t.history.horizon * 0.95:
                t.loop.at(now + RERUN_POLL, "cluster", partial(self.rerun, key, keep_old))
            return
        if not keep_old:
            for m in list(g.members.values()):
                self._member_gone(g, m)
        t.triggers["podGroupRerun"] += 1
        self._start_run(g)

    def replace_members(self, key: str, count: int, delay: float) -> None:
        """The group's controller replaces `count` of its members (all of them when 0):
        the new ones come `delay` seconds later, so replacing all leaves none meanwhile."""
        g = self.groups.get(key)
        if g is None or g.done or not g.live:
            return
        chosen = sorted(g.live, key=lambda m: m.name)[: count or len(g.live)]
        self.truth.triggers["membersReplaced"] += len(chosen)
        for m in chosen:
            self._remove(g, m, delay)
        self.truth.settle_sim()

    # ------------------------------------------------------------------ ClusterActions

    def ungate(self, effect: Admit) -> None:
        """Lift the gates the core's rule chooses, up to the admitted size (the
        adapter's way: none is gone)."""
        g, t = self.groups.get(effect.workload), self.truth
        if g is None or g.done or not g.live:
            raise WorkloadGone(effect.workload)
        listed = [ListedMember(m.name, m.gated, m.leaving, g.gpus_per_pod) for m in g.live]
        chosen = set(pods_to_release(effect.size, listed, gpus_each(effect)))
        gated = [m for m in g.live if m.name in chosen]
        if not gated:
            return
        if t.refused(effect):
            raise AdmitRefused(f"{effect.workload}: 403 Forbidden")
        new = not g.released
        for m in gated:
            m.gated = False
            m.sim = f"{g.key}~{m.name}"
            self.member_of[m.sim] = (g, m)
            t.sim.add_job(JobSpec(m.sim, 1, g.gpus_per_pod, g.startup, RUN_FOREVER, g.never_ready))
            t.sim.unsuspend(m.sim)
        t.settle_sim()
        g.peak = max(g.peak, g.running)
        if new and t.watch is not None:
            t.watch.released(effect)

    def add_spares(self, key: str, count: int) -> None:
        """The group's owner adds `count` pods beyond its gang while it runs (its
        controller keeps its gang's worth: these are not replaced once gone)."""
        g = self.groups.get(key)
        if g is None or g.done or not g.live:
            return
        self.truth.triggers["podsBeyondTheGang"] += count
        for _ in range(count):
            self._new_member(g)

    def evict(self, key: str) -> None:
        """Its pods are deleted; its controller creates gated ones."""
        g = self.groups.get(key)
        if g is not None:
            for m in list(g.live):
                self._remove(g, m)
            self.truth.settle_sim()

    # ------------------------------------------------------------------ the pods

    def _start_run(self, g: GroupObject) -> None:
        g.runs += 1
        g.done = False
        g.end_delivered_at = None
        g.whole = False
        g.token += 1
        g.start_rev = self.truth.rev + 1
        for _ in range(g.size):
            self._new_member(g, view=False)
        self.send_view(g)

    def _new_member(self, g: GroupObject, *, view: bool = True) -> None:
        t = self.truth
        g.serial += 1
        name = f"{stem(g.key)}-{g.runs}-{g.serial}"
        t.rev += 1
        m = Member(name, f"{name}-u{t.rev}", g.runs)
        g.members[name] = m
        event = PodObserved(
            g.key, name, t.rev, uid=m.uid, reason="SchedulingGated", scheduled=False
        )
        t.pods[(g.key, name)] = event
        t.send(event)
        if view:
            self.send_view(g)

    def _respawn(self, g: GroupObject, run: int) -> None:
        if not g.done and g.runs == run and len(g.live) < g.size:
            self._new_member(g)

    def _remove(self, g: GroupObject, m: Member, respawn: float | None = None) -> None:
        """Delete a member (its replacement follows unless the run is done)."""
        m.respawn = respawn
        m.leaving = True
        sim = self.truth.sim
        if m.sim and sim._jobs[m.sim].running:
            sim.suspend(m.sim, self.truth.loop.now)  # its deletion comes out of the simulator
        else:
            self._member_gone(g, m)

    def _member_gone(self, g: GroupObject, m: Member, *, newest: bool = False) -> None:
        """`m` is deleted; with `newest`, the group's view that follows is as new as the
        deletion, as the agent's is (`muster.agent.memory`'s `_group_member`)."""
        t = self.truth
        if g.members.pop(m.name, None) is None:
            return
        last = t.pods.pop((g.key, m.name), None)
        t.rev += 1
        phase = "Succeeded" if m.succeeded else "Failed"
        t.send(PodObserved(g.key, m.name, t.rev, m.uid, phase, False, m.node, True))
        if not g.done:
            delay = g.respawn if m.respawn is None else m.respawn
            t.loop.at(t.loop.now + delay, "cluster", partial(self._respawn, g, g.runs))
        if g.members and last is not None:
            self.send_view(g, t.rev if newest else 0)
        self._progress(g)

    def pod_change(self, change: PodChange) -> None:
        """A released member's change in the simulator, as the group's pod."""
        g, m = self.member_of[change.workload]
        t = self.truth
        if m.name not in g.members:
            return
        if change.deleted and not m.succeeded:
            self._member_gone(g, m)
            return
        m.ready = change.ready and not change.deleted
        m.node = change.node
        t.rev += 1
        event = PodObserved(
            g.key,
            m.name,
            t.rev,
            uid=m.uid,
            phase="Succeeded" if m.succeeded else change.phase,
            ready=m.ready,
            node=change.node,
            scheduled=True if change.node is not None else None,
        )
        t.pods[(g.key, m.name)] = event
        t.send(event)
        self._progress(g)

    def _progress(self, g: GroupObject) -> None:
        """A group makes progress while all its pods are Ready; it succeeds after `run`."""
        # (Without pods beyond the gang: all its pods Ready.)
        whole = not g.done and sum(1 for m in g.live if m.ready) >= g.size
        if whole == g.whole:
            return
        g.whole = whole
        g.token += 1
        if whole:
            loop = self.truth.loop
            loop.at(loop.now + g.run, "cluster", partial(self._succeed, g, g.token))

    def _succeed(self, g: GroupObject, token: int) -> None:
        if token != g.token or g.done or not g.whole:
            return
        t = self.truth
        g.done = True
        g.whole = False
        live = [m for m in g.live if not m.gated]
        for m in live:
            m.succeeded = True
        for m in live:
            t.sim.suspend(m.sim, t.loop.now)  # the pod ends; its GPUs are free
        beyond = [m for m in g.live if m.gated]
        for m in beyond:
            self._member_gone(g, m, newest=True)  # they never ran: deleted with the run
        t.settle_sim()
        self.send_view(g, t.rev if beyond else 0)

    # ------------------------------------------------------------------ the agent's report

    def send_view(self, g: GroupObject, at_least: int = 0) -> None:
        """The group as the agent reports it from its pods (nothing without pods), at
        revision `at_least` or its newest pod's."""
        event = self.report(g, at_least)
        if event is None:
            return
        times = self.truth.send(event)
        if isinstance(event, WorkloadFinished) and times and g.end_delivered_at is None:
            g.end_delivered_at = min(times)

    def report(
        self, g: GroupObject, at_least: int = 0
    ) -> WorkloadObserved | WorkloadFinished | None:
        if not g.members:
            return None
        seq = max(at_least, *(self.truth.pods[(g.key, name)].seq for name in g.members))
        if not g.live:
            return WorkloadFinished(g.key, Reason.SUCCEEDED, seq)
        return WorkloadObserved(g.key, g.queue, g.size, gpus=g.gpus, kind=Kind.POD_GROUP, seq=seq)

    def own_pods(self, g: GroupObject) -> dict[str, PodObserved]:
        """The current run's pods (not an earlier run's left over), by name."""
        pods = self.truth.pods
        return {m.name: pods[(g.key, m.name)] for m in g.members.values() if m.run == g.runs}
