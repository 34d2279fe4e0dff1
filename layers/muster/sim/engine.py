"""The simulator's event loop: the decision core against a simulated cluster, in simulated time.

Every decision (admission, deadlines, evictions, backoff, deactivation) is made by
`muster.core.Fleet`, the same code the Lambdas run. This shell only keeps the
clock, delivers timers and requeues when they are due, and carries out the core's
effects on `SimulatedCluster` through `SimulatedActions`, the same `ClusterActions`
port the Lambdas use against Kubernetes.

A run is a few named steps, each a place to extend:

- `Agenda`: the clock and what is due when (submissions, node faults, the
  cluster's wake-ups, the core's deadlines and requeues), in a fixed order;
- `Simulation._settle`: one instant, played until nothing more is due at it;
  each kind of agenda item has its own handler (`Simulation._handlers`);
- `Simulation._deliver` / `_admission_pass`: events into the core;
- `Simulation._carry_out`: the core's effects out, onto the cluster and the agenda;
- `Simulation._drain`: what the cluster did (pod changes to the core, wake-ups
  onto the agenda);
- `RunLog`: the event log and the counts the summary is made of.

Policy `none` is plain Kubernetes: the same core with no quota, no deadlines and no
blocking admits every workload when it is submitted, so the event log reads the
same for both policies while nothing is ever evicted.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from heapq import heappop, heappush
from typing import Any, NamedTuple

from muster.core import (
    Admit,
    DeadlineReached,
    Effect,
    Event,
    Evict,
    Fleet,
    Kind,
    LogEvent,
    NodeObserved,
    Outcome,
    Publish,
    QueueSettings,
    Requeue,
    RequeueDue,
    RunAdmission,
    Settings,
    StartTimer,
    StepResult,
    StopTimer,
    WorkloadFinished,
    WorkloadObserved,
)
from muster.ports import ClusterActions
from muster.sim.kube import (
    GpuSample,
    SimulatedCluster,
    Wakeup,
    node_line,
)
from muster.sim.scenario import Scenario
from muster.sim.specs import seeded

POLICIES = ("gang", "gang+block", "gang+fit", "none")

# What happens first at one instant (the order the scenario format promises).
_FAULT, _READY, _COMPLETE, _DEADLINE, _REQUEUE, _SUBMIT = range(6)

# Event-log fields copied from the core's Publish details.
_LOG_FIELDS = ("attempt", "reason", "cause", "count", "requeueAt", "readyPods", "gangSize", "node")
_EVENT_NAMES = {e: e.value for e in LogEvent}
# The log events the summary counts, looked up once: reading a member off its enum
# class costs more than the rest of a log entry.
_EVICTED, _REQUEUED, _PODS_READY, _DEACTIVATED, _FINISHED = (
    LogEvent.EVICTED,
    LogEvent.REQUEUED,
    LogEvent.PODS_READY,
    LogEvent.DEACTIVATED,
    LogEvent.FINISHED,
)


class SimulatedActions:
    """`ClusterActions` on the simulated cluster: admit unsuspends, evict suspends."""

    def __init__(self, cluster: SimulatedCluster, clock: Callable[[], float]) -> None:
        self.cluster = cluster
        self._clock = clock

    def admit(self, effect: Admit) -> None:
        self.cluster.unsuspend(effect.workload)

    def evict(self, effect: Evict) -> None:
        self.cluster.suspend(effect.workload, self._clock())

    def record(self, workload: str, kind: Kind, view: Mapping[str, str]) -> None:
        """Nothing to annotate on simulated workloads."""


def policy_settings(scenario: Scenario, policy: str) -> Settings:
    """The settings the core runs with under `policy`."""
    if policy == "gang":
        return scenario.settings
    if policy == "gang+block":
        return replace(scenario.settings, block_admission=True)
    if policy == "gang+fit":
        return replace(scenario.settings, capacity_check=True)
    if policy == "none":
        # Plain Kubernetes: admitted at once, never timed out, no quota.
        return Settings(defaults=QueueSettings(timeout=math.inf, recovery_timeout=0.0))
    raise ValueError(f"unknown policy {policy!r} (choose from {', '.join(POLICIES)})")


@dataclass(slots=True)
class RunResult:
    scenario: str
    policy: str
    seed: int
    events: list[dict[str, Any]]
    summary: dict[str, Any]
    samples: list[GpuSample]
    total_gpus: int
    end: float


@dataclass(slots=True)
class Tracking:
    """When one workload was submitted, first PodsReady, finished (for the summary)."""

    submitted: float
    first_ready: float | None = None
    finished: float | None = None
    deactivated: bool = False
    deactivated_reason: str | None = None


# --------------------------------------------------------------------------- the agenda

# Besides the core's own `DeadlineReached` and `RequeueDue`, the agenda holds these.


class Submit(NamedTuple):
    """The scenario's workload is created (suspended) and observed by the core."""

    workload: str


