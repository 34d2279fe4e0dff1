"""A simulated EKS cluster in wall-clock time, for the local mode.

This is a stand-in: no Kubernetes API server runs here. It is the simulator's
`SimulatedCluster` (nodes with GPUs, job controllers, a scheduler, kubelets, node
faults) driven by the real clock instead of an event heap, behind the same
`ClusterActions` port the Lambdas use against EKS. What an agent would see (pods,
workloads, nodes) goes to the bus through the agent's own outbox and sender, as
events built by `muster.schema`.

The cluster keeps the scenario's clock: each of its steps (a submission, a pod
Ready, a run's end, a node fault) happens at its own time counted from the
scenario's start, however late the loop that carries it out comes round on a busy
machine, so the next step is not pushed back by the lateness of the one before.
Only what the control plane does (admission, eviction) happens when it is done.
"""

from __future__ import annotations

import heapq
import itertools
import math
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from muster.agent.sender import Entry, Outbox, Sender
from muster.core import Admit, Evict, Kind
from muster.runtime.ports import WorkloadGone
from muster.schema import (
    NODE_OBSERVED,
    POD_OBSERVED,
    WORKLOAD_OBSERVED,
    node_detail,
    pod_detail,
    workload_detail,
)
from muster.sim.kube import PodChange, SimulatedCluster, Wakeup
from muster.sim.scenario import Scenario

NAMESPACE = "default"


def workload_key(name: str) -> str:
    return f"{NAMESPACE}/{name}"


def job_name(key: str) -> str:
    return key.split("/", 1)[1] if "/" in key else key


