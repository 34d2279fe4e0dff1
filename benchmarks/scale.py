"""Benchmark: the control plane at scale under AWS's limits, in virtual time, on moto.

Gangs of 64, 1,024 and 4,096 pods (a Job, and a plain pod group) submitted,
admitted and started, and 5,000 queued workloads on 500 nodes with one admission
pass admitting about 300: the functions' record processing as Lambda runs it
(SQS batches of the stack's batch sizes, a few concurrent instances, each
invocation under its function's timeout), DynamoDB's limits and units modelled
on the real client, and a Kubernetes API stand-in (`muster.harness.scale`).

Prints, per scenario: DynamoDB reads and writes per pod event (and units), the
hottest item's write units per second, the largest item, Kubernetes calls per
pod event, the time from the last pod Ready to PodsReady, invocations and the
longest one, timeouts, throttled requests and conflicts, failed and
dead-lettered records, and the admission passes' reads and longest duration.
Times are virtual (the modelled latencies), not moto's.

    .venv/bin/python benchmarks/scale.py [--small] [--gangs 64,1024,4096] [--kinds Job,PodGroup]
                                         [--queued 5000] [--nodes 500] [--admit 300]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "layers")]

os.environ.update(
    {
        "AWS_ACCESS_KEY_ID": "benchmark",
        "AWS_SECRET_ACCESS_KEY": "benchmark",
        "AWS_DEFAULT_REGION": "us-east-1",
        "LOG_LEVEL": "CRITICAL",
        "POWERTOOLS_METRICS_DISABLED": "true",
    }
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true", help="gangs of 16, 40 queued on 8 nodes")
    parser.add_argument("--gangs", default="64,1024,4096", help="gang sizes, comma-separated")
    parser.add_argument("--kinds", default="Job,PodGroup", help="Job and/or PodGroup")
    parser.add_argument("--queued", type=int, default=5000)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--admit", type=int, default=300, help="the quota, in 8-GPU workloads")
    parser.add_argument("--horizon", type=float, default=180.0, help="virtual seconds per gang")
    args = parser.parse_args(argv)
    if args.small:
        args.gangs, args.queued, args.nodes, args.admit = "16", 40, 8, 5

    from moto import mock_aws
    from muster.core import Kind
    from muster.harness.scale import Budgets
    from muster.harness.scale_scenarios import gang, queue

    from infra.constants import BATCH_SIZE, BATCHING_WINDOW_SECONDS, FUNCTION_TIMEOUT_SECONDS

    budgets = Budgets(FUNCTION_TIMEOUT_SECONDS, BATCH_SIZE, BATCHING_WINDOW_SECONDS)
    reports = []
    for kind in (Kind(k) for k in args.kinds.split(",") if k):
        for pods in (int(n) for n in args.gangs.split(",") if n):
            started = time.perf_counter()
            with mock_aws():
                r = gang(kind, pods, horizon=args.horizon, pod_name="w" * 44, budgets=budgets)
            reports.append((r, time.perf_counter() - started))
    if args.queued:
        started = time.perf_counter()
        with mock_aws():
            r = queue(args.queued, args.nodes, admit=args.admit, budgets=budgets)
        reports.append((r, time.perf_counter() - started))
    for r, wall in reports:
        print(f"== {r.name} ({wall:.0f} s on moto)")
        for label, value in r.rows():
            print(f"  {label + ':':36s} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