class PodStarted(NamedTuple):
    """A bound pod's startup is done: the kubelet reports it Ready."""

    job: str
    uid: str


class PodFails(NamedTuple):
    """A failing pod's next state: its image pull fails, its container exits or restarts."""

    job: str
    uid: str


class RunDone(NamedTuple):
    """A job's run is done, if it progressed without a break since `token`."""

    job: str
    token: int


class NodeFails(NamedTuple):
    node: str


class NodeRepaired(NamedTuple):
    node: str


Item = (
    Submit
    | PodStarted
    | PodFails
    | RunDone
    | NodeFails
    | NodeRepaired
    | DeadlineReached
    | RequeueDue
)


Entry = tuple[float, int, int, int, Item]


class Agenda:
    """The simulated clock and what is due when.

    Items run in (time, phase, tie, arrival) order: `phase` says what happens first
    at one instant (faults, pods turning Ready, completions, deadlines, requeues,
    submissions), `tie` orders one phase's items by the workload's place in the
    scenario (or the fault's), and arrival orders the rest.

    What is known from the start (`plan`: the scenario's submissions and faults)
    waits in one sorted list beside the heap of what comes up while running, so
    the heap stays small however long the scenario.
    """

    __slots__ = ("_heap", "_planned", "_pushed", "now")

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[Entry] = []
        self._planned: list[Entry] = []  # latest first: the next one is at the end
        self._pushed = 0

    def plan(self, items: Iterable[tuple[float, int, int, Item]]) -> None:
        """Items known before the run starts, in the order they were made."""
        for at, phase, tie, item in items:
            self._pushed += 1
            self._planned.append((at, phase, tie, self._pushed, item))
        self._planned.sort(reverse=True, key=lambda entry: entry[:4])  # arrival is unique

    def push(self, at: float, phase: int, tie: int, item: Item) -> None:
        self._pushed += 1
        heappush(self._heap, (at, phase, tie, self._pushed, item))

    def advance(self, until: float) -> bool:
        """Move the clock to the next instant with something due; False past `until`."""
        heap, planned = self._heap, self._planned
        if heap:
            at = heap[0][0]
            if planned and planned[-1][0] < at:
                at = planned[-1][0]
        elif planned:
            at = planned[-1][0]
        else:
            return False
        if at > until:
            return False
        self.now = at
        return True

    def due(self) -> bool:
        """Something more is due at the current instant."""
        now = self.now
        return bool(self._heap and self._heap[0][0] == now) or bool(
            self._planned and self._planned[-1][0] == now
        )

    def pop_due(self) -> Item | None:
        """The next item due at the current instant, or None."""
        heap, planned, now = self._heap, self._planned, self.now
        # Arrival numbers are unique, so comparing entries never reaches the items.
        if planned and planned[-1][0] == now and not (heap and heap[0] < planned[-1]):
            return planned.pop()[4]
        if heap and heap[0][0] == now:
            return heappop(heap)[4]
        return None


# --------------------------------------------------------------------------- the log