class LocalCluster:
    """The scenario's cluster and workloads, played in real time (seconds since `start`)."""

    def __init__(
        self,
        scenario: Scenario,
        sender: Sender,
        *,
        cluster_name: str = "local",
        coalescing_window: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.scenario = scenario
        self.kube = SimulatedCluster(scenario.nodes, scenario.gpus_per_node)
        self.cluster_name = cluster_name
        self.views: dict[str, dict[str, str]] = {}
        self.finished: set[str] = set()
        self._sender = sender
        self._outbox = Outbox(window=coalescing_window)
        self._clock = clock
        self._lock = threading.RLock()
        self._send_lock = threading.Lock()
        self._heap: list[tuple[float, int, int, tuple[Any, ...]]] = []
        self._counter = itertools.count()
        self._seq = itertools.count(1)
        self._t0 = 0.0
        self._epoch0 = 0.0
        # The cluster's own time: the latest instant it has played. It never goes back,
        # so a step carried out late happens at its due time unless the control plane
        # acted on the cluster since (then at that moment, after it).
        self._moment = 0.0
        self._wake = threading.Event()  # something new was scheduled
        self._halted = threading.Event()
        self._specs = {w.name: w for w in scenario.workloads}
        self._order = {w.name: i for i, w in enumerate(scenario.workloads)}  # ties at one instant
        self._node_changes: list[tuple[float, str, bool]] = []  # (time, node, failed)
        # Node events carry capacity when the control plane runs the capacity check.
        self._capacity = scenario.settings.capacity_check

    # ------------------------------------------------------------------ time

    def start(self) -> None:
        """Start the clock: submissions and faults are due from now on."""
        self._t0 = self._clock()
        self._epoch0 = time.time()
        for i, w in enumerate(self.scenario.workloads):
            self._push(w.submit_at, i, ("submit", w.name))
        for i, f in enumerate(self.scenario.faults):
            self._push(f.at, i, ("fail", f.node))
            if math.isfinite(f.repair_after):
                self._push(f.at + f.repair_after, i, ("repair", f.node))
        if self._capacity:
            # What the agent reports of every node when it starts: its GPUs, all free.
            for node in self.kube.node_names:
                self._node_event(node, 0.0, ready=True)

    @property
    def started_at(self) -> float:
        """The wall-clock (epoch) time of the scenario's second 0."""
        return self._epoch0

    def now(self) -> float:
        return self._clock() - self._t0

    def step(self) -> None:
        """Carry out everything due by now, then send what the agent would send."""
        with self._lock:
            self._catch_up(self.now())
        self.flush()

    def keep_time(self, idle: float = 1.0, tick: float = 0.05) -> threading.Thread:
        """Step in a thread of its own, at each instant as it falls due and whenever
        something new is scheduled, so that no other work of the run delays the cluster
        (at least every `idle` seconds; every `tick` while events wait out the
        outbox's window). `halt` stops it."""

        def loop() -> None:
            while not self._halted.is_set():
                self.step()
                self._wake.wait(self._until_due(idle, tick))
                self._wake.clear()

        thread = threading.Thread(target=loop, name="local-cluster", daemon=True)
        thread.start()
        return thread

    def halt(self) -> None:
        self._halted.set()
        self._wake.set()

    def _until_due(self, idle: float, tick: float) -> float:
        with self._lock:
            wait = self._heap[0][0] - self.now() if self._heap else idle
            if self._outbox.pending:
                wait = min(wait, tick)
        return max(0.0, min(wait, idle))

    def _catch_up(self, now: float) -> None:
        """Play every instant due by `now`, each at its own time on the scenario's clock
        (what it schedules is due from then, not from now), as the simulator plays its
        instants: the instant's items, then the controllers and the scheduler."""
        heap = self._heap
        while heap and heap[0][0] <= now:
            at = max(heap[0][0], self._moment)
            self._moment = at
            while heap and heap[0][0] <= at:
                _, _, _, item = heapq.heappop(heap)
                self._handle(item, at)
            self._settle(at)
        self._moment = max(self._moment, now)

    def take_node_changes(self) -> list[tuple[float, str, bool]]:
        """The node failures and repairs since the last call: (time, node, failed)."""
        with self._lock:
            changes, self._node_changes = self._node_changes, []
        return changes

    def flush(self, everything: bool = False) -> None:
        with self._lock:
            due = self._outbox.due(self.now(), everything=everything)
        if due:
            with self._send_lock:
                self._sender.send(due)

    # ------------------------------------------------------------------ ClusterActions

    # What the control plane does happens now, on a cluster that has played everything
    # due by now first.

    def admit(self, effect: Admit) -> None:
        with self._lock:
            self._catch_up(self.now())
            name = self._known(effect.workload)
            self.kube.unsuspend(name)
            self._settle(self._moment)

    def evict(self, effect: Evict) -> None:
        with self._lock:
            self._catch_up(self.now())
            name = self._known(effect.workload)
            self.kube.suspend(name, self._moment)
            self._settle(self._moment)

    def record(self, workload: str, kind: Kind, view: Mapping[str, str]) -> None:
        with self._lock:
            self._known(workload)
            self.views[workload] = dict(view)

    def _known(self, key: str) -> str:
        name = job_name(key)
        if name not in self._specs or name in self.finished:
            raise WorkloadGone(key)
        return name

    # ------------------------------------------------------------------ the cluster's life

    def _push(self, at: float, tie: int, item: tuple[Any, ...]) -> None:
        heapq.heappush(self._heap, (at, tie, next(self._counter), item))
        self._wake.set()

    def _handle(self, item: tuple[Any, ...], now: float) -> None:
        what = item[0]
        if what == "submit":
            w = self._specs[item[1]]
            self.kube.add_job(w.job())
            self._workload_event(w.name, "Active", now)
        elif what == "ready":
            self.kube.pod_ready(item[1], item[2], now)
        elif what == "fault":
            self.kube.pod_fault(item[1], item[2], now)
        elif what == "complete":
            if self.kube.complete(item[1], item[2], now):
                self._drain(now)
                self.finished.add(item[1])
                self._workload_event(item[1], "Succeeded", now)
        elif what == "fail":
            self._node_event(item[1], now, ready=False)
            self.kube.fail_node(item[1], now)
            self._node_changes.append((now, item[1], True))
        elif what == "repair":
            self.kube.repair_node(item[1], now)
            self._node_event(item[1], now, ready=True)
            self._node_changes.append((now, item[1], False))

    def _settle(self, now: float) -> None:
        self.kube.reconcile()
        self._drain(now)
        self.kube.bind_pending(now)
        self._drain(now)

    def _drain(self, now: float) -> None:
        while self.kube.outbox:
            batch, self.kube.outbox[:] = list(self.kube.outbox), []
            for item in batch:
                if isinstance(item, Wakeup):
                    self._schedule(item)
                else:
                    self._pod_event(item, now)

    def _schedule(self, w: Wakeup) -> None:
        self._push(w.at, self._order[w.job], (w.what, w.job, w.ref))

    # ------------------------------------------------------------------ what the agent sends

    def _when(self, seconds: float) -> datetime:
        return datetime.fromtimestamp(self._epoch0 + seconds, UTC)

    def _pod_event(self, change: PodChange, now: float) -> None:
        detail = pod_detail(
            cluster=self.cluster_name,
            workload=workload_key(change.workload),
            pod=change.pod,
            seq=change.seq,
            uid=change.uid,
            phase=change.phase,
            ready=change.ready,
            node=change.node,
            deleted=change.deleted,
            observed_at=self._when(now),
            reason=change.reason,
            message=change.message,
            scheduled=True if change.node is not None else None,
            waiting=change.waiting,
            restarts=change.restarts,
            terminated=change.terminated,
            exit_code=change.exit_code,
        )
        self._outbox.put(Entry(f"pod:{change.pod}", POD_OBSERVED, detail), now)

    def _workload_event(self, name: str, status: str, now: float) -> None:
        w = self._specs[name]
        detail = workload_detail(
            cluster=self.cluster_name,
            workload=workload_key(name),
            kind=Kind.JOB,
            queue=w.queue,
            gang_size=w.pods,
            shape=((w.pods, w.gpus_per_pod),),
            gpus=w.gpus,
            priority=w.priority,
            seq=next(self._seq),
            created_at=self._when(w.submit_at),
            status=status,
            observed_at=self._when(now),
        )
        self._outbox.put(Entry(f"workload:{name}", WORKLOAD_OBSERVED, detail), now)

    def _node_event(self, node: str, now: float, *, ready: bool) -> None:
        detail = node_detail(
            cluster=self.cluster_name,
            node=node,
            seq=next(self._seq),
            ready=ready,
            gpus=self.kube.gpus_per_node if self._capacity else None,
            unschedulable=None if ready else "NotReady",
            observed_at=self._when(now),
        )
        self._outbox.put(Entry(f"node:{node}", NODE_OBSERVED, detail), now)
