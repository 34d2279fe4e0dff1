"""Benchmark: a 1,024-pod gang's status events through the ingest path on moto.

Every pod is reported Pending, then Running, then Ready (3,072 events), in SQS
batches of 100 (the ingest event source's batch size), to the ingest function's
batch processing (`muster.lambdas.ingest.ingest_batch`, the code its handler runs:
a gang's pod events in one batch are one write), as Lambda would deliver them.
`--one-by-one` plays them through the record-by-record path instead (one write per
pod event), for comparison. `--workers` function instances run at once,
each with its own control plane, batch processor and AWS clients, against one moto
server on the loopback interface (so DynamoDB sees concurrent writers, as it
would with several Lambda instances). The workload is submitted
and admitted first, so the last Ready pod makes the gang PodsReady.

Prints events per second, DynamoDB write requests per pod event (counted from
the real API calls with botocore event hooks), and write conflicts retried.

    .venv/bin/python benchmarks/ingest_1024.py [--pods 1024] [--workers 4] [--batch 100]
        [--one-by-one]
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import socket
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "layers")]

os.environ.update(
    {
        "AWS_ACCESS_KEY_ID": "benchmark",
        "AWS_SECRET_ACCESS_KEY": "benchmark",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "LOG_LEVEL": "WARNING",
        "POWERTOOLS_METRICS_NAMESPACE": "Muster",
        "POWERTOOLS_SERVICE_NAME": "muster",
        "POWERTOOLS_METRICS_DISABLED": "true",
    }
)

WRITES = {"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem"}
KEY = "bench/gang-1024"
CLUSTER = "bench"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=1024)
    parser.add_argument("--workers", type=int, default=4, help="concurrent function instances")
    parser.add_argument("--batch", type=int, default=100, help="SQS batch size")
    parser.add_argument(
        "--one-by-one", action="store_true", help="each record on its own (no pod runs)"
    )
    args = parser.parse_args(argv)

    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise

    serialise_moto_dynamodb()
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    os.environ["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{port}"
    try:
        return run(args)
    finally:
        server.stop()


def serialise_moto_dynamodb() -> None:
    """One DynamoDB request at a time in moto, as DynamoDB isolates them.

    moto's server is not thread-safe: a transaction deep-copies the table (to roll
    back) while other requests change it, fails with a 500, and restoring the copy
    loses the concurrent writes (a ready count one short). DynamoDB isolates
    requests; serialising moto's makes it measure Muster, not moto's races.
    """
    from moto.dynamodb.responses import DynamoHandler

    lock = threading.Lock()
    call_action = DynamoHandler.call_action

    def serialised(self: Any) -> Any:
        with lock:
            return call_action(self)

    DynamoHandler.call_action = serialised  # type: ignore[method-assign]


def run(args: argparse.Namespace) -> int:
    import boto3
    from muster.aws.config import RuntimeConfig
    from muster.harness.lambda_events import LambdaContext, sqs_event
    from muster.lambdas.records import sqs_processor
    from muster.lambdas.wiring import build_control_plane
    from muster.local.resources import create_resources
    from muster.runtime.ports import RecordingCluster
    from muster.schema import WORKLOAD_OBSERVED, workload_detail

    from functions.ingest.handler import handler

    session = boto3.Session()
    resources = create_resources(session, "bench")
    env = {k: v for k, v in resources.items() if k.startswith("MUSTER_")}
    env["MUSTER_CLUSTER_NAME"] = CLUSTER
    env["MUSTER_SETTINGS"] = json.dumps({"timeout": "30m"})
    config = RuntimeConfig.from_env(env)
    cluster = RecordingCluster()
    calls: Counter[str] = Counter()
    lock = threading.Lock()

    def count(model: Any, **_: Any) -> None:
        with lock:
            calls[model.name] += 1

    def plane(inline: bool = False) -> Any:
        p = build_control_plane(
            config, cluster=lambda _c: cluster, session=boto3.Session(), inline_admission=inline
        )
        p.store.client.meta.events.register("before-call.dynamodb.*", count)
        return p

    context = LambdaContext()
    # The workload is submitted and admitted before its pods report.
    setup = plane(inline=True)
    submit = workload_detail(
        cluster=CLUSTER, workload=KEY, kind="PyTorchJob", queue="bench", gang_size=args.pods, seq=1
    )
    handler(
        sqs_event(envelope(WORKLOAD_OBSERVED, submit)), context, plane=setup, cluster_name=CLUSTER
    )
    assert setup.admission_pass() == [KEY], "the gang was not admitted"
    calls.clear()

    waves = pod_waves(args.pods, args.batch)
    # One control plane and one batch processor per function instance: like Lambda
    # instances, they share nothing but the AWS services.
    workers = [(plane(), sqs_processor()) for _ in range(args.workers)]
    started = time.perf_counter()
    failures = replay(waves, workers, context, one_by_one=args.one_by_one)
    elapsed = time.perf_counter() - started
    return report(args, elapsed, calls, workers, setup, failures)


def envelope(detail_type: str, detail: dict[str, Any]) -> dict[str, Any]:
    return {"source": "muster.agent", "detail-type": detail_type, "detail": detail}


def pod_waves(pods: int, batch: int) -> list[list[list[dict[str, Any]]]]:
    """Every pod Pending, then Running, then Ready: three waves of SQS batches."""
    from muster.schema import POD_OBSERVED, pod_detail

    names = [f"gang-1024-worker-{i}" for i in range(pods)]
    waves = []
    for seq, (phase, ready) in enumerate(
        (("Pending", False), ("Running", False), ("Running", True)), 1
    ):
        events = [
            envelope(
                POD_OBSERVED,
                pod_detail(
                    cluster=CLUSTER,
                    workload=KEY,
                    pod=name,
                    seq=seq,
                    uid=f"{name}-uid",
                    phase=phase,
                    ready=ready,
                    node=f"node-{i // 8}" if phase != "Pending" else None,
                    reason="ContainersNotReady" if phase == "Running" and not ready else None,
                ),
            )
            for i, name in enumerate(names)
        ]
        waves.append([events[i : i + batch] for i in range(0, len(events), batch)])
    return waves


def replay(
    waves: list[list[list[dict[str, Any]]]],
    workers: list[tuple[Any, Any]],
    context: Any,
    *,
    one_by_one: bool = False,
) -> int:
    """Each wave's batches taken by the function instances at once; the records that failed."""
    take = partial(instance, one_by_one=one_by_one)
    failures = 0
    with ThreadPoolExecutor(max_workers=len(workers)) as pool:
        for wave in waves:  # every pod Pending, then Running, then Ready
            batches: queue.SimpleQueue[list[dict[str, Any]]] = queue.SimpleQueue()
            for batch in wave:
                batches.put(batch)
            failures += sum(
                pool.map(take, workers, [batches] * len(workers), [context] * len(workers))
            )
    return failures


