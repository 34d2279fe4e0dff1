"""An admission pass with 10,000 active workloads, on moto.

The ledger no longer lists the workloads that hold quota (one item could not hold
them: it stopped working between about 1,300 and 6,000); a pass finds them on the
phase index. This seeds N Running workloads with long names (one GPU each) under a
quota of N + 1, submits two more, and times the pass that admits exactly one.
moto answers far slower than DynamoDB (it serialises every item of a query), so
the seconds measure moto; the reads and item sizes are the point.

    .venv/bin/python benchmarks/ledger_10k.py [--workloads 10000]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "layers")]

import boto3  # noqa: E402
from moto import mock_aws  # noqa: E402
from muster.aws.dynamo import DynamoStore  # noqa: E402
from muster.core import Phase, Workload, parse_settings  # noqa: E402
from muster.local.resources import create_resources  # noqa: E402
from muster.runtime.codec import dumps, encode_workload  # noqa: E402
from muster.runtime.memory import MemoryBus, MemoryMessages, MemoryMetrics, MemoryTimers  # noqa: E402
from muster.runtime.ports import RecordingCluster  # noqa: E402
from muster.runtime.service import ControlPlane  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, default=10_000)
    n = parser.parse_args().workloads
    for key, value in {
        "AWS_ACCESS_KEY_ID": "x",
        "AWS_SECRET_ACCESS_KEY": "x",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        os.environ.setdefault(key, value)
    with mock_aws():
        session = boto3.Session(region_name="us-east-1")
        table = create_resources(session, "bench")["MUSTER_TABLE_NAME"]
        client = session.client("dynamodb")
        store = DynamoStore(client, table, "training")
        started = time.perf_counter()
        for start in range(0, n, 25):
            batch = []
            for i in range(start, min(n, start + 25)):
                w = Workload(
                    key=f"team-{i % 50:02d}-research/llama-finetune-{i:05d}-" + "x" * 40,
                    queue="default",
                    gang_size=1,
                    gpus=1,
                    phase=Phase.RUNNING,
                    attempt=1,
                )
                item = {
                    "pk": {"S": f"WL#{w.key}"},
                    "sk": {"S": "STATE"},
                    "workload": {"S": w.key},
                    "version": {"N": "1"},
                    "epoch": {"N": "0"},
                    "phase": {"S": "Running"},
                    "queue": {"S": "default"},
                    "state": {"S": dumps(encode_workload(w))},
                    "gsi1pk": {"S": "PHASE#Running"},
                    "gsi1sk": {"S": w.key},
                    "readyCount": {"N": "1"},
                }
                batch.append({"PutRequest": {"Item": item}})
            client.batch_write_item(RequestItems={table: batch})
        seeded = time.perf_counter() - started
        for key in ("ns/one", "ns/two"):
            store.write_workload(
                None, Workload(key=key, queue="default", gang_size=1, gpus=1), 0, (), 1.0
            )
        plane = ControlPlane(
            store=store,
            timers=MemoryTimers(),
            messages=MemoryMessages(),
            bus=MemoryBus(),
            metrics=MemoryMetrics(),
            cluster=RecordingCluster(),
            settings=lambda: parse_settings({"gpuQuota": n + 1}),
        )
        started = time.perf_counter()
        admitted = plane.admission_pass()
        elapsed = time.perf_counter() - started
        ledger = client.query(
            TableName=table,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": "ADMISSION"}},
        )["Items"]
        size = max(len(str(i)) for i in ledger)
    print(f"active workloads:         {n}")
    print(f"seeded in:                {seeded:.1f} s (moto)")
    print(f"admission pass:           {elapsed:.1f} s (moto), admitted {admitted}")
    print(f"ledger items:             {len(ledger)} (largest about {size} bytes)")
    return 0 if admitted == ["ns/one"] else 1


if __name__ == "__main__":
    sys.exit(main())
