"""The fault driver's model cluster: gangs that become Ready after a start-up time
and finish after a run time (or, when broken, never become Ready), and an agent
that re-sends every object's state every 10 minutes, as the real agent's resync does.
"""

from __future__ import annotations

import heapq
import itertools
import json
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from muster.core import (
    Admit,
    Evict,
    Kind,
)
from muster.harness.injectors import FaultPlan
from muster.harness.virtual_aws import VirtualQueues
from muster.schema import (
    AGENT_SOURCE,
    NODE_OBSERVED,
    POD_OBSERVED,
    WORKLOAD_OBSERVED,
    node_detail,
    pod_detail,
    workload_detail,
)

CLUSTER = "training"
RESYNC_EVERY = 600.0


@dataclass(frozen=True)
class GangSpec:
    key: str
    gang: int
    gpus: int
    submit_at: float
    startup: float
    run: float
    broken: bool


class ModelCluster:
    """The cluster: admitted gangs become Ready after their start-up time, then finish.

    It is also the `ClusterActions` port (admit, evict and record are idempotent),
    and its agent puts observations on the ingest queue (each may be lost, and the
    resync re-sends them).
    """

    def __init__(
        self,
        queues: VirtualQueues,
        plan: FaultPlan,
        nodes: dict[str, tuple[int, int]] | None = None,
    ) -> None:
        self.queues = queues
        self.plan = plan
        # With nodes (name -> (GPUs, GPUs held by others' pods)), a gang's pods are bound
        # first fit when all fit, and wait unbound (never Ready) otherwise.
        self.nodes = nodes or {}
        self.free = {n: gpus - foreign for n, (gpus, foreign) in self.nodes.items()}
        self.bound: dict[str, list[str]] = {}  # workload -> the node of each pod
        self.unbound: list[tuple[str, int]] = []  # admitted gangs waiting for room
        self.specs: dict[str, GangSpec] = {}
        self.admitted: dict[str, int] = {}  # workload -> attempt running on the cluster
        self.timeline: list[
            tuple[float, int, str, str, int]
        ] = []  # (at, seq, action, key, attempt)
        self.seq = itertools.count(1)
        self.objects: dict[str, str] = {}  # object -> its last observation (for resyncs)
        self.finished: set[str] = set()
        self.admit_calls: Counter[tuple[str, int]] = Counter()

    @property
    def now(self) -> float:
        return self.queues.clock.now

    def add(self, spec: GangSpec) -> None:
        self.specs[spec.key] = spec
        self._at(spec.submit_at, "submit", spec.key, 0)

    def _at(self, at: float, action: str, key: str, attempt: int) -> None:
        heapq.heappush(self.timeline, (at, next(self.seq), action, key, attempt))

    def next_at(self) -> float | None:
        return self.timeline[0][0] if self.timeline else None

    def run_due(self) -> None:
        while self.timeline and self.timeline[0][0] <= self.now:
            _, _, action, key, attempt = heapq.heappop(self.timeline)
            if action == "resync":
                for body in list(self.objects.values()):
                    self._send(body)
                if len(self.finished) < len(self.specs):
                    self._at(self.now + RESYNC_EVERY, "resync", "", 0)
                continue
            spec = self.specs[key]
            if action == "submit":
                self._observe_workload(spec, "Active")
            elif self.admitted.get(key) != attempt or key in self.finished:
                continue  # that attempt was evicted meanwhile
            elif action == "ready":
                for i in range(spec.gang):
                    self._observe_pod(spec, i, attempt, ready=True)
            elif action == "finish":
                self.finished.add(key)
                del self.admitted[key]
                self._observe_workload(spec, "Succeeded")
                if self.nodes:
                    self._release(key)

    def start_resync(self) -> None:
        self._at(self.now + RESYNC_EVERY, "resync", "", 0)
        for name, (gpus, foreign) in self.nodes.items():
            detail = node_detail(
                cluster=CLUSTER,
                node=name,
                seq=next(self.seq),
                gpus=gpus,
                foreign_gpus=foreign,
                observed_at=datetime.fromtimestamp(self.now, UTC),
            )
            body = self._envelope(NODE_OBSERVED, detail)
            self.objects[f"node:{name}"] = body
            self._send(body)

    def _bind(self, key: str, attempt: int) -> bool:
        """Bind all pods of the gang, first fit over the nodes in order, or none of them."""
        spec = self.specs[key]
        each = spec.gpus // spec.gang
        free = dict(self.free)
        where: list[str] = []
        for _ in range(spec.gang):
            node = next((n for n in free if free[n] >= each), None)
            if node is None:
                return False
            free[node] -= each
            where.append(node)
        self.free = free
        self.bound[key] = where
        self._at(self.now + spec.startup, "ready", spec.key, attempt)
        self._at(self.now + spec.startup + spec.run, "finish", spec.key, attempt)
        return True

    def _release(self, key: str) -> None:
        spec = self.specs[key]
        for node in self.bound.pop(key, []):
            self.free[node] += spec.gpus // spec.gang
        self.unbound = [
            (k, a)
            for k, a in self.unbound
            if k != key and not (k in self.bound or self._bind(k, a))
        ]

    def _send(self, body: str) -> None:
        if self.plan.roll("lose", "agent_event"):
            return
        self.queues.send("ingest", body)

    def _envelope(self, detail_type: str, detail: dict[str, Any]) -> str:
        return json.dumps({"source": AGENT_SOURCE, "detail-type": detail_type, "detail": detail})

    def _observe_workload(self, spec: GangSpec, status: str) -> None:
        detail = workload_detail(
            cluster=CLUSTER,
            workload=spec.key,
            kind=Kind.JOB,
            queue="default",
            gang_size=spec.gang,
            gpus=spec.gpus,
            seq=next(self.seq),
            created_at=datetime.fromtimestamp(spec.submit_at, UTC),
            status=status,
            observed_at=datetime.fromtimestamp(self.now, UTC),
        )
        body = self._envelope(WORKLOAD_OBSERVED, detail)
        self.objects[spec.key] = body
        self._send(body)

    def _observe_pod(
        self, spec: GangSpec, i: int, attempt: int, *, ready: bool, deleted: bool = False
    ) -> None:
        detail = pod_detail(
            cluster=CLUSTER,
            workload=spec.key,
            pod=f"{spec.key.split('/')[1]}-{i}",
            seq=next(self.seq),
            uid=f"uid-{i}-a{attempt}",
            phase="Running" if ready else "Pending",
            ready=ready,
            node=self.bound[spec.key][i] if spec.key in self.bound else f"node-{i % 16}",
            deleted=deleted,
            observed_at=datetime.fromtimestamp(self.now, UTC),
        )
        body = self._envelope(POD_OBSERVED, detail)
        self.objects[f"{spec.key}#{i}"] = body
        self._send(body)

    # ClusterActions
    def admit(self, effect: Admit) -> None:
        self.admit_calls[(effect.workload, effect.attempt)] += 1
        if self.admitted.get(effect.workload) == effect.attempt or effect.workload in self.finished:
            return
        spec = self.specs[effect.workload]
        self.admitted[effect.workload] = effect.attempt
        if self.nodes:
            if not spec.broken and not self._bind(spec.key, effect.attempt):
                self.unbound.append((spec.key, effect.attempt))
            return
        if not spec.broken:
            self._at(self.now + spec.startup, "ready", spec.key, effect.attempt)
            self._at(self.now + spec.startup + spec.run, "finish", spec.key, effect.attempt)

    def evict(self, effect: Evict) -> None:
        """Suspend: the job controller deletes the attempt's pods, and the agent says so."""
        if self.admitted.get(effect.workload) == effect.attempt:
            del self.admitted[effect.workload]
            spec = self.specs[effect.workload]
            for i in range(spec.gang):
                if self.objects.pop(f"{spec.key}#{i}", None) is not None:
                    self._observe_pod(spec, i, effect.attempt, ready=False, deleted=True)
                    self.objects.pop(f"{spec.key}#{i}", None)
            if self.nodes:
                self._release(spec.key)

    def record(self, workload: str, kind: Kind, view: Any) -> None:
        return None

    def gpus_held(self) -> int:
        return sum(self.specs[k].gpus for k in self.admitted)