class RunLog:
    """The run's event log, and the counts its summary is made of."""

    def __init__(self, workloads: int, failures: bool = False) -> None:
        self.events: list[dict[str, Any]] = []
        # Only when the scenario models failure modes: each eviction's class in the
        # log, and evictions by class for the summary (otherwise the log is unchanged).
        self.failures = failures
        self.by_class: dict[str, int] = {}
        self.tracking: dict[str, Tracking] = {}
        self.outcomes: dict[Outcome, int] = dict.fromkeys(Outcome, 0)  # unseen ones stay 0
        self.delivered = 0  # events the core decided on
        self.evictions = 0
        self.requeues = 0
        self.open_workloads = workloads  # neither finished nor deactivated
        self._instant = math.nan  # the last instant logged, and its "t" as logged
        self._t: float | int = 0
        # The log fields (in `_LOG_FIELDS` order) of each shape of detail seen: an
        # event's details have one of a few shapes, so each is worked out once.
        self._fields: dict[tuple[str, ...], tuple[str, ...]] = {}

    def submitted(self, workload: str, now: float) -> None:
        self.tracking[workload] = Tracking(now)

    def decided(self, step: StepResult) -> None:
        """Count what became of each event the core decided on in `step`."""
        outcomes = self.outcomes
        for _, outcome, _ in step.outcomes:
            outcomes[outcome] += 1

    def outcome_counts(self) -> dict[str, int]:
        """Events by what became of them (only the outcomes that happened)."""
        return {outcome.value: n for outcome, n in self.outcomes.items() if n}

    def node_changed(self, now: float, node: str, *, failed: bool) -> None:
        """A node fault (or its repair) as a line of its own, before what it causes."""
        self.events.append(node_line(_num(now), node, failed=failed))

    def published(self, effect: Publish, now: float) -> None:
        """One event-log entry, and what it means for the summary."""
        if now != self._instant:
            self._instant, self._t = now, _num(now)
        name, workload, detail = effect.event, effect.workload, effect.detail
        entry: dict[str, Any] = {"t": self._t, "workload": workload, "event": _EVENT_NAMES[name]}
        shape = tuple(detail)
        fields = self._fields.get(shape)
        if fields is None:
            fields = self._fields[shape] = tuple(k for k in _LOG_FIELDS if k in detail)
        for key in fields:
            value = detail[key]
            if value is not None:
                entry[key] = _num(value) if type(value) is float else value
        self.events.append(entry)
        if name is _EVICTED:
            self.evictions += 1
            if self.failures:
                label = entry["class"] = _eviction_class(detail)
                if not detail.get("dryRun"):
                    self.by_class[label] = self.by_class.get(label, 0) + 1
        elif name is _REQUEUED:
            self.requeues += 1
        elif name is _PODS_READY:
            track = self.tracking[workload]
            if track.first_ready is None:
                track.first_ready = now
        elif name is _DEACTIVATED:
            track = self.tracking[workload]
            track.deactivated = True
            track.deactivated_reason = detail.get("reason")
            self.open_workloads -= 1
        elif name is _FINISHED:
            self.tracking[workload].finished = now
            self.open_workloads -= 1


# --------------------------------------------------------------------------- the run


