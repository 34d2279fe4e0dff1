"""The simulator's event loop: the decision core against a simulated cluster, in simulated time.

Every decision (admission, deadlines, evictions, backoff, deactivation) is made by
`muster.core.Fleet`, the same code the Lambdas run. This shell only keeps the
clock, delivers timers and requeues when they are due, and carries out the core's
effects on `SimulatedCluster` through `SimulatedActions`, the same `ClusterActions`
port the Lambdas use against Kubernetes.

A run is a few named steps, each a place to extend:

- `Agenda` (`muster.sim.agenda`): the clock and what is due when (submissions,
  node faults, the cluster's wake-ups, the core's deadlines and requeues), in a
  fixed order;
- `Simulation._settle`: one instant, played until nothing more is due at it;
  each kind of agenda item has its own handler (`Simulation._handlers`);
- `Simulation._deliver` / `_admission_pass`: events into the core;
- `Simulation._carry_out`: the core's effects out, onto the cluster and the agenda;
- `Simulation._drain`: what the cluster did (pod changes to the core, wake-ups
  onto the agenda);
- `RunLog` (`muster.sim.runlog`): the event log and the counts the summary
  (`muster.sim.summary`) is made of.

What a run keeps grows with what is in flight, not with all there was: the core
forgets a workload once it finished (a completed job's pods go with it, so the
cluster says nothing more of it), and with `record` off (a caller that reads only
the summary: a benchmark, a tuner's run) neither the event log nor the GPU-use
samples are made.

Policy `none` is plain Kubernetes: the same core with no quota, no deadlines and no
blocking admits every workload when it is submitted, so the event log reads the
same for both policies while nothing is ever evicted.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from muster.core import (
    Admit,
    DeadlineReached,
    Effect,
    Event,
    Evict,
    Fleet,
    Kind,
    NodeObserved,
    Publish,
    QueueSettings,
    Requeue,
    RequeueDue,
    RunAdmission,
    Settings,
    StartTimer,
    StopTimer,
    WorkloadFinished,
    WorkloadObserved,
)
from muster.runtime.ports import ClusterActions
from muster.sim.agenda import (
    COMPLETE,
    DEADLINE,
    FAULT,
    READY,
    REQUEUE,
    SUBMIT,
    Agenda,
    Item,
    NodeFails,
    NodeRepaired,
    PodFails,
    PodStarted,
    RunDone,
    Submit,
)
from muster.sim.blocks import BlockCluster
from muster.sim.kube import GpuSample, PodChange, SimulatedCluster, Wakeup
from muster.sim.runlog import RunLog
from muster.sim.scenario import Scenario
from muster.sim.specs import seeded
from muster.sim.summary import Tracking, failure_summary, summarize, topology_summary

POLICIES = ("gang", "gang+block", "gang+fit", "none")


class SimulatedActions:
    """`ClusterActions` on the simulated cluster: admit unsuspends, evict suspends."""

    def __init__(self, cluster: SimulatedCluster, clock: Callable[[], float]) -> None:
        self.cluster = cluster
        self._clock = clock

    def admit(self, effect: Admit) -> None:
        if isinstance(self.cluster, BlockCluster):  # its pods kept inside its domain
            self.cluster.unsuspend(effect.workload, effect.domain)
        else:
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
    stopped_at: float | None = None  # when `stop` ended the run early (its figures so far)
    # Each workload's submission, first PodsReady, end (kept with `record` off too).
    tracking: Mapping[str, Tracking] = field(default_factory=dict)


# --------------------------------------------------------------------------- the run


class Simulation:
    """One run of one scenario under one policy (`run` once)."""

    def __init__(
        self,
        scenario: Scenario,
        policy: str = "gang",
        progress: Callable[[float, float], None] | None = None,
        stop: Callable[[Simulation], bool] | None = None,
        stop_every: float | None = None,
        *,
        record: bool = True,
    ) -> None:
        self.scenario = scenario
        self.policy = policy
        self.progress = progress
        # Asked after the first instant and then every `stop_every` simulated seconds
        # (default: 1/200 of the horizon) whether to end the run there. It only reads:
        # a run it never stops is the run without it.
        self.stop = stop
        self._stop_every = stop_every if stop_every is not None else scenario.until / 200
        jitter = seeded(scenario.seed, f"jitter:{policy}")
        self.core = Fleet(
            policy_settings(scenario, policy),
            draw=jitter.random,
            defer_admission=True,
            forget_finished=True,
            # An eviction's diagnosis is read only to classify it, when the scenario
            # models failure modes; no log line carries it otherwise.
            details=scenario.models_failures,
        )
        self.kube = cluster_of(scenario, sampling=record)
        self.agenda = Agenda()
        self.log = RunLog(len(scenario.workloads), failures=scenario.models_failures, keep=record)
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
        stop, next_check, stopped_at = self.stop, 0.0, None
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
                if stop is not None and agenda.now >= next_check:
                    next_check = agenda.now + self._stop_every
                    if stop(self):
                        stopped_at = agenda.now
                        break
        finally:
            if collecting:
                gc.enable()
        end = agenda.now if log.open_workloads == 0 or stopped_at is not None else until
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
        if isinstance(self.kube, BlockCluster) and self.scenario.topology:
            summary["topology"] = topology_summary(self.scenario, self.kube, log.tracking)
        summary["policy"] = self.policy
        sc, kube = self.scenario, self.kube
        return RunResult(
            sc.name,
            self.policy,
            sc.seed,
            log.events,
            summary,
            kube.samples,
            kube.total_gpus,
            end,
            stopped_at,
            log.tracking,
        )

    def _plan(self) -> None:
        """The scenario's submissions and node faults onto the agenda (and, with the
        capacity check, every node's GPUs into the core)."""
        if self._capacity:
            for node in self.kube.node_names:
                self._deliver(self._node_event(node, True))
        sc = self.scenario
        items: list[tuple[float, int, int, Item]] = [
            (w.submit_at, SUBMIT, i, Submit(w.name)) for i, w in enumerate(sc.workloads)
        ]
        for i, f in enumerate(sc.faults):
            items.append((f.at, FAULT, i, NodeFails(f.node)))
            if math.isfinite(f.repair_after):
                items.append((f.at + f.repair_after, FAULT, i, NodeRepaired(f.node)))
        self.agenda.plan(items)

    def _settle(self) -> None:
        """Play the current instant: its due items, then (if asked for) one admission
        pass, then the cluster's controllers and scheduler; again while that made
        more due at this instant (a zero startup time, say).

        What the controllers and the scheduler did is reported once both have acted,
        so a pod created and bound at once is reported once, bound."""
        agenda, kube, handlers = self.agenda, self.kube, self._handlers
        now, pop_due = agenda.now, agenda.pop_due
        while True:
            wanted = False
            while (item := pop_due()) is not None:
                wanted |= handlers[type(item)](item)
            if wanted:
                self._admission_pass()
            kube.reconcile()
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
        if not self.core.queued:
            return  # the pass would plan nothing and decide nothing
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
                DEADLINE,
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
                effect.requeue_at, REQUEUE, self._order[key], RequeueDue(key, effect.count)
            )

    # ----------------------------------------------------------- what the cluster did

    def _drain(self) -> bool:
        """Feed the cluster's pod changes to the core (each pod's latest of a batch);
        put its wake-ups on the agenda."""
        kube, deliver = self.kube, self._deliver
        wanted = False
        while kube.outbox:
            batch, kube.outbox = kube.outbox, []
            for item in latest_reports(batch):
                if isinstance(item, Wakeup):
                    self._wake_at(item)
                else:
                    wanted |= deliver(item)
        return wanted

    def _wake_at(self, w: Wakeup) -> None:
        if w.at > self._until:
            return
        if w.what == "ready":
            self.agenda.push(w.at, READY, self._order[w.job], PodStarted(w.job, str(w.ref)))
        elif w.what == "fault":
            self.agenda.push(w.at, READY, self._order[w.job], PodFails(w.job, str(w.ref)))
        else:
            self.agenda.push(w.at, COMPLETE, self._order[w.job], RunDone(w.job, int(w.ref)))

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
                # Plain Kubernetes (policy `none`) knows no `muster.io/topology`.
                topology=w.topology if self.policy != "none" else "",
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
        return NodeObserved(
            node,
            ready=ready,
            seq=self._node_seq,
            gpus=self.scenario.gpus_per_node,
            topology=self._node_topology(node),
        )

    def _node_topology(self, node: str) -> tuple[tuple[str, str], ...]:
        """The topology labels `node` reports (none without `cluster.topology`)."""
        if isinstance(self.kube, BlockCluster):
            return self.kube.topology[self.kube.node_names.index(node)]
        return ()

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


