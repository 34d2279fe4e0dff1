"""Scale scenarios on the scale rig, and the figures each reports.

- `gang`: a gang of N pods (a Job, or a plain pod group) submitted, admitted and
  started: every pod Pending, Running, then Ready within a minute of virtual time;
- `queue`: W queued workloads (one 8-GPU pod each) on nodes of 8 GPUs, with a
  GPU quota that lets about `admit` in, and one admission pass;
- `reconcile`: W running workloads of P ready pods each, and the agent's
  snapshots of their Jobs and of their pods, which show nothing changed: the
  reconciliation's slices go through the ingest queue until the snapshot is
  recorded as acted on.

Scenarios seed their table with BatchWriteItem (`muster.harness.scale_seed`).

Each returns a `ScaleReport`; `ScaleReport.rows()` is what `benchmarks/scale.py`
prints and what tests/scale asserts on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from muster.core import Kind, Phase, Pod, Workload
from muster.core.capacity import NodeCapacity
from muster.harness.scale import START, Budgets, ScaleRig
from muster.harness.scale_seed import items_of, seed, workload_item
from muster.harness.virtual_aws import quiet
from muster.runtime.messages import admission_body


@dataclass
class ScaleReport:
    """One scenario's figures."""

    name: str
    pod_events: int = 0
    reads: int = 0
    writes: int = 0
    read_units: float = 0.0
    write_units: float = 0.0
    hottest_item_wcu: float = 0.0  # write units in one second on one item
    hottest_partition_wcu: float = 0.0
    largest_item: int = 0
    largest_key: str = ""
    workload_item: int = 0  # the gang's workload item (bytes)
    requests: dict[str, int] = field(default_factory=dict)  # DynamoDB requests by operation
    kube_calls: int = 0
    kube_by_verb: dict[str, int] = field(default_factory=dict)
    ready_lag: float | None = None  # last pod Ready sent -> PodsReady (virtual s)
    invocations: int = 0
    longest: float = 0.0
    longest_function: str = ""
    timed_out: int = 0
    throttled: int = 0  # DynamoDB requests refused for a hot item (each try)
    conflicts: int = 0  # DynamoDB requests refused for a transaction in flight
    records_failed: int = 0
    dead_lettered: int = 0
    admission_passes: int = 0
    admission_reads: int = 0
    admission_seconds: float = 0.0  # the longest admission invocation (virtual)
    admitted: int = 0
    phase: str = ""
    workloads: int = 0  # a reconciliation's workloads
    reconciled: int = 0  # of those, the ones that took in the pod snapshot
    reconcile_seconds: float | None = None  # snapshot sent -> recorded as acted on
    ingest_invocations: int = 0
    ingest_longest: float = 0.0

    def per_event(self, value: float) -> float:
        return value / self.pod_events if self.pod_events else 0.0

    def rows(self) -> list[tuple[str, str]]:
        lag = "never" if self.ready_lag is None else f"{self.ready_lag:.1f} s"
        rows = [
            ("pod events", f"{self.pod_events}"),
            (
                "DynamoDB reads / pod event",
                f"{self.per_event(self.reads):.2f} ({self.per_event(self.read_units):.2f} RCU)",
            ),
            (
                "DynamoDB writes / pod event",
                f"{self.per_event(self.writes):.2f} ({self.per_event(self.write_units):.2f} WCU)",
            ),
            ("hottest item WCU/s", f"{self.hottest_item_wcu:.0f}"),
            ("hottest partition WCU/s", f"{self.hottest_partition_wcu:.0f}"),
            ("largest item", f"{self.largest_item} B ({self.largest_key})"),
            ("workload item", f"{self.workload_item} B"),
            ("Kubernetes calls / pod event", f"{self.per_event(self.kube_calls):.2f}"),
            ("last Ready -> PodsReady", lag),
            (
                "invocations, longest",
                f"{self.invocations}, {self.longest:.2f} s ({self.longest_function})",
            ),
            ("invocations timed out", f"{self.timed_out}"),
            ("throttled requests / conflicts", f"{self.throttled} / {self.conflicts}"),
            ("records failed / dead-lettered", f"{self.records_failed} / {self.dead_lettered}"),
            (
                "admission: passes, reads, longest",
                f"{self.admission_passes}, {self.admission_reads}, {self.admission_seconds:.2f} s",
            ),
            ("admitted, final phase", f"{self.admitted}, {self.phase}"),
        ]
        if self.workloads:
            took = "never" if self.reconcile_seconds is None else f"{self.reconcile_seconds:.1f} s"
            rows += [
                ("reconciled / workloads", f"{self.reconciled} / {self.workloads}"),
                (
                    "DynamoDB reads, writes / workload",
                    f"{self.reads / self.workloads:.2f}, {self.writes / self.workloads:.2f}",
                ),
                ("snapshot sent -> acted on", took),
                (
                    "ingest invocations, longest",
                    f"{self.ingest_invocations}, {self.ingest_longest:.2f} s",
                ),
            ]
        return rows


