"""The system under test: the real `ControlPlane` against the simulator's cluster model.

`Truth` (in `muster.harness.cluster_truth`) is the simulator's `SimulatedCluster`
(nodes, job controllers, scheduler, kubelets) plus what it does not model: Job
objects with uids (deleted, re-created under the same name) and node conditions
that flap without losing pods. It is also the control plane's `ClusterActions`:
admitting unsuspends the current object under a key, evicting suspends it. Every
change it makes is an agent event stamped with one cluster-wide revision (as
resourceVersion is), and a relist re-sends every object with the revision of its
last change, followed by a `Cluster Snapshot` of Jobs and of pods.

`build_plane` is the one place a `ControlPlane` is made, from ports passed in, so
that fault-injecting wrappers around the ports can be handed in instead.
"""

from __future__ import annotations

import heapq
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from muster.core import (
    DeadlineReached,
    Event,
    Kind,
    NodeObserved,
    PodObserved,
    RequeueDue,
    Settings,
    SnapshotPart,
    Timer,
    WorkloadFinished,
    WorkloadObserved,
    parse_settings,
)
from muster.harness.clock import VirtualClock
from muster.harness.cluster_truth import Truth
from muster.harness.histories import Action, History, generate
from muster.harness.invariants import check_final, check_quota
from muster.harness.perturb import NONE, Perturbation, Perturber
from muster.runtime.memory import MemoryBus, MemoryMetrics, MemoryStore
from muster.runtime.ports import Bus, ClusterActions, Messages, Metrics, Timers, WorkloadStore
from muster.runtime.service import ControlPlane
from muster.schema import (
    AGENT_SOURCE,
    CLUSTER_SNAPSHOT,
    NODE_OBSERVED,
    POD_OBSERVED,
    WORKLOAD_OBSERVED,
    node_detail,
    parse_agent_event,
    pod_detail,
    snapshot_details,
    workload_detail,
)

SETTLE = 300.0  # after the horizon: no faults, everything delivered at once
CLUSTER = "faults"


def over_the_wire(event: Event | SnapshotPart) -> Event | SnapshotPart:
    """The event as the agent builds it, as JSON on the bus, and as the ingest parses it."""
    detail_type, detail = _agent_detail(event)
    envelope = {"source": AGENT_SOURCE, "detail-type": detail_type, "detail": detail}
    cluster, parsed = parse_agent_event(json.loads(json.dumps(envelope)))
    assert cluster == CLUSTER
    return parsed


def _agent_detail(event: Event | SnapshotPart) -> tuple[str, dict[str, Any]]:
    match event:
        case WorkloadObserved():
            return WORKLOAD_OBSERVED, workload_detail(
                cluster=CLUSTER,
                workload=event.workload,
                kind=event.kind,
                queue=event.queue,
                gang_size=event.gang_size,
                seq=event.seq,
                gpus=event.gpus,
                uid=event.uid,
            )
        case WorkloadFinished():
            return WORKLOAD_OBSERVED, workload_detail(
                cluster=CLUSTER,
                workload=event.workload,
                kind=Kind.JOB,
                queue="default",
                gang_size=1,
                seq=event.seq,
                status=event.reason.value,
                uid=event.uid,
            )
        case PodObserved():
            return POD_OBSERVED, pod_detail(
                cluster=CLUSTER,
                workload=event.workload,
                pod=event.pod,
                seq=event.seq,
                uid=event.uid,
                phase=event.phase,
                ready=event.ready,
                node=event.node,
                deleted=event.deleted,
                reason=event.reason,
                scheduled=event.scheduled,
                waiting=event.waiting,
                restarts=event.restarts,
                terminated=event.terminated,
                exit_code=event.exit_code,
            )
        case NodeObserved():
            return NODE_OBSERVED, node_detail(
                cluster=CLUSTER,
                node=event.node,
                seq=event.seq,
                ready=event.ready,
                gpus=event.gpus,
                unschedulable=None if event.schedulable else event.unschedulable,
                foreign_gpus=event.foreign_gpus,
            )
        case SnapshotPart():
            [detail] = snapshot_details(
                cluster=CLUSTER,
                scope=event.scope,
                revision=event.revision,
                snapshot=event.snapshot,
                workloads=event.workloads,
                pods=event.pods,
            )
            detail.update(part=event.part, parts=event.parts)
            return CLUSTER_SNAPSHOT, detail
    raise TypeError(f"not an agent event: {event!r}")


