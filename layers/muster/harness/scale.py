"""The scale rig: the control plane's functions on DynamoDB (moto) under AWS's limits.

What runs is the real thing: what each deployed handler runs on its SQS batch
(the ingest function's `ingest_batch`, the timer function's `timer_batch`, the
admission function's `admission_batch`, the sweeper), the `ControlPlane` (its
reconciliation slices sent to the ingest queue), the DynamoDB store on a boto3
client, and the Kubernetes adapter. What is modelled: DynamoDB's limits and
units (`muster.harness.limits`, hooks on each instance's client), SQS and Step
Functions (`muster.harness.virtual_aws`), Lambda instances and their budgets in
virtual time (`muster.harness.budget`), and the Kubernetes API
(`muster.harness.kube_standin`, in-process) with a model cluster that starts the
pods of a released gang: each pod Pending, then Running, then Ready within a
minute, reported by the agent to the ingest queue.

The rig must run inside moto's `mock_aws`; while it is open, moto's transactions
back up only the items they name and its queries read only their partition
(`muster.harness.moto_speed`). Function timeouts, batch sizes and
batching windows are passed in (the stack's, `infra/constants.py`); the context
handed to a handler tells the time its invocation has left, in virtual time.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, cast

from muster.aws.dynamo import DynamoStore
from muster.botocore_config import BOTOCORE_RETRIES
from muster.core import Kind, LogEvent, parse_settings
from muster.harness.budget import SplitQueues, Timed, Workers
from muster.harness.clock import VirtualClock
from muster.harness.injectors import FaultPlan
from muster.harness.kube_standin import KubeStandIn
from muster.harness.lambda_events import LambdaContext
from muster.harness.limits import DynamoLimits
from muster.harness.moto_speed import faster_moto
from muster.harness.virtual_aws import Message, VirtualTimers, sqs_batch
from muster.kube.adapter import KubernetesCluster
from muster.kube.conventions import SCHEDULING_GATE, split_key
from muster.lambdas.ingest import ingest_batch
from muster.lambdas.records import admission_batch, sqs_processor, timer_batch
from muster.lambdas.wiring import record_reader
from muster.runtime.memory import MemoryBus, MemoryMetrics
from muster.runtime.ports import Bus, ClusterActions, Messages, Timers
from muster.runtime.reconciliation import SliceQueue
from muster.runtime.service import ControlPlane
from muster.runtime.sweeper import Sweeper
from muster.schema import (
    CLUSTER_SNAPSHOT,
    POD_OBSERVED,
    WORKLOAD_OBSERVED,
    pod_detail,
    snapshot_details,
    workload_detail,
)

CLUSTER = "scale"
START = 1_800_000_000.0
INSTANCES = {"ingest": 4, "timer": 2, "admission": 2, "sweeper": 1}


def envelope(detail_type: str, detail: dict[str, Any]) -> str:
    return json.dumps({"source": "muster.agent", "detail-type": detail_type, "detail": detail})


@dataclass(frozen=True)
class Budgets:
    """Each function's timeout (s), SQS batch size and batching window (s): the stack's."""

    timeouts: Mapping[str, float]
    batch_sizes: Mapping[str, int]
    windows: Mapping[str, float] = field(default_factory=dict)


class BudgetContext(LambdaContext):
    """A Lambda context whose remaining time is the running invocation's, in virtual time."""

    def __init__(self, workers: Workers) -> None:
        super().__init__()
        self.workers = workers

    def get_remaining_time_in_millis(self) -> int:
        w = self.workers.turn
        if w is None:
            return 0
        return int(max(0.0, w.t0 + w.timeout - w.t) * 1000)


class WatchedBus:
    """The bus: when each workload first became PodsReady (virtual time)."""

    def __init__(self, clock: VirtualClock) -> None:
        self.inner = MemoryBus()
        self.clock = clock
        self.ready_at: dict[str, float] = {}

    def publish(
        self, event: LogEvent, workload: str, detail: Mapping[str, Any], event_id: str, at: float
    ) -> None:
        if event is LogEvent.PODS_READY:
            self.ready_at.setdefault(workload, self.clock.now)
        self.inner.publish(event, workload, detail, event_id, at)


@dataclass
class Gang:
    key: str
    kind: Kind
    pods: list[str]
    seq: dict[str, int] = field(default_factory=dict)
    started: set[str] = field(default_factory=set)