class _AdmissionReads:
    """DynamoDB reads made inside admission invocations (the limits' counts, split)."""

    def __init__(self, rig: ScaleRig) -> None:
        self.reads = 0
        rig.limits.on_request = self._count
        self.rig = rig

    def _count(self, op: str) -> None:
        turn = self.rig.workers.turn
        if turn is not None and turn.function == "admission" and op in _READS:
            self.reads += 1


_READS = frozenset({"GetItem", "BatchGetItem", "Query", "Scan", "TransactGetItems"})


def report(rig: ScaleRig, name: str, key: str | None, admission: _AdmissionReads) -> ScaleReport:
    u = rig.limits.usage
    inv = rig.workers.invocations
    longest = max(inv, key=lambda i: i.duration, default=None)
    passes = [i for i in inv if i.function == "admission"]
    r = ScaleReport(
        name=name,
        pod_events=rig.pod_events,
        reads=u.reads,
        writes=u.writes,
        read_units=u.read_units,
        write_units=u.write_units,
        hottest_item_wcu=rig.limits.hottest_wcu(),
        hottest_partition_wcu=rig.limits.hottest_partition_wcu(),
        largest_item=u.largest,
        largest_key="/".join(u.largest_key),
        requests=dict(u.requests),
        kube_calls=rig.kube.total(),
        kube_by_verb=dict(rig.kube.calls),
        invocations=len(inv),
        longest=longest.duration if longest else 0.0,
        longest_function=longest.function if longest else "",
        timed_out=sum(i.timed_out for i in inv),
        throttled=u.throttled,
        conflicts=u.conflicts,
        records_failed=sum(i.failed for i in inv),
        dead_lettered=sum(rig.queues.dlq.values()),
        admission_passes=len(passes),
        admission_reads=admission.reads,
        admission_seconds=max((i.duration for i in passes), default=0.0),
    )
    if key is not None:
        r.workload_item = rig.limits.sizes.get((f"WL#{key}", "STATE"), 0)
        ready = rig.bus.ready_at.get(key)
        sent = rig.last_ready_sent.get(key)
        if ready is not None and sent is not None:
            r.ready_lag = max(0.0, ready - sent)
        snap = rig.seed_store().load_pod(key, None)
        r.phase = snap.workload.phase.value if snap else "missing"
    return r


def gang(
    kind: Kind,
    pods: int,
    *,
    budgets: Budgets,
    horizon: float = 180.0,
    pod_name: str = "worker",
    settings: dict[str, Any] | None = None,
) -> ScaleReport:
    """A gang of `pods` started (see the module docstring); runs inside `mock_aws`."""
    rig = ScaleRig(budgets=budgets, settings=settings)
    admission = _AdmissionReads(rig)
    key = "research-team/llama-pretrain-gang"
    try:
        with quiet():
            rig.submit(key, kind, pods, pod_name=pod_name)
            # The agent's periodic snapshot of the cluster's pods, once the gang runs.
            rig.snapshot_pods(revision=1_000_000, delay=horizon / 2)
            rig.run(horizon)
        r = report(rig, f"{kind.value} gang of {pods}", key, admission)
        r.admitted = sum(1 for e, w, _ in rig.bus.inner.events if e == "Admitted" and w == key)
        return r
    finally:
        rig.close()


def queue(
    workloads: int,
    nodes: int,
    *,
    admit: int,
    budgets: Budgets,
    horizon: float = 120.0,
) -> ScaleReport:
    """`workloads` queued on `nodes` 8-GPU nodes, a quota of `admit` x 8 GPUs, one pass."""
    settings = {"timeout": "5m", "gpuQuota": admit * 8, "capacityCheck": True}
    rig = ScaleRig(budgets=budgets, settings=settings, cluster_reacts=False)
    admission = _AdmissionReads(rig)
    try:
        seed = rig.seed_store()
        for i in range(nodes):
            seed.put_node(NodeCapacity(f"node-{i:04d}", 1, 8, True, None, 0))
        keys = [f"team-{i % 50:02d}/finetune-{i:05d}" for i in range(workloads)]
        _seed_pending(rig, keys)
        for k in keys:
            rig.kube.add_workload(Kind.JOB, k, uid=f"uid-{k}")
        rig.queues.send("admission", admission_body("scale scenario", None))
        with quiet():
            rig.run(horizon)
        r = report(rig, f"{workloads} queued on {nodes} nodes", None, admission)
        r.admitted = sum(1 for e, _, _ in rig.bus.inner.events if e == "Admitted")
        return r
    finally:
        rig.close()