def build_plane(
    *,
    store: WorkloadStore,
    timers: Timers,
    messages: Messages,
    bus: Bus,
    metrics: Metrics,
    cluster: ClusterActions,
    settings: Callable[[], Settings],
    clock: Callable[[], float],
) -> ControlPlane:
    """The control plane under test, from its ports (wrap them to inject faults)."""
    return ControlPlane(
        store=store,
        timers=timers,
        messages=messages,
        bus=bus,
        metrics=metrics,
        cluster=cluster,
        settings=settings,
        clock=clock,
        draw=lambda: 0.0,
        sleep=lambda seconds: None,
        inline_admission=True,
    )


# --------------------------------------------------------------------------- the loop


@dataclass
class LoopTimers:
    """Step Functions timers: a started timer fires at its deadline unless stopped."""

    loop: VirtualClock
    running: set[tuple[str, int, str, int, str]] = field(default_factory=set)

    def start(self, workload: str, timer: Timer) -> None:
        name = (workload, timer.attempt, timer.kind.value, timer.episode, timer.incarnation)
        if name not in self.running:
            self.running.add(name)
            event = DeadlineReached(
                workload, timer.attempt, timer.kind, timer.episode, timer.incarnation
            )
            self.loop.at(timer.deadline, "timer", (name, event))

    def stop(self, workload: str, timer: Timer) -> None:
        name = (workload, timer.attempt, timer.kind.value, timer.episode, timer.incarnation)
        self.running.discard(name)


@dataclass
class LoopMessages:
    """The admission queue: delayed requeues, and admission requests."""

    loop: VirtualClock
    pending: set[tuple[str, int]] = field(default_factory=set)

    def requeue(self, workload: str, count: int, delay: float) -> None:
        self.pending.add((workload, count))
        self.loop.at(self.loop.now + delay, "requeue", RequeueDue(workload, count))

    def request_admission(
        self, reason: str, workload: str | None, *, retry: int = 0, delay: float = 0.0
    ) -> None:
        self.loop.at(self.loop.now + delay, "admission", workload)


# --------------------------------------------------------------------------- one run


@dataclass
class Outcome:
    seed: int
    events: int = 0  # agent events delivered to the control plane
    divergences: list[str] = field(default_factory=list)
    faults: dict[str, int] = field(default_factory=dict)

    @property
    def diverged(self) -> bool:
        return bool(self.divergences)


def run_history(
    seed: int,
    *,
    perturbation: Perturbation | None = None,
    history: History | None = None,
    store: MemoryStore | None = None,
    wrap_ports: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    wire: bool = False,
    capacity: bool = False,
    workload_faults: dict[str, Any] | None = None,
) -> Outcome:
    """Play one random history through the control plane; compare its view with the truth.

    `wrap_ports` receives the ports (`store`, `timers`, `messages`, `bus`, `metrics`,
    `cluster`) and returns those to build the control plane with: fault-injecting
    wrappers go there. The invariants read the unwrapped store and timers. With
    `wire`, every agent event goes through the schema's builders, JSON and parser.
    With `capacity`, the control plane runs the capacity check on node events that
    report each node's GPUs (sent when the history starts, and with every change).
    """
    history = history or generate(seed)
    rng = random.Random(seed * 7919 + 1)
    loop = VirtualClock()
    perturber = Perturber(rng, perturbation or Perturbation())
    perturber.gaps = [(a.at, a.until) for a in history.actions if a.what == "gap"]
    outcome = Outcome(seed)
    settling = False

    def send(event: Event | SnapshotPart) -> None:
        times = [loop.now] if settling else perturber.deliveries(loop.now)
        for when in times:
            loop.at(when, "deliver", over_the_wire(event) if wire else event)

    truth = Truth(history, loop, send, capacity, crash_loops=workload_faults is not None)
    store = store or MemoryStore()
    timers = LoopTimers(loop)
    messages = LoopMessages(loop)
    settings = _history_settings(seed, history, capacity, workload_faults)
    ports: dict[str, Any] = {
        "store": store,
        "timers": timers,
        "messages": messages,
        "bus": MemoryBus(),
        "metrics": MemoryMetrics(),
        "cluster": truth,
    }
    if wrap_ports is not None:
        ports = wrap_ports(ports)
    current = [settings]  # what an administrator's settings change (a history action) sets
    plane = build_plane(**ports, settings=lambda: current[0], clock=loop)
    if capacity:
        for event in truth.nodes.values():
            send(event)  # what the agent reports of every node when it starts
    for action in history.actions:
        loop.at(action.at, "action", action)
    loop.at(history.horizon, "horizon", None)
    end = history.horizon + SETTLE
    while loop.queue and loop.queue[0][0] <= end:
        when, _, kind, payload = heapq.heappop(loop.queue)
        loop.now = max(loop.now, when)
        if kind == "horizon":
            settling = True
            perturber.settings = NONE
            truth.relist()
        elif kind == "action" and payload.what == "settings":
            current[0] = toggled(settings, payload.job)
            plane.settle_deadlines()  # the "settings changed" request
        else:
            _play(kind, payload, truth, plane, timers, messages, outcome)
        _admit(plane, store, settings, outcome)
    outcome.faults = dict(perturber.stats)
    outcome.divergences.extend(
        check_final(store, truth, timers.running, messages.pending, settings, loop.now)
    )
    return outcome