class Simulation:
    """One run of one scenario under one policy (`run` once)."""

    def __init__(
        self,
        scenario: Scenario,
        policy: str = "gang",
        progress: Callable[[float, float], None] | None = None,
    ) -> None:
        self.scenario = scenario
        self.policy = policy
        self.progress = progress
        jitter = seeded(scenario.seed, f"jitter:{policy}")
        self.core = Fleet(
            policy_settings(scenario, policy), draw=jitter.random, defer_admission=True
        )
        self.kube = SimulatedCluster(scenario.nodes, scenario.gpus_per_node)
        self.agenda = Agenda()
        self.log = RunLog(len(scenario.workloads), failures=scenario.models_failures)
        self.actions: ClusterActions = SimulatedActions(self.kube, lambda: self.agenda.now)
        self._until = scenario.until
        self._specs = {w.name: w for w in scenario.workloads}
        self._order = {w.name: i for i, w in enumerate(scenario.workloads)}
        self._cancelled: set[tuple[str, int, str, int]] = set()  # stopped timers
        # With the capacity check the core learns each node's GPUs, as an agent reports
        # them when it starts and at every change after (its own counter orders them).
        self._capacity = self.core.settings.capacity_check
        self._node_seq = 0
        self._handlers: dict[type[Any], Callable[[Any], bool]] = {
            Submit: self._submit,
            PodStarted: self._pod_started,
            PodFails: self._pod_fails,
            RunDone: self._run_done,
            NodeFails: self._node_fails,
            NodeRepaired: self._node_repaired,
            DeadlineReached: self._deadline,
            RequeueDue: self._deliver,
        }
        # What to do with each kind of effect but `Publish` (the most frequent, logged
        # first); `RunAdmission` is the core's to answer.
        self._effects: dict[type[Any], Callable[[Any], None]] = {
            Admit: self.actions.admit,
            Evict: self.actions.evict,
            StartTimer: self._start_timer,
            StopTimer: self._stop_timer,
            Requeue: self._requeue,
            RunAdmission: _ignore,
        }

    @property
    def events(self) -> list[dict[str, Any]]:
        return self.log.events

    def run(self) -> RunResult:
        started = time.perf_counter()
        self._plan()
        agenda, log, until = self.agenda, self.log, self._until
        last_report = 0.0
        # A run makes no reference cycles as it goes, only ever more live objects (the
        # log, the core's workloads): the cyclic collector, left on, would walk them
        # all again and again for nothing to free.
        collecting = gc.isenabled()
        gc.disable()
        try:
            while log.open_workloads > 0 and agenda.advance(until):
                self._settle()
                if self.progress is not None and agenda.now - last_report >= until / 200:
                    last_report = agenda.now
                    self.progress(agenda.now, until)
        finally:
            if collecting:
                gc.enable()
        end = agenda.now if log.open_workloads == 0 else until
        self.kube.finish_accounting(end)
        summary = summarize(
            self.scenario,
            self.kube,
            log.tracking,
            end,
            log.evictions,
            log.requeues,
            log.delivered,
            log.outcome_counts(),
            time.perf_counter() - started,
        )
        if log.failures:
            summary.update(failure_summary(self.scenario, self.kube, log.tracking, log.by_class))
        summary["policy"] = self.policy
        sc, kube = self.scenario, self.kube
        return RunResult(
            sc.name, self.policy, sc.seed, log.events, summary, kube.samples, kube.total_gpus, end
        )

    def _plan(self) -> None:
        """The scenario's submissions and node faults onto the agenda (and, with the
        capacity check, every node's GPUs into the core)."""
        if self._capacity:
            for node in self.kube.node_names:
                self._deliver(self._node_event(node, True))
        sc = self.scenario
        items: list[tuple[float, int, int, Item]] = [
            (w.submit_at, _SUBMIT, i, Submit(w.name)) for i, w in enumerate(sc.workloads)
        ]
        for i, f in enumerate(sc.faults):
            items.append((f.at, _FAULT, i, NodeFails(f.node)))
            if math.isfinite(f.repair_after):
                items.append((f.at + f.repair_after, _FAULT, i, NodeRepaired(f.node)))
        self.agenda.plan(items)

    def _settle(self) -> None:
        """Play the current instant: its due items, then (if asked for) one admission
        pass, then the cluster's controllers and scheduler; again while that made
        more due at this instant (a zero startup time, say)."""
        agenda, kube, handlers = self.agenda, self.kube, self._handlers
        now, pop_due = agenda.now, agenda.pop_due
        while True:
            wanted = False
            while (item := pop_due()) is not None:
                wanted |= handlers[type(item)](item)
            if wanted:
                self._admission_pass()
            kube.reconcile()
            if kube.outbox:
                self._drain()
            kube.bind_pending(now)
            if kube.outbox:
                self._drain()
            if not agenda.due():
                return

    # ----------------------------------------------------------- events into the core

    def _deliver(self, event: Event) -> bool:
        """Give one event to the core and carry out its effects; True if the core
        asked for an admission pass (run once the instant's items are all in)."""
        log = self.log
        log.delivered += 1
        step = self.core.apply(event, self.agenda.now)
        log.decided(step)
        if step.effects:
            self._carry_out(step.effects)
        return step.admission_wanted

    def _admission_pass(self) -> None:
        step = self.core.admission_pass(self.agenda.now)
        self.log.decided(step)
        self.log.delivered += len(step.outcomes)
        if step.effects:
            self._carry_out(step.effects)

    # ----------------------------------------------------------- effects out of the core

    def _carry_out(self, effects: list[Effect]) -> None:
        now, publish, handlers = self.agenda.now, self.log.published, self._effects
        for effect in effects:
            if type(effect) is Publish:
                publish(effect, now)
            else:
                handlers[type(effect)](effect)

    def _start_timer(self, effect: StartTimer) -> None:
        timer = effect.timer
        if timer.deadline <= self._until:
            key = effect.workload
            self.agenda.push(
                timer.deadline,
                _DEADLINE,
                self._order[key],
                DeadlineReached(key, timer.attempt, timer.kind, timer.episode),
            )

    def _stop_timer(self, effect: StopTimer) -> None:
        timer = effect.timer
        self._cancelled.add((effect.workload, timer.attempt, timer.kind, timer.episode))

    def _requeue(self, effect: Requeue) -> None:
        if effect.requeue_at <= self._until:
            key = effect.workload
            self.agenda.push(
                effect.requeue_at, _REQUEUE, self._order[key], RequeueDue(key, effect.count)
            )

    # ----------------------------------------------------------- what the cluster did

    def _drain(self) -> bool:
        """Feed the cluster's pod changes to the core; put its wake-ups on the agenda."""
        kube, deliver = self.kube, self._deliver
        wanted = False
        while kube.outbox:
            batch, kube.outbox = kube.outbox, []
            for item in batch:
                if isinstance(item, Wakeup):
                    self._wake_at(item)
                else:
                    wanted |= deliver(item)
        return wanted

    def _wake_at(self, w: Wakeup) -> None:
        if w.at > self._until:
            return
        if w.what == "ready":
            self.agenda.push(w.at, _READY, self._order[w.job], PodStarted(w.job, str(w.ref)))
        elif w.what == "fault":
            self.agenda.push(w.at, _READY, self._order[w.job], PodFails(w.job, str(w.ref)))
        else:
            self.agenda.push(w.at, _COMPLETE, self._order[w.job], RunDone(w.job, int(w.ref)))

    # ----------------------------------------------------------- one handler per agenda item
    # Each returns True if the core asked for an admission pass.

    def _submit(self, item: Submit) -> bool:
        w = self._specs[item.workload]
        now = self.agenda.now
        self.kube.add_job(w.job())
        self.log.submitted(w.name, now)
        return self._deliver(
            WorkloadObserved(
                w.name,
                w.queue,
                w.pods,
                w.gpus,
                w.priority,
                Kind.JOB,
                created_at=now,
                seq=1,
                shape=((w.pods, w.gpus_per_pod),),
            )
        )

    def _pod_started(self, item: PodStarted) -> bool:
        self.kube.pod_ready(item.job, item.uid, self.agenda.now)
        return self._drain()

    def _pod_fails(self, item: PodFails) -> bool:
        self.kube.pod_fault(item.job, item.uid, self.agenda.now)
        return self._drain()

    def _run_done(self, item: RunDone) -> bool:
        if not self.kube.complete(item.job, item.token, self.agenda.now):
            return False
        wanted = self._drain()
        return self._deliver(WorkloadFinished(item.job)) or wanted

    def _node_event(self, node: str, ready: bool) -> NodeObserved:
        if not self._capacity:
            return NodeObserved(node, ready=ready)
        self._node_seq += 1
        return NodeObserved(node, ready=ready, seq=self._node_seq, gpus=self.scenario.gpus_per_node)

    def _node_fails(self, item: NodeFails) -> bool:
        self.log.node_changed(self.agenda.now, item.node, failed=True)
        wanted = self._deliver(self._node_event(item.node, False))
        self.kube.fail_node(item.node, self.agenda.now)
        self.kube.reconcile()  # controllers recreate the lost pods at once
        return self._drain() or wanted

    def _node_repaired(self, item: NodeRepaired) -> bool:
        self.log.node_changed(self.agenda.now, item.node, failed=False)
        self.kube.repair_node(item.node, self.agenda.now)
        return self._deliver(self._node_event(item.node, True))

    def _deadline(self, item: DeadlineReached) -> bool:
        ident = (item.workload, item.attempt, item.kind, item.episode)
        if ident in self._cancelled:
            self._cancelled.discard(ident)
            return False
        return self._deliver(item)


