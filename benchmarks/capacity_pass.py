"""The admission pass's cost with the capacity check: wall time in-process, reads on moto.

In-process: 500 nodes of 8 GPUs, 230 running gangs (2 pods x 8 GPUs, bound)
filling 460 of them, others' pods (2 GPUs) on every fifth of the rest, 1,000
pending workloads of mixed shapes, and a GPU quota of the whole cluster;
one pass of the core's planner (`plan_admission`, what the Lambdas run) and of
the simulator's indexed queue (`Cluster.admission_pass`), with and without
`capacityCheck`.

On moto: the same cluster in DynamoDB (node items, workload and pod items), and
the DynamoDB read requests (GetItem, Query pages, BatchGetItem) one admission
pass of the control plane makes, with and without the check. moto answers far
slower than DynamoDB, so its seconds are not the point; the reads are.

    .venv/bin/python benchmarks/capacity_pass.py [--pending 1000] [--nodes 500] [--running 230]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "layers")]

from muster.core import (  # noqa: E402
    Fleet,
    NodeObserved,
    Phase,
    Pod,
    PodObserved,
    Workload,
    WorkloadObserved,
    parse_settings,
    plan_admission,
)
from muster.core.capacity import NodeCapacity  # noqa: E402

SHAPES = ((1, 8), (2, 8), (4, 8), (2, 4), (8, 1), (1, 2))


def cluster_model(
    nodes: int, running: int, pending: int
) -> tuple[list[NodeCapacity], list[Workload], list[Workload]]:
    rng = random.Random(7)
    caps = [
        NodeCapacity(f"node-{i}", 1, 8, True, None, 2 if i >= 2 * running and i % 5 == 4 else 0)
        for i in range(nodes)
    ]
    active = []
    for g in range(running):
        pods = {
            f"r{g}-{k}": Pod(f"r{g}-{k}", 1, phase="Running", ready=True, node=f"node-{2 * g + k}")
            for k in range(2)
        }
        active.append(
            Workload(
                f"team-{g % 20}/running-{g:04d}",
                "default",
                2,
                gpus=16,
                phase=Phase.RUNNING,
                attempt=1,
                admitted_at=float(g),
                pods=pods,
            )
        )
    queued = []
    for i in range(pending):
        count, each = rng.choice(SHAPES)
        queued.append(
            Workload(
                f"team-{i % 20}/pending-{i:04d}",
                "default",
                count,
                gpus=count * each,
                created_at=1000.0 + i,
                queued_at=1000.0 + i,
            )
        )
    return caps, active, queued


def timed(fn: Any, repeat: int = 5) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(repeat):
        started = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - started)
    return best, result


def in_process(nodes: int, running: int, pending: int) -> None:
    caps, active, queued = cluster_model(nodes, running, pending)
    quota = {"gpuQuota": nodes * 8}
    plain, fit = parse_settings(quota), parse_settings({**quota, "capacityCheck": True})
    t_plain, p_plain = timed(lambda: plan_admission(queued, active, plain, 5000.0))
    t_fit, p_fit = timed(lambda: plan_admission(queued, active, fit, 5000.0, nodes=caps))
    print(f"in-process pass over {pending} pending, {nodes} nodes, {running} running gangs")
    print(
        f"  plan_admission, quota only:      {t_plain * 1000:7.1f} ms, admits {len(p_plain.admit)}"
    )
    print(f"  plan_admission, capacityCheck:   {t_fit * 1000:7.1f} ms, admits {len(p_fit.admit)}")
    for settings, label in ((plain, "quota only"), (fit, "capacityCheck")):
        core = Fleet(replace(settings, gpu_quota=None), defer_admission=True)
        for c in caps:
            core.apply(NodeObserved(c.node, seq=1, gpus=c.gpus, foreign_gpus=c.foreign_gpus), 0)
        for w in active:
            core.apply(WorkloadObserved(w.key, "default", 2, gpus=16, seq=1), 0)
        core.admission_pass(0)
        core.settings = settings
        for w in active:
            for pod in w.pods.values():
                core.apply(PodObserved(w.key, pod.name, 2, pod.name, "Running", True, pod.node), 1)
        for w in queued:
            core.apply(
                WorkloadObserved(
                    w.key, "default", w.gang_size, gpus=w.gpus, seq=1, created_at=w.created_at
                ),
                2,
            )
        started = time.perf_counter()
        step = core.admission_pass(3)
        elapsed = time.perf_counter() - started
        admitted = sum(len(p.admit) for p in step.plans)
        print(f"  simulator's queue, {label + ':':15s}{elapsed * 1000:7.1f} ms, admits {admitted}")


class CountingClient:
    """A DynamoDB client that counts read requests (every page of a query is one)."""

    READS = ("get_item", "query", "batch_get_item", "scan", "transact_get_items")

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.reads: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name in self.READS:

            def call(**kwargs: Any) -> Any:
                self.reads[name] += 1
                return attr(**kwargs)

            return call
        return attr


def on_moto(nodes: int, running: int, pending: int) -> None:
    import boto3
    from moto import mock_aws
    from muster.aws.dynamo import DynamoStore
    from muster.local.resources import create_resources
    from muster.runtime.codec import dumps, encode_workload
    from muster.runtime.memory import MemoryBus, MemoryMessages, MemoryMetrics, MemoryTimers
    from muster.runtime.ports import PodWrite, RecordingCluster
    from muster.runtime.service import ControlPlane

    for key, value in {
        "AWS_ACCESS_KEY_ID": "x",
        "AWS_SECRET_ACCESS_KEY": "x",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        os.environ.setdefault(key, value)
    caps, active, queued = cluster_model(nodes, running, pending)
    print(f"on moto: one admission pass of the control plane ({pending} pending, {nodes} nodes)")
    for check in (False, True):
        with mock_aws():
            session = boto3.Session(region_name="us-east-1")
            table = create_resources(session, "bench")["MUSTER_TABLE_NAME"]
            raw = session.client("dynamodb")
            store = DynamoStore(raw, table, "training")
            for c in caps:
                store.put_node(c)
            for w in active:
                bare = replace(w, pods={})
                snap_version = store.write_workload(
                    None,
                    bare,
                    0,
                    (),
                    1.0,
                    pods=[PodWrite(p.name, p, None, "") for p in w.pods.values()],
                    ready_delta=2,
                )
                assert snap_version
            for start in range(0, len(queued), 25):
                batch = []
                for w in queued[start : start + 25]:
                    item = {
                        "pk": {"S": f"WL#{w.key}"},
                        "sk": {"S": "STATE"},
                        "workload": {"S": w.key},
                        "version": {"N": "1"},
                        "epoch": {"N": "0"},
                        "phase": {"S": "Pending"},
                        "queue": {"S": "default"},
                        "state": {"S": dumps(encode_workload(w))},
                        "gsi1pk": {"S": "PHASE#Pending"},
                        "gsi1sk": {"S": w.key},
                        "readyCount": {"N": "0"},
                    }
                    batch.append({"PutRequest": {"Item": item}})
                raw.batch_write_item(RequestItems={table: batch})
            counting = CountingClient(raw)
            store.client = counting
            doc: dict[str, Any] = {"gpuQuota": nodes * 8}
            if check:
                doc["capacityCheck"] = True
            plane = ControlPlane(
                store=store,
                timers=MemoryTimers(),
                messages=MemoryMessages(),
                bus=MemoryBus(),
                metrics=MemoryMetrics(),
                cluster=RecordingCluster(),
                settings=lambda doc=doc: parse_settings(doc),  # type: ignore[misc]
                clock=lambda: 5000.0,
            )
            started = time.perf_counter()
            admitted = plane.admission_pass()
            elapsed = time.perf_counter() - started
            reads = sum(counting.reads.values())
            label = "capacityCheck" if check else "quota only"
            detail = ", ".join(f"{k} {v}" for k, v in sorted(counting.reads.items()))
            print(
                f"  {label + ':':15s} {reads} read requests ({detail}); admitted {len(admitted)}; "
                f"{len(admitted) + 1} planning rounds; {elapsed:.1f} s on moto"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pending", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--running", type=int, default=230)
    parser.add_argument("--skip-moto", action="store_true")
    args = parser.parse_args()
    in_process(args.nodes, args.running, args.pending)
    if not args.skip_moto:
        on_moto(args.nodes, args.running, args.pending)
    return 0


if __name__ == "__main__":
    sys.exit(main())
