"""The fault driver's model cluster: gangs that become Ready after a start-up time
and finish after a run time (or, when broken, never become Ready), and an agent
that re-sends every object's state every 10 minutes, as the real agent's resync does.

A gang may be a plain pod group (`kind`): its pods exist gated before it is
released, its controller creates gated replacements a few seconds after an
eviction deleted them, and once a run has succeeded it runs again under its name
(`runs` in all), with new pods.
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
from muster.core.topology import Topology, common_domain, domain_at, domain_level, request_of
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


RESPAWN_AFTER = 5.0  # a pod group's controller replaces deleted pods this much later
RERUN_AFTER = 30.0  # a pod group runs again this much after its last run succeeded


@dataclass(frozen=True)
class GangSpec:
    key: str
    gang: int
    gpus: int
    submit_at: float
    startup: float
    run: float
    broken: bool
    kind: Kind = Kind.JOB
    runs: int = 1  # a pod group's runs under its name, one after the other
    topology: str = ""  # its `muster.io/topology` ("" for none)


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
        labels: dict[str, Topology] | None = None,
    ) -> None:
        self.queues = queues
        self.plan = plan
        # With nodes (name -> (GPUs, GPUs held by others' pods)), a gang's pods are bound
        # first fit when all fit, and wait unbound (never Ready) otherwise.
        self.nodes = nodes or {}
        self.free = {n: gpus - foreign for n, (gpus, foreign) in self.nodes.items()}
        self.bound: dict[str, list[str]] = {}  # workload -> the node of each pod
        self.unbound: list[tuple[str, int]] = []  # admitted gangs waiting for room
        # With topology labels on the nodes, a gang admitted into a domain has its pods
        # bound only on the nodes of that domain (the node selector Muster sets).
        self.labels = labels or {}
        self.domains: dict[str, str] = {}  # workload -> the domain it was released into
        self.specs: dict[str, GangSpec] = {}
        self.admitted: dict[str, int] = {}  # workload -> attempt running on the cluster
        self.timeline: list[
            tuple[float, int, str, str, int]
        ] = []  # (at, seq, action, key, attempt)
        self.seq = itertools.count(1)
        self.objects: dict[str, str] = {}  # object -> its last observation (for resyncs)
        self.finished: set[str] = set()
        self.admit_calls: Counter[tuple[str, int]] = Counter()
        self.runs_done: Counter[str] = Counter()  # runs that succeeded (a pod group's: 2)
        self.generation: Counter[str] = Counter()  # a pod group's pods, re-created

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
                self._resync()
                continue
            spec = self.specs[key]
            if action == "submit":
                self._observe_workload(spec, "Active")
                if spec.kind is Kind.POD_GROUP:
                    self._gated_pods(spec)
            elif action == "respawn":
                if key not in self.admitted and key not in self.finished:
                    self._gated_pods(spec)
            elif action == "rerun":
                self.finished.discard(key)
                self.generation[key] += 1
                self._gated_pods(spec)
                self._observe_workload(spec, "Active")
            elif self.admitted.get(key) != attempt or key in self.finished:
                continue  # that attempt was evicted meanwhile
            elif action == "ready":
                for i in range(spec.gang):
                    self._observe_pod(spec, i, attempt, ready=True)
            elif action == "finish":
                self._finish(spec, key, attempt)

    def _resync(self) -> None:
        for body in list(self.objects.values()):
            self._send(body)
        if len(self.finished) < len(self.specs):
            self._at(self.now + RESYNC_EVERY, "resync", "", 0)

    def _finish(self, spec: GangSpec, key: str, attempt: int) -> None:
        self.finished.add(key)
        del self.admitted[key]
        self.runs_done[key] += 1
        if spec.kind is Kind.POD_GROUP:
            for i in range(spec.gang):
                self._observe_pod(spec, i, attempt, ready=False, phase="Succeeded")
            if self.runs_done[key] < spec.runs:
                self._at(self.now + RERUN_AFTER, "rerun", key, 0)
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
                topology=self.labels.get(name, ()),
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
        allowed = self._selected(key)
        for _ in range(spec.gang):
            node = next((n for n in allowed if free[n] >= each), None)
            if node is None:
                return False
            free[node] -= each
            where.append(node)
        self.free = free
        self.bound[key] = where
        self._at(self.now + spec.startup, "ready", spec.key, attempt)
        self._at(self.now + spec.startup + spec.run, "finish", spec.key, attempt)
        return True

    def _selected(self, key: str) -> list[str]:
        """The nodes a gang's pods may bind on: its domain's (all without one)."""
        domain = self.domains.get(key, "")
        if not domain:
            return list(self.free)
        level = domain_level(domain)
        return [n for n in self.free if domain_at(self.labels.get(n, ()), level) == domain]

    def across_domains(self) -> list[str]:
        """Bound gangs asking for a required topology whose pods are not all inside one
        domain of its level (none ever may be)."""
        found = []
        for key, where in self.bound.items():
            request = request_of(self.specs[key].topology)
            if request is None or not request.required:
                continue
            if common_domain(self.labels, where, request.level) is None:
                found.append(f"{key} on {sorted(set(where))}, not one {request.level} domain")
        return found

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

    def pending_runs(self) -> bool:
        """Whether a pod group is to run again (its last run succeeded a moment ago)."""
        return any(action == "rerun" for _, _, action, _, _ in self.timeline)

    def _gated_pods(self, spec: GangSpec) -> None:
        """A pod group's pods as its controller creates them: gated, unscheduled."""
        for i in range(spec.gang):
            self._observe_pod(spec, i, 0, ready=False, phase="Pending", node=None)

    def _observe_workload(self, spec: GangSpec, status: str) -> None:
        detail = workload_detail(
            cluster=CLUSTER,
            workload=spec.key,
            kind=spec.kind,
            queue="default",
            gang_size=spec.gang,
            gpus=spec.gpus,
            seq=next(self.seq),
            created_at=datetime.fromtimestamp(spec.submit_at, UTC),
            status=status,
            observed_at=datetime.fromtimestamp(self.now, UTC),
            topology=spec.topology,
        )
        body = self._envelope(WORKLOAD_OBSERVED, detail)
        self.objects[spec.key] = body
        self._send(body)

    def _observe_pod(
        self,
        spec: GangSpec,
        i: int,
        attempt: int,
        *,
        ready: bool,
        deleted: bool = False,
        phase: str = "",
        node: str | None = "",
    ) -> None:
        name, uid = f"{spec.key.split('/')[1].split('@')[0]}-{i}", f"uid-{i}-a{attempt}"
        if spec.kind is Kind.POD_GROUP:
            # A group's pods are its controller's: new ones (after an eviction, or for
            # a new run) have new names and uids; releasing them changes neither.
            generation = self.generation[spec.key]
            name, uid = f"{name}-g{generation}", f"uid-{i}-g{generation}"
        if node == "":
            node = self.bound[spec.key][i] if spec.key in self.bound else f"node-{i % 16}"
        detail = pod_detail(
            cluster=CLUSTER,
            workload=spec.key,
            pod=name,
            seq=next(self.seq),
            uid=uid,
            phase=phase or ("Running" if ready else "Pending"),
            ready=ready,
            node=node,
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
        if self.labels:
            self.domains[effect.workload] = effect.domain
        if self.nodes:
            if not spec.broken and not self._bind(spec.key, effect.attempt):
                self.unbound.append((spec.key, effect.attempt))
            return
        if not spec.broken:
            self._at(self.now + spec.startup, "ready", spec.key, effect.attempt)
            self._at(self.now + spec.startup + spec.run, "finish", spec.key, effect.attempt)

    def evict(self, effect: Evict) -> None:
        """Suspend: the job controller deletes the attempt's pods, and the agent says so.
        A pod group's pods are deleted whether or not they were released (its
        controller creates gated ones a little later)."""
        spec = self.specs[effect.workload]
        released = self.admitted.get(effect.workload) == effect.attempt
        group = spec.kind is Kind.POD_GROUP and effect.workload not in self.finished
        if not (released or group):
            return
        self.admitted.pop(effect.workload, None)
        deleted = False
        for i in range(spec.gang):
            if self.objects.pop(f"{spec.key}#{i}", None) is not None:
                deleted = True
                self._observe_pod(spec, i, effect.attempt, ready=False, deleted=True)
                self.objects.pop(f"{spec.key}#{i}", None)
        if self.nodes and released:
            self._release(spec.key)
        if group and deleted:  # its pods were deleted: gated ones follow
            self.generation[spec.key] += 1
            self._at(self.now + RESPAWN_AFTER, "respawn", spec.key, 0)

    def record(self, workload: str, kind: Kind, view: Any) -> None:
        return None

    def gpus_held(self) -> int:
        return sum(self.specs[k].gpus for k in self.admitted)
