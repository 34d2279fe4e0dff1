"""The simulator's event loop: the decision core against a simulated cluster, in simulated time.

Every decision (admission, deadlines, evictions, backoff, deactivation) is made by
`muster.core.Cluster`, the same code the Lambdas run. This shell only keeps the
clock, delivers timers and requeues when they are due, and carries out the core's
effects on `SimulatedCluster` through `SimulatedActions`, the same `ClusterActions`
port the Lambdas use against Kubernetes.

Policy `none` is plain Kubernetes: the same core with no quota, no deadlines and no
blocking admits every workload when it is submitted, so the event log reads the
same for both policies while nothing is ever evicted.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from muster.core import (
    Admit,
    Cluster,
    DeadlineReached,
    Effect,
    Event,
    Evict,
    Kind,
    LogEvent,
    NodeObserved,
    Outcome,
    PodObserved,
    Publish,
    QueueSettings,
    Requeue,
    RequeueDue,
    Settings,
    StartTimer,
    StopTimer,
    WorkloadFinished,
    WorkloadObserved,
)
from muster.ports import ClusterActions
from muster.sim.kube import GpuSample, JobSpec, PodChange, SimulatedCluster, Wakeup
from muster.sim.scenario import Scenario, seeded

POLICIES = ("gang", "gang+block", "none")

# What happens first at one instant (the order the scenario format promises).
_FAULT, _READY, _COMPLETE, _DEADLINE, _REQUEUE, _SUBMIT = range(6)

# Event-log fields copied from the core's Publish details.
_LOG_FIELDS = ("attempt", "reason", "cause", "count", "requeueAt", "readyPods", "gangSize", "node")
_EVENT_NAMES = {e: e.value for e in LogEvent}


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


@dataclass(slots=True)
class Simulation:
    """One run of one scenario under one policy."""

    scenario: Scenario
    policy: str = "gang"
    progress: Callable[[float, float], None] | None = None
    events: list[dict[str, Any]] = field(default_factory=list)

    def run(self) -> RunResult:
        started = time.perf_counter()
        sc = self.scenario
        jitter = seeded(sc.seed, f"jitter:{self.policy}")
        core = Cluster(policy_settings(sc, self.policy), draw=jitter.random, defer_admission=True)
        kube = SimulatedCluster(sc.nodes, sc.gpus_per_node)
        now = 0.0
        actions: ClusterActions = SimulatedActions(kube, lambda: now)
        heap: list[tuple[float, int, int, int, Any]] = []
        counter = 0
        order = {w.name: i for i, w in enumerate(sc.workloads)}
        specs = {w.name: w for w in sc.workloads}
        cancelled: set[tuple[str, int, str, int]] = set()
        tracking: dict[str, Tracking] = {}
        delivered = 0
        outcomes: dict[Outcome, int] = {}
        evictions = requeues = 0
        by_class: dict[str, int] = {}
        failures = sc.models_failures  # report evictions by class only when asked
        open_workloads = len(sc.workloads)

        def push(at: float, phase: int, tie: int, item: Any) -> None:
            nonlocal counter
            counter += 1
            heapq.heappush(heap, (at, phase, tie, counter, item))

        for w in sc.workloads:
            push(w.submit_at, _SUBMIT, order[w.name], ("submit", w.name))
        for i, f in enumerate(sc.faults):
            push(f.at, _FAULT, i, ("fail", f.node))
            if math.isfinite(f.repair_after):
                push(f.at + f.repair_after, _FAULT, i, ("repair", f.node))

        def deliver(event: Event) -> bool:
            """Give one event to the core and carry out its effects."""
            nonlocal delivered
            delivered += 1
            step = core.apply(event, now)
            for _, outcome, _ in step.outcomes:
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
            for effect in step.effects:
                carry_out(effect)
            return step.admission_wanted

        def carry_out(effect: Effect) -> None:
            nonlocal evictions, requeues, open_workloads
            match effect:
                case Publish(event=name):
                    log(effect)
                    if name is LogEvent.EVICTED:
                        evictions += 1
                        if failures and not effect.detail.get("dryRun"):
                            label = _eviction_class(effect.detail)
                            by_class[label] = by_class.get(label, 0) + 1
                    elif name is LogEvent.REQUEUED:
                        requeues += 1
                    elif name is LogEvent.PODS_READY:
                        track = tracking[effect.workload]
                        if track.first_ready is None:
                            track.first_ready = now
                    elif name is LogEvent.DEACTIVATED:
                        tracking[effect.workload].deactivated = True
                        tracking[effect.workload].deactivated_reason = effect.detail.get("reason")
                        open_workloads -= 1
                    elif name is LogEvent.FINISHED:
                        tracking[effect.workload].finished = now
                        open_workloads -= 1
                case Admit():
                    actions.admit(effect)
                case Evict():
                    actions.evict(effect)
                case StartTimer(workload=key, timer=timer):
                    if timer.deadline <= sc.until:
                        push(
                            timer.deadline,
                            _DEADLINE,
                            order[key],
                            DeadlineReached(key, timer.attempt, timer.kind, timer.episode),
                        )
                case StopTimer(workload=key, timer=timer):
                    cancelled.add((key, timer.attempt, timer.kind, timer.episode))
                case Requeue(workload=key, count=count, requeue_at=at):
                    if at <= sc.until:
                        push(at, _REQUEUE, order[key], RequeueDue(key, count))

        def log(effect: Publish) -> None:
            entry: dict[str, Any] = {
                "t": _num(now),
                "workload": effect.workload,
                "event": _EVENT_NAMES[effect.event],
            }
            get = effect.detail.get
            for key in _LOG_FIELDS:
                value = get(key)
                if value is not None:
                    entry[key] = _num(value) if type(value) is float else value
            if failures and effect.event is LogEvent.EVICTED:
                entry["class"] = _eviction_class(effect.detail)
            self.events.append(entry)

        def drain() -> bool:
            """Feed the cluster's pod changes to the core; schedule its wake-ups."""
            wanted = False
            while kube.outbox:
                batch, kube.outbox[:] = list(kube.outbox), []
                for item in batch:
                    if isinstance(item, PodChange):
                        wanted |= deliver(
                            PodObserved(
                                item.workload,
                                item.pod,
                                item.seq,
                                item.uid,
                                item.phase,
                                item.ready,
                                item.node,
                                item.deleted,
                                item.reason,
                                item.message,
                                waiting=item.waiting,
                                restarts=item.restarts,
                                terminated=item.terminated,
                                exit_code=item.exit_code,
                            )
                        )
                    else:
                        schedule(item)
            return wanted

        def schedule(w: Wakeup) -> None:
            if w.at > sc.until:
                return
            if w.what == "ready":
                push(w.at, _READY, order[w.job], ("ready", w.job, w.ref))
            elif w.what == "fault":
                push(w.at, _READY, order[w.job], ("fault", w.job, w.ref))
            else:
                push(w.at, _COMPLETE, order[w.job], ("complete", w.job, w.ref))

        def handle(item: Any) -> bool:
            """One due item; True if the core asked for an admission pass."""
            if isinstance(item, DeadlineReached):
                ident = (item.workload, item.attempt, item.kind, item.episode)
                if ident in cancelled:
                    cancelled.discard(ident)
                    return False
                return deliver(item)
            if isinstance(item, RequeueDue):
                return deliver(item)
            what = item[0]
            if what == "submit":
                w = specs[item[1]]
                kube.add_job(
                    JobSpec(
                        w.name,
                        w.pods,
                        w.gpus_per_pod,
                        w.startup_seconds,
                        w.run_seconds,
                        w.never_ready,
                        w.failure,
                    )
                )
                tracking[w.name] = Tracking(now)
                return deliver(
                    WorkloadObserved(
                        w.name,
                        w.queue,
                        w.pods,
                        w.gpus,
                        w.priority,
                        Kind.JOB,
                        created_at=now,
                        seq=1,
                    )
                )
            if what == "ready":
                kube.pod_ready(item[1], item[2], now)
                return drain()
            if what == "fault":
                kube.pod_fault(item[1], item[2], now)
                return drain()
            if what == "complete":
                if not kube.complete(item[1], item[2], now):
                    return False
                wanted = drain()
                return deliver(WorkloadFinished(item[1])) or wanted
            if what == "fail":
                wanted = deliver(NodeObserved(item[1], ready=False))
                kube.fail_node(item[1], now)
                kube.reconcile()  # controllers recreate the lost pods at once
                return drain() or wanted
            if what == "repair":
                kube.repair_node(item[1], now)
                return deliver(NodeObserved(item[1], ready=True))
            raise AssertionError(f"unknown item {item!r}")  # pragma: no cover

        end = sc.until
        last_report = 0.0
        while heap and open_workloads > 0:
            now = heap[0][0]
            if now > sc.until:
                break
            while True:
                wanted = False
                while heap and heap[0][0] == now:
                    item = heapq.heappop(heap)[4]
                    wanted |= handle(item)
                if wanted:
                    step = core.admission_pass(now)
                    for _, outcome, _ in step.outcomes:
                        outcomes[outcome] = outcomes.get(outcome, 0) + 1
                    delivered += len(step.outcomes)
                    for effect in step.effects:
                        carry_out(effect)
                kube.reconcile()
                drain()
                kube.bind_pending(now)
                drain()
                if not (heap and heap[0][0] == now):
                    break
            if self.progress is not None and now - last_report >= sc.until / 200:
                last_report = now
                self.progress(now, sc.until)
        if open_workloads == 0:
            end = now
        kube.finish_accounting(end)
        wall = time.perf_counter() - started
        counted = {outcome.value: n for outcome, n in outcomes.items()}
        summary = summarize(sc, kube, tracking, end, evictions, requeues, delivered, counted, wall)
        if failures:
            summary.update(failure_summary(sc, kube, tracking, by_class))
        summary["policy"] = self.policy
        return RunResult(
            sc.name, self.policy, sc.seed, self.events, summary, kube.samples, kube.total_gpus, end
        )


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
    capacity = kube.total_gpus * end / 3600.0
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
        "queueDelaySeconds": _percentiles(delays),
        "jctSeconds": _percentiles(jcts),
        "makespanSeconds": _num(end),
        "simulatedEvents": delivered,
        "outcomes": dict(sorted(outcomes.items())),
        "wallSeconds": round(wall, 3),
    }


def _eviction_class(detail: Mapping[str, Any]) -> str:
    """The diagnosis of an eviction's not-ready pods, in one word (`NodeFailures` for a
    node being replaced, which is decided before any pod is looked at)."""
    found = detail.get("diagnosis")
    if isinstance(found, Mapping):
        return str(found.get("class"))
    return "NodeFault" if detail.get("reason") == "NodeFailures" else "None"


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
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r} (choose from {', '.join(POLICIES)})")
    return Simulation(scenario, policy, progress=progress).run()
