"""The control plane under injected faults: what the harness measures, over seeds.

Runs the functions' real record handlers, the ControlPlane and the sweeper on
in-memory queues and a model cluster in virtual time, with every port wrapped by
`muster.harness` (crashes between effects, conflicts, throttling, lost messages and
timers, early timers, redelivery while a first delivery runs, releases the API
server refuses for good, PutEvents entries throttled; a quarter of the workloads
are pod groups, run twice under their name), and prints the figures:
invariant violations, how workloads ended, what was injected and what the sweeper
had to send again.

    .venv/bin/python benchmarks/faults_aws.py [--seeds 5] [--workloads 40]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "layers")]

from muster.harness import FaultPlan  # noqa: E402
from muster.harness.driver import run_harness  # noqa: E402

FAULTS = {
    "crash": 0.02,
    "conflict": 0.05,
    "throttle": 0.03,
    "lose": 0.05,
    "early_timer": 0.2,
    "redeliver": 0.05,
    "refuse_admit": 0.05,  # of an attempt's release, every try of it
    "throttle_entry": 0.05,  # of a lifecycle event's PutEvents entry
}
POD_GROUPS = 0.25  # of the workloads: plain pod groups, each run twice under its name


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--workloads", type=int, default=40)
    args = parser.parse_args()
    print(f"fault rates per call: {json.dumps(FAULTS)}; pod groups: {POD_GROUPS:.0%}")
    totals: Counter[str] = Counter()
    injected: Counter[str] = Counter()
    started = time.perf_counter()
    for seed in range(1, args.seeds + 1):
        report = run_harness(
            FaultPlan(seed=seed, **FAULTS),
            workloads=args.workloads,
            seed=seed,
            pod_groups=POD_GROUPS,
        )
        s = report.summary()
        print(json.dumps({"seed": seed, **s}, sort_keys=True))
        for key in (
            "workloads",
            "finished",
            "deactivated",
            "quarantined",
            "unfinished",
            "violations",
            "healthyGangsDeactivated",
            "deliveries",
            "redeliveredWhileRunning",
            "crashesSurvived",
            "sweeps",
            "nothingWaitsForeverChecks",
            "sweeperResent",
        ):
            totals[key] += s[key]
        totals["deadLettered"] += sum(s["deadLettered"].values())
        totals["quotaExceeded"] += int(s["maxGpusAdmitted"] > s["gpuQuota"])
        injected.update(s["faultsInjected"])
    print(f"\n{args.seeds} runs in {time.perf_counter() - started:.1f} s")
    for key, value in totals.items():
        print(f"{key:28} {value}")
    print("faults injected:", ", ".join(f"{k} {v}" for k, v in sorted(injected.items())))
    return 1 if totals["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
