"""Benchmark: the control plane at scale under AWS's limits, in virtual time, on moto.

Gangs of 64, 1,024 and 4,096 pods (a Job, and a plain pod group) submitted,
admitted and started; 5,000 queued workloads on 500 nodes with one admission
pass admitting about 300; and the agent's snapshots of 10,000 running Jobs and
their 50,000 pods, showing nothing changed, reconciled in slices. What each
deployed handler runs on its SQS batch, as Lambda runs it (the stack's batch
sizes and batching windows, a few concurrent instances, each invocation under
its function's timeout), DynamoDB's limits and units modelled on the real
client, and a Kubernetes API stand-in (`muster.harness.scale`).

Prints, per scenario: DynamoDB reads and writes per pod event (and units), the
hottest item's write units per second, the largest item, Kubernetes calls per
pod event, the time from the last pod Ready to PodsReady, invocations and the
longest one, timeouts, throttled requests and conflicts, failed and
dead-lettered records, the admission passes' reads and longest duration, and
the reconciliation's invocations and time to be acted on. Times are virtual
(the modelled latencies), not moto's; each scenario's wall time on moto is shown.

    .venv/bin/python benchmarks/scale.py [--small] [--gangs 64,1024,4096] [--kinds Job,PodGroup]
                                         [--queued 5000] [--nodes 500] [--admit 300]
                                         [--running 10000] [--pods-each 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

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
    parser.add_argument(
        "--small", action="store_true", help="gangs of 16, 40 queued on 8 nodes, 40 running"
    )
    parser.add_argument("--gangs", default="64,1024,4096", help="gang sizes, comma-separated")
    parser.add_argument("--kinds", default="Job,PodGroup", help="Job and/or PodGroup")
    parser.add_argument("--queued", type=int, default=5000)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--admit", type=int, default=300, help="the quota, in 8-GPU workloads")
    parser.add_argument("--horizon", type=float, default=180.0, help="virtual seconds per gang")
    parser.add_argument("--running", type=int, default=10000, help="workloads reconciled")
    parser.add_argument("--pods-each", type=int, default=5, help="pods of each running workload")
    args = parser.parse_args(argv)
    if args.small:
        args.gangs, args.queued, args.nodes, args.admit, args.running = "16", 40, 8, 5, 40

    from moto import mock_aws
    from muster.core import Kind
    from muster.harness.scale import Budgets
    from muster.harness.scale_scenarios import gang, queue, reconcile

    from infra.constants import BATCH_SIZE, BATCHING_WINDOW_SECONDS, FUNCTION_TIMEOUT_SECONDS

    budgets = Budgets(FUNCTION_TIMEOUT_SECONDS, BATCH_SIZE, BATCHING_WINDOW_SECONDS)

    def show(r: Any, started: float) -> None:
        print(f"== {r.name} ({time.perf_counter() - started:.0f} s on moto)", flush=True)
        for label, value in r.rows():
            print(f"  {label + ':':36s} {value}", flush=True)

    for kind in (Kind(k) for k in args.kinds.split(",") if k):
        for pods in (int(n) for n in args.gangs.split(",") if n):
            started = time.perf_counter()
            with mock_aws():
                r = gang(kind, pods, horizon=args.horizon, pod_name="w" * 44, budgets=budgets)
            show(r, started)
    if args.queued:
        started = time.perf_counter()
        with mock_aws():
            r = queue(args.queued, args.nodes, admit=args.admit, budgets=budgets)
        show(r, started)
    if args.running:
        started = time.perf_counter()
        with mock_aws():
            r = reconcile(args.running, args.pods_each, budgets=budgets)
        show(r, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