def _history_settings(
    seed: int, history: History, capacity: bool, workload_faults: dict[str, Any] | None
) -> Settings:
    """The control plane's settings for one history: a whole cluster's quota."""
    return parse_settings(
        {
            "timeout": "60s",
            # Every third history keeps a gang that lost a pod waiting instead of
            # evicting it, so that a wrong readiness is not healed by an eviction.
            "recoveryTimeout": "0s" if seed % 3 == 0 else "60s",
            "requeuingStrategy": {"backoffBaseSeconds": 10, "backoffMaxSeconds": 60},
            "gpuQuota": history.nodes * history.gpus_per_node,
            "capacityCheck": capacity,
        }
        | ({"workloadFaults": workload_faults} if workload_faults is not None else {})
    )


def toggled(base: Settings, change: str) -> Settings:
    """`base` with one settings change of a history (`histories.SETTINGS_TOGGLES`)."""
    if change == "dryRun":
        return replace(base, defaults=replace(base.defaults, dry_run=True))
    if change == "recoveryOff":
        return replace(base, defaults=replace(base.defaults, recovery_timeout=0.0))
    return base


def _play(
    kind: str,
    payload: Any,
    truth: Truth,
    plane: ControlPlane,
    timers: LoopTimers,
    messages: LoopMessages,
    outcome: Outcome,
) -> None:
    """One item of the loop that is due: the cluster acts, or the control plane handles
    a delivered event, a timer that was not stopped, or a requeue."""
    if kind == "action":
        _act(truth, payload)
    elif kind == "wake":
        truth.wake(payload)
    elif kind == "deliver":
        outcome.events += 1
        plane.handle(payload)
    elif kind == "timer":
        name, event = payload
        if name in timers.running:
            timers.running.discard(name)
            plane.handle(event)
    elif kind == "requeue":
        messages.pending.discard((payload.workload, payload.count))
        plane.handle(payload)
    # "admission": the pass after every item runs it


def _act(truth: Truth, a: Action) -> None:
    match a.what:
        case "create":
            truth.create(a)
        case "delete":
            truth.delete(a.job)
        case "fail":
            truth.fail(a.node)
        case "repair":
            truth.repair(a.node)
        case "flap":
            truth.flap(a.node, down=True)
        case "unflap":
            truth.flap(a.node, down=False)
        case "resync":
            truth.relist()
        case "gap":
            pass  # the perturber drops what is sent in the gap
    if a.what == "gap":
        truth.loop.at(a.until, "action", Action(a.until, "resync"))  # the new agent lists


def _admit(plane: ControlPlane, store: MemoryStore, settings: Settings, outcome: Outcome) -> None:
    for _ in range(20):
        wanted, hints = plane.take_admission_request()
        if not wanted:
            break
        plane.admission_pass(hints)
    problem = check_quota(store, settings)
    if problem and problem not in outcome.divergences:
        outcome.divergences.append(problem)
