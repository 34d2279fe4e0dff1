"""A workload driver for the fault wrappers: the control plane's functions, in virtual
time, on in-memory queues and a model cluster, with faults injected into every port.

What runs is the real thing: the functions' batch and record handlers (`ingest_batch`,
`timer_batch`, `admission_batch` with Powertools' `BatchProcessor`), the
`ControlPlane` and the sweeper, through the wrapped ports. What is modelled:
SQS (delays, a visibility timeout, a redrive to a DLQ after five receives), Step
Functions (a timer sends its signal at the deadline, or early), and a cluster
whose gangs become Ready after a start-up time and finish after a run time (or,
when broken, never become Ready). The model agent re-sends every object's state
every 10 minutes, as the real agent's resync does, so a lost agent event heals.

After every delivery it checks that quota holds (GPUs of the workloads the
store holds Admitted, Running or Recovering never exceed `gpuQuota`, nor do those
the model cluster runs, but for evictions committed and not yet carried out) and, with
`capacity`, that no two admitted gangs are on the same GPUs as far as the
control plane's capacity view knows (the cluster then has nodes, others' pods
on some of them, and binds a gang's pods first fit when they all fit); after every
sweep it checks that nothing waits forever: every workload that is not final has
something that will move it on (a message in flight, a sweeper rule that will
fire, the cluster running it, or quota held by workloads that themselves move).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Any

from muster.core import (
    ACTIVE_PHASES,
    Evict,
    Kind,
    Phase,
    Settings,
    Workload,
    admissible,
    parse_settings,
    plan_admission,
)
from muster.core.capacity import overcommitted
from muster.core.topology import Topology
from muster.harness.clock import VirtualClock
from muster.harness.injectors import Crash, FaultPlan, FaultyPorts, wrap_ports
from muster.harness.model_cluster import CLUSTER, GangSpec, ModelCluster
from muster.harness.virtual_aws import (
    Message,
    VirtualQueues,
    VirtualTimers,
    quiet,
    sqs_batch,
)
from muster.lambdas.ingest import ingest_batch
from muster.lambdas.records import (
    admission_batch,
    sqs_processor,
    timer_batch,
)
from muster.runtime.memory import MemoryBus, MemoryMetrics, MemoryStore
from muster.runtime.service import ControlPlane
from muster.runtime.sweeper import GRACE_SECONDS, SWEPT_PHASES, Sweeper

SWEEP_EVERY = 60.0
BATCH_SIZE = {"ingest": 100, "timer": 10, "admission": 10}  # as the event source mappings
FINAL = frozenset({Phase.FINISHED, Phase.DEACTIVATED})


@dataclass
class HarnessReport:
    """The figures of one run."""

    workloads: int = 0
    finished: int = 0
    deactivated: int = 0
    quarantined: int = 0
    unfinished: list[str] = field(default_factory=list)
    deliveries: int = 0
    redelivered: int = 0  # delivered again while the first delivery ran
    batches_failed: int = 0
    crashes_survived: int = 0
    dead_lettered: dict[str, int] = field(default_factory=dict)
    sweeps: int = 0
    sweeper_resent: int = 0
    checks: int = 0  # "nothing waits forever" checks (one per sweep)
    movers: dict[str, int] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    healthy_deactivated: list[str] = field(default_factory=list)  # gangs the faults kept from Ready
    quota: int = 0
    fit_checks: int = 0  # "no two gangs on the same GPUs" checks (with `capacity`)
    domain_checks: int = 0  # "no required gang across domains" checks (with `topology`)
    max_gpus_admitted: int = 0  # by the store (the quota invariant)
    max_gpus_on_cluster: int = 0  # on the model cluster (may lag an eviction in flight)
    injected: dict[str, int] = field(default_factory=dict)
    virtual_hours: float = 0.0

    def summary(self) -> dict[str, Any]:
        injected = {k: v for k, v in self.injected.items() if ":" not in k}
        return {
            "workloads": self.workloads,
            "finished": self.finished,
            "deactivated": self.deactivated,
            "quarantined": self.quarantined,
            "unfinished": len(self.unfinished),
            "deliveries": self.deliveries,
            "redeliveredWhileRunning": self.redelivered,
            "batchesFailed": self.batches_failed,
            "crashesSurvived": self.crashes_survived,
            "deadLettered": self.dead_lettered,
            "sweeps": self.sweeps,
            "sweeperResent": self.sweeper_resent,
            "nothingWaitsForeverChecks": self.checks,
            "violations": len(self.violations),
            "healthyGangsDeactivated": len(self.healthy_deactivated),
            "gpuQuota": self.quota,
            "maxGpusAdmitted": self.max_gpus_admitted,
            "maxGpusOnCluster": self.max_gpus_on_cluster,
            "faultsInjected": injected,
            "virtualHours": round(self.virtual_hours, 2),
        }


class Harness:
    """One cluster's control plane under faults; `run()` returns the figures."""

    def __init__(
        self,
        plan: FaultPlan,
        *,
        workloads: int = 40,
        seed: int = 1,
        settings: dict[str, Any] | None = None,
        broken_fraction: float = 0.1,
        horizon_hours: float = 12.0,
        sweeper: bool = True,
        capacity: bool = False,
        pod_groups: float = 0.0,
        topology: bool = False,
    ) -> None:
        self.sweeper_on = sweeper
        self.plan = plan
        self.clock = VirtualClock(1_800_000_000.0)
        self.queues = VirtualQueues(self.clock)
        self.store = MemoryStore()
        self.rng = random.Random(seed)
        nodes: dict[str, tuple[int, int]] = {}
        if capacity:
            # 16 nodes of 8 GPUs (twice the quota), others' pods on a quarter of them.
            nodes = {
                f"node-{i}": (8, self.rng.choice((0, 0, 0, 2, 4)) if i % 4 == 0 else 0)
                for i in range(16)
            }
        self.cluster = ModelCluster(self.queues, plan, nodes, block_labels(nodes, topology))
        self.doc = settings or {
            "timeout": "5m",
            "gpuQuota": 64,
            "requeuingStrategy": {
                "backoffLimitCount": 3,
                "backoffBaseSeconds": 60,
                "backoffMaxSeconds": 600,
            },
        }
        if capacity:
            self.doc = {**self.doc, "capacityCheck": True}
        if topology:
            self.doc = {**self.doc, "topologyLevels": [TOPOLOGY_LEVEL]}
        self.settings: Settings = parse_settings(self.doc)
        self.ports: FaultyPorts = wrap_ports(
            plan,
            store=self.store,
            timers=VirtualTimers(self.queues, plan),
            messages=self.queues,
            bus=MemoryBus(),
            cluster=self.cluster,
            during_write=self._during_write,
        )
        self.metrics = MemoryMetrics()
        self.horizon = self.clock.now + horizon_hours * 3600
        self.report = HarnessReport(workloads=workloads, quota=self.settings.gpu_quota or 0)
        self._current: tuple[str, Message] | None = None
        self._depth = 0
        start = self.clock.now
        for i in range(workloads):
            gang = self.rng.choice((1, 1, 2, 2, 4, 4, 8))
            group = pod_groups > 0 and self.rng.random() < pod_groups
            self.cluster.add(
                GangSpec(
                    # A pod group (`pod_groups` of them) runs twice under its name.
                    key=f"team-{i % 4}/grp-{i:03d}@podgroup"
                    if group
                    else f"team-{i % 4}/job-{i:03d}",
                    gang=gang,
                    gpus=gang * 4,
                    submit_at=start + self.rng.uniform(0, 1800),
                    startup=self.rng.uniform(20, 240),
                    run=self.rng.uniform(300, 1800),
                    broken=self.rng.random() < broken_fraction,
                    kind=Kind.POD_GROUP if group else Kind.JOB,
                    runs=2 if group else 1,
                )
            )
        if topology:
            self._ask_topology()
        self.cluster.start_resync()

    def _ask_topology(self) -> None:
        """Every other gang of 2 or 4 pods asks to be admitted inside one block."""
        for i, (key, spec) in enumerate(self.cluster.specs.items()):
            if spec.gang in (2, 4) and i % 2 == 0:
                self.cluster.specs[key] = replace(spec, topology=f"required={TOPOLOGY_LEVEL}")

    def plane(self, function: str) -> ControlPlane:
        p = self.ports
        return ControlPlane(
            store=p.store,
            timers=p.timers,
            messages=p.messages,
            bus=p.bus,
            metrics=self.metrics,
            cluster=p.cluster,
            settings=lambda: self.settings,
            clock=self.clock,
            draw=self.rng.random,
            sleep=lambda seconds: None,
            inline_admission=function == "admission",
            slices=p.messages,
        )

    # ------------------------------------------------------------------ delivery

    def _deliver(self, queue: str, batch: list[Message]) -> None:
        plane = self.plane(queue)
        event = sqs_batch(batch)
        processor = sqs_processor()
        failed: set[str] = set()
        self.report.deliveries += len(batch)
        self._current = (queue, batch[0])
        try:
            if queue == "ingest":
                response = ingest_batch(plane, CLUSTER, event, None, processor)
            elif queue == "timer":
                response = timer_batch(plane, event, None, processor, sleep=lambda s: None)
            else:
                response = admission_batch(plane, event, None, processor)
            failed = {str(f["itemIdentifier"]) for f in response["batchItemFailures"]}
        except Crash:
            self.report.crashes_survived += 1
            failed = {f"m{m.seq}" for m in batch}
        except Exception:
            failed = {f"m{m.seq}" for m in batch}  # the whole invocation failed
        finally:
            self._current = None
        if failed:
            self.report.batches_failed += 1
        for m in batch:
            if f"m{m.seq}" in failed:
                self.queues.fail(m)
        self._check_quota()

    def _during_write(self) -> None:
        """A second instance receives the message the first one is still working on."""
        if self._current is None or self._depth > 0 or not self.plan.roll("redeliver", "sqs"):
            return
        queue, m = self._current
        self._depth += 1
        saved = self._current
        try:
            self.report.redelivered += 1
            self._deliver(queue, [Message(m.visible_at, m.seq, queue, m.body, m.receives)])
        finally:
            self._current = saved
            self._depth -= 1

    # ------------------------------------------------------------------ invariants

    def _check_quota(self) -> None:
        held = sum(
            i.workload.gpus for i in self.store.items.values() if i.workload.phase in ACTIVE_PHASES
        )
        self.report.max_gpus_admitted = max(self.report.max_gpus_admitted, held)
        self.report.max_gpus_on_cluster = max(
            self.report.max_gpus_on_cluster, self.cluster.gpus_held()
        )
        quota = self.settings.gpu_quota
        if quota is not None and held > quota:
            self.report.violations.append(f"quota: {held} GPUs held under a quota of {quota}")
        released = self.cluster.gpus_held() - self._evicting()
        if quota is not None and released > quota:
            self.report.violations.append(
                f"quota on the cluster: {released} GPUs released under a quota of {quota}"
            )
        if self.cluster.nodes:
            self._check_fit()
        if self.cluster.labels:
            self._check_domains()

    def _evicting(self) -> int:
        """GPUs the cluster still runs for evictions committed and not yet carried out (a
        crash between the commit and its effects: the next touch or the sweeper finishes it)."""
        lagging = 0
        for key, attempt in self.cluster.admitted.items():
            item = self.store.items.get(key)
            if item is not None and any(
                isinstance(e, Evict) and e.attempt == attempt for e in item.outbox
            ):
                lagging += self.cluster.specs[key].gpus
        return lagging

    def _check_fit(self) -> None:
        """No two admitted gangs on the same GPUs, as far as the capacity view knows."""
        nodes = self.store.nodes()
        if len(nodes) < len(self.cluster.nodes):
            return  # a node's report is still on its way: the view is not whole yet
        self.report.fit_checks += 1
        active = []
        for key, item in self.store.items.items():
            if item.workload.phase in ACTIVE_PHASES:
                snap = self.store.load(key)
                active.append(snap.workload if snap else item.workload)
        for what in overcommitted(nodes, active):
            self.report.violations.append(f"same GPUs: {what} at {self.clock.now:.0f}")

    def _check_domains(self) -> None:
        """No gang asking for a required topology has its pods bound across domains."""
        self.report.domain_checks += 1
        for what in self.cluster.across_domains():
            self.report.violations.append(f"across domains: {what} at {self.clock.now:.0f}")

    def _mover(self, w: Workload, outbox: bool, quarantined: set[str], named: set[str]) -> str:
        """What will move `w` on, or '' when nothing will."""
        sweeps = self.sweeper_on
        if w.key in quarantined:
            return "quarantined (alarm, release)"
        if w.phase is Phase.FINISHED:
            return "final (leftover lifecycle event or timer stop)"
        if outbox:
            if w.key in named:
                return "message in flight"
            return "sweeper (unfinished effects)" if sweeps and w.phase in SWEPT_PHASES else ""
        if w.key in named:
            return "message in flight"
        if w.phase in (Phase.ADMITTED, Phase.RECOVERING):
            return "sweeper (deadline)" if sweeps and w.timer is not None else ""
        if w.phase is Phase.REQUEUED:
            return "sweeper (requeue time)" if sweeps and w.requeue_at is not None else ""
        if w.phase is Phase.RUNNING:
            return self._running_mover(w)
        if w.phase is Phase.PENDING:
            return self._pending_mover(w)
        return ""

    def _running_mover(self, w: Workload) -> str:
        """A Running gang moves on when it finishes, whether or not that was seen."""
        if self.cluster.admitted.get(w.key) == w.attempt:
            return "cluster (running)"
        # Finished on the cluster, its event lost: the agent's resync tells.
        return "agent resync (finished)" if w.key in self.cluster.finished else ""

    def _pending_mover(self, w: Workload) -> str:
        """A Pending workload moves on once admissible, or once others release quota (a
        pod group without all its pods, once its controller has created them)."""
        now = self.clock.now
        if w.kind is Kind.POD_GROUP:
            snap = self.store.load(w.key)
            w = snap.workload if snap is not None else w
            if w.live_pods < w.gang_size:
                return "cluster (a pod group's controller creates its pods)"
        active = [
            i.workload for i in self.store.items.values() if i.workload.phase in ACTIVE_PHASES
        ]
        plan = plan_admission([w], active, self.settings, now)
        if admissible(w, now) and plan.admit:
            return "sweeper (admissible)" if self.sweeper_on else ""
        return "quota held by others" if active else ""

    def _check_nothing_waits_forever(self) -> None:
        quarantined = {k for k, _ in self.store.quarantined()}
        named: set[str] = set()
        for _, body in self.queues.in_flight():
            if body.get("workload"):
                named.add(body["workload"])
            detail = body.get("detail") or {}
            if isinstance(detail, dict) and detail.get("workload"):
                named.add(detail["workload"])
        self.report.checks += 1
        for key, item in self.store.items.items():
            w = item.workload
            if w.phase is Phase.DEACTIVATED and not item.outbox:
                continue
            mover = self._mover(w, bool(item.outbox), quarantined, named)
            if not mover:
                self.report.violations.append(
                    f"waits forever: {key} {w.phase.value} at {self.clock.now - 1_800_000_000:.0f}s"
                )
            else:
                self.report.movers[mover] = self.report.movers.get(mover, 0) + 1

    # ------------------------------------------------------------------ the run

    def _sweep(self) -> None:
        sweeper = Sweeper(
            self.ports.store,
            self.ports.messages,
            lambda: self.settings,
            self.metrics,
            grace=GRACE_SECONDS,
        )
        self.report.sweeps += 1
        try:
            if self.sweeper_on:
                self.report.sweeper_resent += sweeper.run(self.clock.now).sent
        except (Crash, Exception):
            return  # the next sweep runs a minute later
        self._check_nothing_waits_forever()

    def _settled(self) -> bool:
        if self.queues.heap:
            return False
        submitted = len(self.store.items) == len(self.cluster.specs)
        return (
            submitted
            and not self.cluster.pending_runs()
            and all(i.workload.phase in FINAL and not i.outbox for i in self.store.items.values())
        )

    def run(self) -> HarnessReport:
        with quiet():
            next_sweep = self.clock.now + SWEEP_EVERY
            while self.clock.now < self.horizon and not self._settled():
                times = [next_sweep]
                if self.queues.heap:
                    times.append(self.queues.heap[0].visible_at)
                cluster_next = self.cluster.next_at()
                if cluster_next is not None:
                    times.append(cluster_next)
                self.clock.now = max(self.clock.now, min(times))
                self.cluster.run_due()
                for queue in ("ingest", "timer", "admission"):
                    batch = self.queues.due(queue, BATCH_SIZE[queue])
                    if batch:
                        self._deliver(queue, batch)
                if self.clock.now >= next_sweep:
                    self._sweep()
                    next_sweep = self.clock.now + SWEEP_EVERY
            self.plan.enabled = False  # a last, fault-free sweep, then look
            self._sweep()
        return self._finish()

    def _finish(self) -> HarnessReport:
        r = self.report
        for key, item in self.store.items.items():
            phase = item.workload.phase
            if item.quarantine is not None:
                r.quarantined += 1
            elif phase is Phase.FINISHED:
                r.finished += 1
            elif phase is Phase.DEACTIVATED:
                r.deactivated += 1
            else:
                r.unfinished.append(f"{key} {phase.value}")
        r.unfinished += [k for k in self.cluster.specs if k not in self.store.items]
        r.dead_lettered = dict(self.queues.dlq)
        r.injected = dict(self.plan.injected)
        r.virtual_hours = (self.clock.now - 1_800_000_000.0) / 3600
        for key, spec in self.cluster.specs.items():
            stored = self.store.items.get(key)
            if stored is None or stored.quarantine is not None:
                continue
            phase = stored.workload.phase
            if spec.broken and phase is not Phase.DEACTIVATED:
                r.violations.append(f"{key}: broken, but {phase.value}")
            elif phase is Phase.FINISHED and self.cluster.runs_done[key] < spec.runs:
                done = self.cluster.runs_done[key]
                r.violations.append(f"{key}: Finished after {done} of its {spec.runs} runs")
            elif not spec.broken and phase is Phase.DEACTIVATED:
                # Lost pod events and redelivery delays can keep a gang from being seen
                # Ready within its timeout, attempt after attempt: a figure, not a fault.
                r.healthy_deactivated.append(key)
        return r


TOPOLOGY_LEVEL = "network-node-layer-3"


def block_labels(nodes: dict[str, tuple[int, int]], topology: bool) -> dict[str, Topology]:
    """With `topology`, the nodes in blocks of 4 at network-node-layer-3 (two blocks a
    layer-2 block); none otherwise."""
    if not topology:
        return {}
    return {
        name: (("network-node-layer-2", f"nn2-{i // 8}"), (TOPOLOGY_LEVEL, f"nn3-{i // 4}"))
        for i, name in enumerate(nodes)
    }


def run_harness(plan: FaultPlan, **kwargs: Any) -> HarnessReport:
    return Harness(plan, **kwargs).run()