def instance(
    worker: tuple[Any, Any],
    batches: queue.SimpleQueue[list[dict[str, Any]]],
    context: Any,
    *,
    one_by_one: bool = False,
) -> int:
    """One function instance: batches until none is left; how many records it failed."""
    from aws_lambda_powertools.utilities.batch import process_partial_response
    from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError
    from muster.harness.lambda_events import sqs_event
    from muster.lambdas.ingest import ingest_batch
    from muster.lambdas.records import ingest_record

    control_plane, processor = worker
    failed = 0
    while True:
        try:
            batch = batches.get_nowait()
        except queue.Empty:
            return failed
        try:
            if one_by_one:
                response = process_partial_response(
                    event=sqs_event(*batch),
                    record_handler=partial(ingest_record, control_plane, CLUSTER),
                    processor=processor,
                    context=context,
                )
            else:
                event = sqs_event(*batch)
                response = ingest_batch(control_plane, CLUSTER, event, context, processor)
            failed += len(response["batchItemFailures"])
        except BatchProcessingError:  # every record of the batch failed
            failed += len(batch)


def report(
    args: argparse.Namespace,
    elapsed: float,
    calls: Counter[str],
    workers: list[tuple[Any, Any]],
    setup: Any,
    failures: int,
) -> int:
    pod_events = 3 * args.pods
    writes = sum(n for op, n in calls.items() if op in WRITES)
    conflicts = sum(w.stats.conflicts for w, _ in workers)
    final = setup.store.load(KEY)
    phase = final.workload.phase.value if final else "missing"
    ready = (
        f"{final.workload.ready_pods} ready pods, ready count {final.ready_count}" if final else ""
    )
    path = "record by record" if args.one_by_one else "pod runs per batch"
    print(
        f"pods: {args.pods}  pod events: {pod_events}  function instances: {args.workers}"
        f"  batch: {args.batch} ({path})"
    )
    print(f"elapsed: {elapsed:.2f} s")
    print(f"events per second: {pod_events / elapsed:.1f}")
    print(f"DynamoDB write requests per pod event: {writes / pod_events:.3f} ({writes} writes)")
    print(f"DynamoDB requests by operation: {dict(sorted(calls.items()))}")
    print(f"write conflicts retried: {conflicts}")
    print(f"records reported failed: {failures}")
    print(f"final phase: {phase} ({ready})")
    return 0 if phase == "Running" and failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