def cluster_of(scenario: Scenario, *, sampling: bool = True) -> SimulatedCluster:
    """The simulated cluster of `scenario`: its nodes in network blocks if it has them,
    and honouring node selectors if gangs may be packed onto nodes (`nodePacking`);
    without `sampling` it keeps no GPU-use samples (a run nobody draws)."""
    if scenario.topology or scenario.settings.node_packing:
        labels = [scenario.node_topology(i) for i in range(scenario.nodes)]
        return BlockCluster(scenario.nodes, scenario.gpus_per_node, labels, sampling=sampling)
    return SimulatedCluster(scenario.nodes, scenario.gpus_per_node, sampling=sampling)


def latest_reports(batch: list[PodChange | Wakeup]) -> list[PodChange | Wakeup]:
    """`batch` with each pod's reports replaced by its last, at the place of its first,
    as the agent's outbox coalesces them: the core needs only a pod's latest state,
    and its `seq` says it is the latest. Wake-ups are kept as they are."""
    if len(batch) < 2:
        return batch  # one report: nothing to coalesce
    last: dict[str, PodChange] = {}
    reports = 0
    for item in batch:
        if not isinstance(item, Wakeup):
            last[item.uid] = item
            reports += 1
    if len(last) == reports:
        return batch  # no pod reported twice (the usual case)
    out: list[PodChange | Wakeup] = []
    for item in batch:
        if isinstance(item, Wakeup):
            out.append(item)
        else:
            latest = last.pop(item.uid, None)
            if latest is not None:
                out.append(latest)
    return out


def _ignore(effect: Effect) -> None:
    """An effect the simulator has nothing to do for."""


def simulate(
    scenario: Scenario,
    policy: str = "gang",
    *,
    progress: Callable[[float, float], None] | None = None,
    stop: Callable[[Simulation], bool] | None = None,
    stop_every: float | None = None,
    record: bool = True,
) -> RunResult:
    """Run `scenario` under `policy` ("gang", "gang+block", "gang+fit" or "none");
    `stop`, asked every `stop_every` simulated seconds, may end it early
    (`RunResult.stopped_at`).

    With `record` off the result has the summary and `tracking` but no event log
    and no GPU-use samples (nothing is made for them)."""
    return Simulation(
        scenario, policy, progress=progress, stop=stop, stop_every=stop_every, record=record
    ).run()