def _ignore(effect: Effect) -> None:
    """An effect the simulator has nothing to do for."""


def summarize(
    sc: Scenario,
    kube: SimulatedCluster,
    tracking: Mapping[str, Tracking],
    end: float,
    evictions: int,
    requeues: int,
    delivered: int,
    outcomes: Mapping[str, int],
    wall: float,
) -> dict[str, Any]:
    finished = [t for t in tracking.values() if t.finished is not None]
    deactivated = sum(1 for t in tracking.values() if t.deactivated)
    useful = kube.useful_gpu_seconds / 3600.0
    wasted = (kube.held_gpu_seconds - kube.useful_gpu_seconds) / 3600.0
    # One window for every policy (the scenario's horizon): GPU-hours used over
    # GPU-hours available in it. Each run's own length would favour a policy that
    # finishes later, and differ between the runs being compared.
    window = sc.until
    capacity = kube.total_gpus * window / 3600.0
    delays = [t.first_ready - t.submitted for t in tracking.values() if t.first_ready is not None]
    jcts = [t.finished - t.submitted for t in finished if t.finished is not None]
    return {
        "scenario": sc.name,
        "seed": sc.seed,
        "workloads": len(sc.workloads),
        "finished": len(finished),
        "deactivated": deactivated,
        "unfinished": len(sc.workloads) - len(finished) - deactivated,
        "evictions": evictions,
        "requeues": requeues,
        "usefulGpuHours": round(useful, 3),
        "wastedGpuHours": round(wasted, 3),
        "idleGpuHours": round(capacity - useful - wasted, 3),
        "utilization": round(useful / capacity, 4) if capacity > 0 else 0.0,
        "windowSeconds": _num(window),
        "queueDelaySeconds": _percentiles(delays),
        "jctSeconds": _percentiles(jcts),
        "makespanSeconds": _num(end),
        "simulatedEvents": delivered,
        "outcomes": dict(sorted(outcomes.items())),
        "wallSeconds": round(wall, 3),
    }