class ScaleRig:
    """Functions, queues, table and cluster of one scenario (see the module docstring)."""

    def __init__(
        self,
        *,
        budgets: Budgets,
        settings: dict[str, Any] | None = None,
        instances: Mapping[str, int] = INSTANCES,
        seed: int = 7,
        cluster_reacts: bool = True,
    ) -> None:
        import boto3

        from muster.local.resources import create_resources

        self._moto = ExitStack()
        self._moto.enter_context(faster_moto())
        self.clock = VirtualClock(START)
        self.queues = SplitQueues(self.clock)
        self.workers = Workers(self.clock, self.queues)
        self.rng = random.Random(seed)
        self.session = boto3.Session(region_name="us-east-1")
        self.table = create_resources(self.session, "scale")["MUSTER_TABLE_NAME"]
        self.raw = self.session.client("dynamodb")
        self.limits = DynamoLimits(self.workers, self.raw, self.table)
        self.kube = KubeStandIn(on_change=self._changed if cluster_reacts else None)
        self.bus = WatchedBus(self.clock)
        self.doc = settings or {"timeout": "5m"}
        self.timers = VirtualTimers(self.queues, FaultPlan(enabled=False))
        self.gangs: dict[str, Gang] = {}
        self.paths: dict[str, tuple[Gang, str | None]] = {}
        self.pod_events = 0
        self.last_ready_sent: dict[str, float] = {}
        self.planes: dict[str, ControlPlane] = {}
        self.sweeper: Sweeper | None = None
        self.context = BudgetContext(self.workers)
        for name, handler in (
            ("ingest", self._ingest),
            ("timer", self._timer),
            ("admission", self._admission),
        ):
            self.workers.add(
                name,
                handler,
                timeout=float(budgets.timeouts[name]),
                instances=instances[name],
                batch=budgets.batch_sizes[name],
                queue=name,
                window=float(budgets.windows.get(name, 0.0)),
            )
        self.workers.add(
            "sweeper",
            self._sweep,
            timeout=float(budgets.timeouts["sweeper"]),
            instances=instances["sweeper"],
            every=60.0,
        )

    # ------------------------------------------------------------------ building

    def store(self) -> DynamoStore:
        """A store on a client of its own (one per function instance), with the limits on."""
        client = self.session.client("dynamodb", config=BOTOCORE_RETRIES)
        self.limits.attach(client)
        return DynamoStore(client, self.table, CLUSTER)

    def seed_store(self) -> DynamoStore:
        """A store without the limits (seeding a scenario's table)."""
        return DynamoStore(self.raw, self.table, CLUSTER)

    def plane(self, worker: str | None = None) -> ControlPlane:
        name = worker or (self.workers.turn.name if self.workers.turn else "setup")
        if name not in self.planes:
            store = self.store()
            w = self.workers
            self.planes[name] = ControlPlane(
                store=store,
                timers=cast(Timers, Timed(self.timers, w, "stepfunctions")),
                messages=cast(Messages, Timed(self.queues, w, "sqs")),
                bus=cast(Bus, Timed(self.bus, w, "events")),
                metrics=MemoryMetrics(),
                cluster=cast(ClusterActions, self.cluster(store)),
                settings=lambda: parse_settings(self.doc),
                clock=lambda: self.clock.now,
                draw=self.rng.random,
                sleep=w.sleep,
                inline_admission=name.startswith("admission"),
                slices=cast(SliceQueue, Timed(self.queues, w, "sqs")),
            )
        return self.planes[name]

    def cluster(self, store: DynamoStore) -> KubernetesCluster:
        api = Timed(self.kube, self.workers, "kubernetes")
        return KubernetesCluster(
            api,  # type: ignore[arg-type]
            records=record_reader(store),
            sleep=self.workers.sleep,
        )

    # ------------------------------------------------------------------ the functions

    @staticmethod
    def _failed(batch: list[Message], response: Mapping[str, Any]) -> list[Message]:
        by_id = {f"m{m.seq}": m for m in batch}
        return [by_id[str(f["itemIdentifier"])] for f in response["batchItemFailures"]]

    def _ingest(self, batch: list[Message]) -> list[Message]:
        context: Any = self.context
        response = ingest_batch(self.plane(), CLUSTER, sqs_batch(batch), context, sqs_processor())
        return self._failed(batch, response)

    def _timer(self, batch: list[Message]) -> list[Message]:
        context: Any = self.context
        event = sqs_batch(batch)
        response = timer_batch(self.plane(), event, context, sqs_processor(), self.workers.sleep)
        return self._failed(batch, response)

    def _admission(self, batch: list[Message]) -> list[Message]:
        context: Any = self.context
        response = admission_batch(self.plane(), sqs_batch(batch), context, sqs_processor())
        return self._failed(batch, response)

    def _sweep(self, batch: list[Message]) -> list[Message]:
        if self.sweeper is None:  # one per container, as the deployed function keeps it
            plane = self.plane()
            self.sweeper = Sweeper(plane.store, plane.messages, plane.settings, plane.metrics)
        self.sweeper.run(self.clock.now)
        return []

    # ------------------------------------------------------------------ the cluster

    def submit(
        self, key: str, kind: Kind, pods: int, *, pod_name: str = "worker", gpus: int = 0
    ) -> Gang:
        """A gang created on the cluster and reported by the agent (a pod group's pods, gated)."""
        namespace, name = split_key(key)
        names = [f"{name}-{pod_name}-{i:05d}" for i in range(pods)]
        gang = Gang(key, kind, names)
        self.gangs[key] = gang
        detail = workload_detail(
            cluster=CLUSTER, workload=key, kind=kind.value, queue="default",
            gang_size=pods, seq=1, gpus=gpus, uid=f"uid-{key}",
        )  # fmt: skip
        self.queues.send("ingest", envelope(WORKLOAD_OBSERVED, detail))
        if kind is Kind.POD_GROUP:
            for pod in names:
                self.paths[self.kube.add_pod(namespace, pod, uid=f"uid-{pod}", group=name)] = (
                    gang,
                    pod,
                )
                self._report(gang, pod, 0.5, "Pending", ready=False, node=None)
        else:
            self.paths[self.kube.add_workload(kind, key, uid=f"uid-{key}")] = (gang, None)
        return gang

    def _report(
        self, gang: Gang, pod: str, delay: float, phase: str, *, ready: bool, node: str | None
    ) -> None:
        seq = gang.seq.get(pod, 0) + 1
        gang.seq[pod] = seq
        detail = pod_detail(
            cluster=CLUSTER, workload=gang.key, pod=pod, seq=seq, uid=f"uid-{pod}",
            phase=phase, ready=ready, node=node,
            reason="ContainersNotReady" if phase == "Running" and not ready else None,
        )  # fmt: skip
        self.queues.send("ingest", envelope(POD_OBSERVED, detail), delay)
        self.pod_events += 1
        if ready:
            at = self.clock.now + delay
            self.last_ready_sent[gang.key] = max(self.last_ready_sent.get(gang.key, 0.0), at)

    def _changed(self, path: str, obj: dict[str, Any]) -> None:
        """A released Job starts all its pods; an ungated pod of a group starts."""
        found = self.paths.get(path)
        if found is None:
            return
        gang, pod = found
        if pod is None:
            if not _suspended(obj):
                self._start(gang.pods, gang)
            return
        gates = (obj.get("spec") or {}).get("schedulingGates") or []
        if not any(g.get("name") == SCHEDULING_GATE for g in gates):
            self._start([pod], gang)

    def _start(self, pods: list[str], gang: Gang) -> None:
        for pod in pods:
            if pod in gang.started:
                continue
            gang.started.add(pod)
            node = f"node-{(len(gang.started) // 8) % 500:03d}"
            running = self.rng.uniform(5.0, 25.0)
            ready = running + self.rng.uniform(5.0, 25.0)
            if gang.kind is not Kind.POD_GROUP:
                self._report(gang, pod, 1.0, "Pending", ready=False, node=node)
            self._report(gang, pod, running, "Running", ready=False, node=node)
            self._report(gang, pod, ready, "Running", ready=True, node=node)

    def snapshot_pods(self, revision: int, delay: float = 0.0) -> int:
        """The agent's snapshot of every gang's pods (scope Pod), in parts; how many parts."""
        pods = {g.key: {p: f"uid-{p}" for p in g.pods} for g in self.gangs.values()}
        return self.snapshot("Pod", revision, pods=pods, delay=delay)

    def snapshot(
        self,
        scope: str,
        revision: int,
        *,
        workloads: Mapping[str, str] | None = None,
        pods: Mapping[str, Mapping[str, str]] | None = None,
        delay: float = 0.0,
    ) -> int:
        """The agent's snapshot of `scope` after a list, in parts sent to the ingest
        queue; how many parts."""
        parts = snapshot_details(
            cluster=CLUSTER, scope=scope, revision=revision, snapshot=f"snap-{scope}-{revision}",
            workloads=workloads, pods=pods,
        )  # fmt: skip
        for detail in parts:
            self.queues.send("ingest", envelope(CLUSTER_SNAPSHOT, detail), delay)
        return len(parts)

    def run(self, seconds: float) -> None:
        self.workers.run(self.clock.now + seconds)

    def close(self) -> None:
        self.workers.stop()
        self._moto.close()


def _suspended(obj: dict[str, Any]) -> bool:
    spec = obj.get("spec") or {}
    return bool(spec.get("suspend", (spec.get("runPolicy") or {}).get("suspend", False)))
