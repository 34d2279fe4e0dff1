"""The system under test: the real `ControlPlane` against the simulator's cluster model.

`Truth` (in `muster.harness.cluster_truth`) is the simulator's `SimulatedCluster`
(nodes, job controllers, scheduler, kubelets) plus what it does not model: Job
objects with uids (deleted, re-created under the same name, their pods
terminating a while later), plain pod groups, and node conditions that flap
without losing pods. It is also the control plane's `ClusterActions`: admitting
unsuspends the current object under a key (ungates a group's pods), evicting
suspends it (deletes them). Every change it makes is an agent event stamped with
one cluster-wide revision (as resourceVersion is), and a relist re-sends every
object with the revision of its last change, followed by a `Cluster Snapshot` of
Jobs and of pods.

`HistoryRun` plays a history: the loop of what is due (actions, deliveries,
timers, requeues, admission requests, the sweeper every minute), messages
delivered again when their handling fails, administrators' settings changes, PutEvents entries throttled in
a window, and admission passes interleaved with other events in a window; the
quota is watched at every admission and release (`invariants.QuotaWatch`), and
the view compared with the truth at the end (`invariants.check_final`).

`build_plane` is the one place a `ControlPlane` is made, from ports passed in, so
that fault-injecting wrappers around the ports can be handed in instead.
"""

from __future__ import annotations

import heapq
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from muster.core import (
    DeadlineReached,
    Event,
    NodeObserved,
    PodObserved,
    RequeueDue,
    Settings,
    SnapshotPart,
    Timer,
    parse_settings,
)
from muster.core.keys import parse_workload_key
from muster.harness.clock import VirtualClock
from muster.harness.cluster_truth import Truth
from muster.harness.histories import TEAM, Action, History, generate
from muster.harness.injectors import FaultPlan, FaultyBus
from muster.harness.invariants import QuotaWatch, SettingsLog, check_final
from muster.harness.perturb import NONE, Perturbation, Perturber
from muster.harness.virtual_aws import quiet
from muster.harness.wire import over_the_wire
from muster.runtime.memory import MemoryBus, MemoryMetrics, MemoryStore
from muster.runtime.messages import retry_delay
from muster.runtime.ports import Bus, ClusterActions, Messages, Metrics, Timers, WorkloadStore
from muster.runtime.results import EffectFailed, TooManyConflicts, WorkloadNotYetKnown
from muster.runtime.service import ControlPlane
from muster.runtime.sweeper import Sweeper

SETTLE = 300.0  # after the horizon: no faults, everything delivered at once
SWEEP_EVERY = 60.0  # the sweeper's schedule


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

    def deadline_later(self, workload: str, timer: Timer, delay: float) -> None:
        """A deadline's signal through the timer queue (the sweeper's, or a rearm's)."""
        event = DeadlineReached(
            workload, timer.attempt, timer.kind, timer.episode, timer.incarnation
        )
        self.loop.at(self.loop.now + delay, "signal", event)


# --------------------------------------------------------------------------- one run

MAX_RECEIVES = 5  # an agent event that failed this often is dead-lettered (a relist heals)
VISIBILITY = 20.0  # a message whose handling failed is delivered again this much later
INTERLEAVED_READS = 4  # events handled in the middle of one interleaved pass, at most
INTERLEAVE_AHEAD = 10.0  # ... each due within this many seconds


@dataclass
class Outcome:
    seed: int
    events: int = 0  # agent events delivered to the control plane
    divergences: list[str] = field(default_factory=list)
    faults: dict[str, int] = field(default_factory=dict)
    triggers: dict[str, int] = field(default_factory=dict)  # what the history's triggers did

    @property
    def diverged(self) -> bool:
        return bool(self.divergences)


@dataclass(frozen=True, slots=True)
class Redelivery:
    """A message delivered again after its handling failed (SQS's visibility timeout)."""

    event: Any
    receives: int


class Interleaving:
    """The store an interleaved admission pass reads: before each of its reads of the
    queue, the indexes or the ledger, other events may be handled (another function's
    invocation), so that phases change between the pass's reads."""

    READS = frozenset({"by_phase", "pending", "get_workloads", "ledger"})

    def __init__(self, inner: WorkloadStore, between: Callable[[], None]) -> None:
        self.inner = inner
        self.between = between

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name not in self.READS:
            return attr

        def read(*args: Any, **kwargs: Any) -> Any:
            self.between()
            return attr(*args, **kwargs)

        return read


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
    with quiet():
        return HistoryRun(
            seed,
            history or generate(seed),
            perturbation=perturbation,
            store=store,
            wrap_ports=wrap_ports,
            wire=wire,
            capacity=capacity,
            workload_faults=workload_faults,
        ).run()