def _eviction_class(detail: Mapping[str, Any]) -> str:
    """The diagnosis of an eviction's not-ready pods, in one word (`NodeFault` for a
    node being replaced, which is decided before any pod is looked at)."""
    if detail.get("reason") == "NodeFailures":
        return "NodeFault"
    found = detail.get("diagnosis")
    return str(found.get("class")) if isinstance(found, Mapping) else "None"


def failure_summary(
    sc: Scenario,
    kube: SimulatedCluster,
    tracking: Mapping[str, Tracking],
    by_class: Mapping[str, int],
) -> dict[str, Any]:
    """Evictions by class and wasted GPU-hours by failure mode, for scenarios that model them."""
    healthy = {w.name for w in sc.workloads if not w.never_ready}
    wasted = {
        (category or "healthy"): round((held - kube.useful_by.get(category, 0.0)) / 3600.0, 3)
        for category, held in sorted(kube.held_by.items())
    }
    reasons: dict[str, int] = {}
    for t in tracking.values():
        if t.deactivated:
            key = t.deactivated_reason or "unknown"
            reasons[key] = reasons.get(key, 0) + 1
    return {
        "evictionsByClass": dict(sorted(by_class.items())),
        "wastedGpuHoursByFailure": wasted,
        "deactivatedHealthy": sum(
            1 for name, t in tracking.items() if t.deactivated and name in healthy
        ),
        "deactivatedByReason": dict(sorted(reasons.items())),
    }


def _percentiles(values: list[float]) -> dict[str, float | None]:
    """Nearest-rank p50, p95 and max (None when no workload got there)."""
    if not values:
        return {"p50": None, "p95": None, "max": None}
    ordered = sorted(values)

    def rank(q: float) -> float:
        return _num(ordered[max(0, math.ceil(q * len(ordered)) - 1)])

    return {"p50": rank(0.5), "p95": rank(0.95), "max": _num(ordered[-1])}


def _num(value: float) -> float | int:
    """Seconds as JSON-friendly numbers: whole ones without a fraction."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return round(value, 3)


def simulate(
    scenario: Scenario,
    policy: str = "gang",
    *,
    progress: Callable[[float, float], None] | None = None,
) -> RunResult:
    """Run `scenario` under `policy` ("gang", "gang+block" or "none")."""
    return Simulation(scenario, policy, progress=progress).run()