def _seed_pending(rig: ScaleRig, keys: list[str]) -> None:
    """Pending workloads written straight into the table (no limits, no virtual time)."""

    def pending(i: int, key: str) -> Workload:
        at = 1000.0 + i
        return Workload(
            key, "default", 1, gpus=8, kind=Kind.JOB, uid=f"uid-{key}", created_at=at, queued_at=at
        )

    seed(rig.raw, rig.table, (workload_item(pending(i, k)) for i, k in enumerate(keys)))


def running(key: str, index: int, pods: int, nodes: int) -> Workload:
    """A Job admitted once, its `pods` pods Ready (8 to a node), PodsReady."""

    def pod(i: int) -> Pod:
        name = f"{key.split('/', 1)[1]}-worker-{i}"
        node = f"node-{(index * pods + i) // 8 % nodes:04d}"
        return Pod(
            name, 3, uid=f"uid-{name}", phase="Running", ready=True, node=node, scheduled=True
        )

    members = {p.name: p for p in map(pod, range(pods))}
    at = START - 3600.0
    return Workload(
        key, "default", pods, gpus=8 * pods, kind=Kind.JOB, uid=f"uid-{key}",
        created_at=at, spec_seq=1, born_seq=1, phase=Phase.RUNNING, attempt=1,
        queued_at=at, admitted_at=at + 5, ready_at=at + 60, ever_ready=True, pods=members,
    )  # fmt: skip


def reconcile(
    workloads: int,
    pods: int,
    *,
    budgets: Budgets,
    nodes: int = 500,
    horizon: float = 600.0,
) -> ScaleReport:
    """`workloads` running Jobs of `pods` pods, and the agent's snapshots that show them
    all as they are (see the module docstring); runs inside `mock_aws`."""
    rig = ScaleRig(budgets=budgets, cluster_reacts=False)
    admission = _AdmissionReads(rig)
    revision = 1_000_000
    try:
        keys = [f"team-{i % 50:02d}/train-{i:05d}" for i in range(workloads)]
        jobs = [running(k, i, pods, nodes) for i, k in enumerate(keys)]
        seed(rig.raw, rig.table, (item for w in jobs for item in items_of(w, now=START - 3000)))
        for w in jobs:
            rig.kube.add_workload(Kind.JOB, w.key, uid=w.uid, suspended=False)
        sent = rig.clock.now
        rig.snapshot("Job", revision, workloads={w.key: w.uid for w in jobs})
        listed = {w.key: {p.name: p.uid for p in w.pods.values()} for w in jobs}
        rig.snapshot("Pod", revision + 1, pods=listed)
        with quiet():
            _until_acted_on(rig, sent, revision + 1, horizon)
        r = report(
            rig, f"reconciling {workloads} workloads, {workloads * pods} pods", None, admission
        )
        _reconciled(rig, r, sent, workloads, revision + 1)
        return r
    finally:
        rig.close()


def _until_acted_on(rig: ScaleRig, sent: float, revision: int, horizon: float) -> None:
    """Run until the pod snapshot is acted on, its queue empty and the sweeper has run
    once (at most `horizon`)."""
    store = rig.seed_store()
    while rig.clock.now - sent < horizon:
        rig.run(STEP)
        done = store.snapshot_revision("Pod") >= revision
        swept = any(i.function == "sweeper" for i in rig.workers.invocations)
        if done and swept and not rig.queues.waiting("ingest"):
            return


def _reconciled(rig: ScaleRig, r: ScaleReport, sent: float, workloads: int, revision: int) -> None:
    """A reconciliation's figures: who took in the snapshot, and how long it took."""
    store = rig.seed_store()
    r.workloads = workloads
    r.reconciled = sum(1 for p in ACTIVE for w in store.by_phase(p) if w.listed_seq == revision)
    ingest = [i for i in rig.workers.invocations if i.function == "ingest"]
    r.ingest_invocations = len(ingest)
    r.ingest_longest = max((i.duration for i in ingest), default=0.0)
    if store.snapshot_revision("Pod") >= revision and ingest:
        r.reconcile_seconds = max(i.start + i.duration for i in ingest) - sent


ACTIVE = tuple(p.value for p in Phase if p is not Phase.FINISHED)
STEP = 15.0  # virtual seconds between looks at whether a scenario is done