class HistoryRun:
    """One history: the loop of what is due, the truth, the control plane, the checks.

    A message whose handling fails (an effect that failed, a pod event before its
    workload's) is delivered again after `VISIBILITY`, as SQS does; an agent event
    at most `MAX_RECEIVES` times. A pass that set workloads aside is followed by
    another after the admission function's backoff.
    """

    def __init__(
        self,
        seed: int,
        history: History,
        *,
        perturbation: Perturbation | None,
        store: MemoryStore | None,
        wrap_ports: Callable[[dict[str, Any]], dict[str, Any]] | None,
        wire: bool,
        capacity: bool,
        workload_faults: dict[str, Any] | None,
    ) -> None:
        self.history = history
        self.loop = loop = VirtualClock()
        self.wire = wire
        self.perturber = Perturber(random.Random(seed * 7919 + 1), perturbation or Perturbation())
        self.perturber.gaps = [(a.at, a.until) for a in history.actions if a.what == "gap"]
        self.draws = random.Random(seed * 6_700_417 + 3)  # the triggers' own draws
        self.outcome = Outcome(seed)
        self.settling = False
        self.truth = Truth(
            history,
            loop,
            self.send,
            capacity,
            crash_loops=workload_faults is not None,
            deliver=self.deliver,
        )
        self.store = store or MemoryStore()
        self.timers = LoopTimers(loop)
        self.messages = LoopMessages(loop)
        self.base = _history_settings(seed, history, capacity, workload_faults)
        self.settings_log: SettingsLog = [(0.0, self.base)]
        self.watch = QuotaWatch(self.store, self.truth, self.settings_log, loop)
        self.truth.watch = self.watch
        self.publishing = FaultPlan(seed=seed)  # PutEvents entries throttled in a window
        ports: dict[str, Any] = {
            "store": self.store,
            "timers": self.timers,
            "messages": self.messages,
            "bus": FaultyBus(MemoryBus(), self.publishing),
            "metrics": MemoryMetrics(),
            "cluster": self.truth,
        }
        if wrap_ports is not None:
            ports = wrap_ports(ports)
        plane = partial(build_plane, settings=lambda: self.settings_log[-1][1], clock=loop)
        self.plane = plane(**ports)
        # The pass of an invocation that runs while others handle events (interleaved).
        self.pass_plane = plane(**{**ports, "store": Interleaving(ports["store"], self._between)})
        # The sweeper, on its schedule: what a lost or dead-lettered message would have
        # moved (a finished workload's pass request, say), it sends again.
        self.sweeper = Sweeper(
            ports["store"], self.messages, lambda: self.settings_log[-1][1], ports["metrics"]
        )
        self.requested = False  # a message asked for an admission pass
        self.hints: set[str] = set()
        self.retry = 0  # passes in a row that set workloads aside
        self.interleaving: list[tuple[float, float]] = [
            (a.at, a.until) for a in history.actions if a.what == "interleave"
        ]
        self.reads_left = 0  # events the interleaved pass running now may still let in
        self.interleaved = 0  # passes some events were handled in the middle of
        self.interleaved_events = 0
        self.triggers: Counter[str] = Counter()

    # ------------------------------------------------------------------ the way in

    def send(self, event: Event | SnapshotPart) -> list[float]:
        times = [self.loop.now] if self.settling else self.perturber.deliveries(self.loop.now)
        for when in times:
            self.loop.at(when, "deliver", over_the_wire(event) if self.wire else event)
        return times

    def deliver(self, when: float, event: Event) -> None:
        self.loop.at(when, "deliver", over_the_wire(event) if self.wire else event)

    # ------------------------------------------------------------------ the loop

    def run(self) -> Outcome:
        loop, truth = self.loop, self.truth
        if truth.capacity:
            for event in truth.nodes.values():
                self.send(event)  # what the agent reports of every node when it starts
        for action in self.history.actions:
            loop.at(action.at, "action", action)
        loop.at(self.history.horizon, "horizon", None)
        self.end = self.history.horizon + SETTLE
        loop.at(SWEEP_EVERY, "sweep", None)
        while loop.queue and loop.queue[0][0] <= self.end:
            when, _, kind, payload = heapq.heappop(loop.queue)
            loop.now = max(loop.now, when)
            if kind == "horizon":
                self.settling = True
                self.perturber.settings = NONE
                self.publishing.throttle_entry = 0.0
                truth.refusing.clear()  # no new refusals (those under way stay refused)
                truth.relist()
            else:
                self._play(kind, payload)
            self._admit()
        outcome = self.outcome
        outcome.faults = {**self.perturber.stats, **outcome.faults}
        outcome.divergences.extend(self.watch.problems)
        outcome.divergences.extend(
            check_final(
                self.store, truth, self.timers.running, self.messages.pending, self.base, loop.now
            )
        )
        outcome.triggers = self._triggers()
        return outcome

    def _triggers(self) -> dict[str, int]:
        drawn = self.triggers + self.truth.triggers
        drawn["throttledEntries"] = self.publishing.injected["throttle_entry"]
        drawn["interleavedPasses"] = self.interleaved
        keys = set(self.truth.objects) | set(self.truth.groups)
        names = Counter(parse_workload_key(k)[:2] for k in keys)
        drawn["sharedNames"] = sum(1 for k in keys if names[parse_workload_key(k)[:2]] > 1)
        return {k: v for k, v in drawn.items() if v}

    def _play(self, kind: str, payload: Any) -> None:
        """One item of the loop that is due: the cluster acts, or the control plane handles
        a delivered event, a timer that was not stopped, or a requeue."""
        if kind == "action":
            self._act(payload)
        elif kind == "wake":
            self.truth.wake(payload)
        elif kind == "cluster":
            payload()
        elif kind == "deliver":
            self.outcome.events += 1
            event, receives = (
                (payload.event, payload.receives)
                if isinstance(payload, Redelivery)
                else (payload, 0)
            )
            if not self._handle(event) and receives + 1 < MAX_RECEIVES:
                self._again("deliver", Redelivery(event, receives + 1))
        elif kind == "timer":
            name, event = payload
            if name in self.timers.running:
                self.timers.running.discard(name)
                if not self._handle(event):
                    self._again("signal", event)  # the execution's signal is in the queue
        elif kind == "signal":
            if not self._handle(payload):
                self._again("signal", payload)
        elif kind == "requeue":
            due = (payload.workload, payload.count)
            self.messages.pending.discard(due)
            if not self._handle(payload):
                self.messages.pending.add(due)
                self._again("requeue", payload)
        elif kind == "admission":
            self.requested = True
            if payload:
                self.hints.add(payload)
        elif kind == "sweep":
            self.sweeper.run(self.loop.now)
            self.loop.at(self.loop.now + SWEEP_EVERY, "sweep", None)

    def _again(self, kind: str, payload: Any) -> None:
        self.outcome.faults["handled again"] = self.outcome.faults.get("handled again", 0) + 1
        self.loop.at(self.loop.now + VISIBILITY, kind, payload)

    def _handle(self, event: Any) -> bool:
        """The event handled; False when its message is to be delivered again."""
        try:
            self.plane.handle(event)
        except (EffectFailed, TooManyConflicts, WorkloadNotYetKnown):
            return False
        finally:
            self.watch.observe(event)
        return True

    def _act(self, a: Action) -> None:
        truth = self.truth
        match a.what:
            case "create":
                truth.create(a)
            case "delete":
                truth.delete(a.job, a.linger, a.orphan)
            case "grow":
                truth.grow(a)
            case "forge":
                truth.forge(a)
            case "fail":
                truth.fail(a.node)
            case "repair":
                truth.repair(a.node, a.late)
            case "flap":
                truth.flap(a.node, down=True)
            case "unflap":
                truth.flap(a.node, down=False, late=a.late)
            case "resync":
                truth.relist()
            case "gap":
                # The perturber drops what is sent in the gap; then the new agent lists.
                self.loop.at(a.until, "action", Action(a.until, "resync"))
            case "rerun":
                truth.pod_groups.rerun(a.job, keep_old=a.pods > 0)
            case "replace":
                truth.pod_groups.replace_members(a.job, a.pods, a.delay)
            case "spares":
                truth.pod_groups.add_spares(a.job, a.pods)
            case "refuse":
                truth.refuse(a.job)
            case "throttle":
                self.publishing.throttle_entry = a.value / 100
                self.loop.at(a.until, "action", Action(a.until, "throttled"))
            case "throttled":
                self.publishing.throttle_entry = 0.0
            case "settings":
                self._settings(a)
            case "interleave":
                pass  # passes from `at` to `until` are interleaved

    def _settings(self, a: Action) -> None:
        """An administrator's change: in force at once, then the "settings changed" request
        (the owed deadlines acted on, and a pass)."""
        if a.job:
            self.triggers[f"settings:{a.job}"] += 1
        self.settings_log.append((self.loop.now, toggled(self.base, a.job, a.value)))
        self.plane.settle_deadlines()
        self.requested = True

    # ------------------------------------------------------------------ admission

    def _admit(self) -> None:
        plane = self.plane
        for _ in range(20):
            wanted, hints = plane.take_admission_request()
            if not (wanted or self.requested):
                break
            hints |= self.hints
            self.requested = False
            self.hints = set()
            now = self.loop.now
            interleaved = any(start <= now < until for start, until in self.interleaving)
            runner = self.pass_plane if interleaved else plane
            self.reads_left = INTERLEAVED_READS if interleaved else 0
            played = self.interleaved_events
            try:
                runner.admission_pass(hints)
                failed = bool(runner.failed)
            except TooManyConflicts:
                failed = True
            self.reads_left = 0
            if interleaved:
                more, named = runner.take_admission_request()
                self.requested = self.requested or more
                self.hints |= named
                self.interleaved += self.interleaved_events > played
            if failed:
                self.retry += 1
                self.messages.request_admission("retry", None, delay=retry_delay(self.retry))
            else:
                self.retry = 0
        self.watch.check()

    def _between(self) -> None:
        """Between two reads of an interleaved pass: maybe handle an event due soon, one
        that takes a gang's readiness away first (it may move a holder from one phase
        index to another while the pass reads them one at a time)."""
        if self.reads_left <= 0 or self.draws.random() < 0.3:
            return
        limit = min(self.loop.now + INTERLEAVE_AHEAD, self.end)
        due = [item for item in self.loop.queue if item[0] <= limit and item[2] in BETWEEN]
        if not due:
            return
        item = min(due, key=lambda i: (_moves_a_holder(i[2], i[3]), i[0], i[1]))
        self.loop.queue.remove(item)
        heapq.heapify(self.loop.queue)
        self.reads_left -= 1
        self.interleaved_events += 1
        when, _, kind, payload = item
        self.loop.now = max(self.loop.now, when)
        self._play(kind, payload)


