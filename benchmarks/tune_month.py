"""The tuner on a month of a 500-node cluster: 27 settings, with and without pruning
(`make bench-tune-month`).

The grid is `timeout` 2m, 5m, 15m x `requeuingStrategy.backoffLimitCount` unset, 3,
10 x `requeuingStrategy.backoffMaxSeconds` 600, 3600, 14400 on
examples/synthetic-month-500.yaml (240,000 synthetic jobs, 2% broken, node faults),
one seed, beside the baselines and plain Kubernetes, in a pool of `--jobs`
processes (default: the cores). It prints for each run the wall time and the CPU
time, the settings stopped as dominated and where, and whether both recommend the
same setting with the same figure.

`--workloads N` and `--days D` shrink the month (the test command's small run:
`--workloads 1500 --days 2`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "benchmarks")]

import yaml  # noqa: E402
from muster.sim.scenario import Scenario, parse_scenario  # noqa: E402
from muster.sim.tune_ranking import OBJECTIVES  # noqa: E402
from tune import _option, report_pruned, same_recommendation, timed  # noqa: E402

EXAMPLE = ROOT / "examples" / "synthetic-month-500.yaml"
GRID = [
    "timeout=2m,5m,15m",
    "requeuingStrategy.backoffLimitCount=unset,3,10",
    "requeuingStrategy.backoffMaxSeconds=600,3600,14400",
]


def month(workloads: int | None, days: int | None) -> Scenario:
    doc = yaml.safe_load(EXAMPLE.read_text())
    if workloads is not None:
        doc["trace"]["synthetic"]["jobs"] = workloads
    if days is not None:
        doc["until"] = f"{days}d"
    return parse_scenario(doc, base_dir=EXAMPLE.parent, name=EXAMPLE.stem)


def main(argv: list[str]) -> int:
    jobs = _option(argv, "--jobs", os.cpu_count() or 1) or 1
    scenario = month(_option(argv, "--workloads", None), _option(argv, "--days", None))
    print(
        f"muster tune on {EXAMPLE.name} ({len(scenario.workloads):,} workloads, "
        f"{scenario.nodes} nodes), 27 settings beside the baselines and none, "
        f"{jobs} processes; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores",
        flush=True,
    )
    full, full_wall, full_cpu = timed([scenario], jobs, None, GRID)
    print(
        f"without pruning: {full_wall:.1f} s wall, {full_cpu:.1f} s CPU, {len(full.runs) + 1} runs",
        flush=True,
    )
    pruned, pruned_wall, pruned_cpu = timed([scenario], jobs, "wasted", GRID)
    report_pruned(pruned, pruned_wall, pruned_cpu, full, full_wall, full_cpu)
    return 0 if same_recommendation([full, pruned], OBJECTIVES["wasted"], "on one seed") else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