BETWEEN = ("deliver", "timer", "signal", "requeue", "wake")  # what may run inside a pass


def _moves_a_holder(kind: str, payload: Any) -> int:
    """0 for an event that takes readiness away (a pod lost, a node NotReady), 1 for a
    deadline, 2 for anything else."""
    event = payload.event if isinstance(payload, Redelivery) else payload
    if isinstance(event, PodObserved) and (event.deleted or not event.ready):
        return 0
    if isinstance(event, NodeObserved) and not event.ready:
        return 0
    return 1 if kind in ("timer", "signal") else 2


def _history_settings(
    seed: int, history: History, capacity: bool, workload_faults: dict[str, Any] | None
) -> Settings:
    """The control plane's settings for one history: a whole cluster's quota (and its
    queues' own)."""
    queues = {name: {"gpuQuota": quota} for name, quota in history.queue_quotas}
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
        | ({"queues": queues} if queues else {})
    )


def toggled(base: Settings, change: str, value: int = 0) -> Settings:
    """`base` with one settings change of a history (`histories.ALL_TOGGLES`)."""
    if change == "dryRun":
        return replace(base, defaults=replace(base.defaults, dry_run=True))
    if change == "recoveryOff":
        return replace(base, defaults=replace(base.defaults, recovery_timeout=0.0))
    if change == "blockAdmission":
        return replace(base, block_admission=not base.block_admission)
    if change == "quotaLowered":
        return replace(base, gpu_quota=value)
    if change == "queueQuotaLowered":
        queues = dict(base.queues)
        queues[TEAM] = replace(base.for_queue(TEAM), gpu_quota=value)
        return replace(base, queues=queues)
    return base
