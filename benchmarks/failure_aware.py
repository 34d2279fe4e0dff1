"""Failure-aware retry on the Philly week with 5% broken jobs (`make bench-faults-sim`).

examples/philly-week-broken.yaml (80 nodes x 8 GPUs, one 1-GPU pod per GPU, 5% of
the jobs broken, their failure modes drawn from the default mix) under `none`,
`gang` (Kueue's defaults: no requeuing limit), `gang+block`, and `gang` with
`workloadFaults: {limitCount: 2, evictAfter: 2m}`. For each: wasted GPU-hours (in
all, and split by the failure mode of the workload that wasted them), evictions
(and by the diagnosis of their pods), queue delay and JCT p50/p95, workloads
deactivated (healthy ones apart), and the CPU time of the run.

Then the goals: with workloadFaults, the GPU-hours wasted on broken jobs whose
failure Kubernetes shows (crash loops, image pulls) fall by at least 90% against
plain `gang`, queue delay p50/p95 is no worse, and no healthy job is deactivated.
What remains (jobs that hang without a reason) is printed, not hidden.

The trace is looked for as `benchmarks/simulate.py` does (`MUSTER_TRACES`, the
first argument, or a `shared/traces` folder above the repository). `--json FILE`
also writes every summary; `--jobs N` plays only the trace's first N jobs (the
test command's small run).
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml
from muster.core import merge_settings
from muster.sim.engine import simulate
from muster.sim.scenario import Scenario, parse_scenario

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "philly-week-broken.yaml"
FAULTS = {"workloadFaults": {"limitCount": 2, "evictAfter": "2m"}}
VISIBLE = ("CrashLoopBackOff", "ImagePullBackOff")
RUNS = (
    ("none", "none", False),
    ("gang", "gang", False),
    ("gang+block", "gang+block", False),
    ("gang+workloadFaults", "gang", True),
)


def find_traces(argv: list[str]) -> Path:
    """Where the traces are, as benchmarks/simulate.py looks for them."""
    if len(argv) > 1 and not argv[1].startswith("--"):
        return Path(argv[1])
    if os.environ.get("MUSTER_TRACES"):
        return Path(os.environ["MUSTER_TRACES"])
    for parent in ROOT.parents:
        if (parent / "shared" / "traces").is_dir():
            return parent / "shared" / "traces"
    return ROOT.parent / "shared" / "traces"


def scenario(trace: Path, jobs: int | None = None) -> Scenario:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["trace"]["path"] = str(trace)
    if jobs is not None:
        doc["trace"]["limit"] = jobs
    return parse_scenario(doc, base_dir=EXAMPLE.parent, name=EXAMPLE.stem)


def with_faults(sc: Scenario) -> Scenario:
    return replace(sc, settings=merge_settings(sc.settings, FAULTS))


def run(label: str, sc: Scenario, policy: str) -> dict[str, Any]:
    started = time.process_time()
    summary = simulate(sc, policy).summary
    summary["cpuSeconds"] = round(time.process_time() - started, 1)
    print(f"  {label}: {summary['cpuSeconds']} s CPU", file=sys.stderr, flush=True)
    return summary


def hours(x: float) -> str:
    return f"{x:,.0f}"


def seconds(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x / 60:,.0f} min" if x < 36000 else f"{x / 3600:,.1f} h"


def table(results: dict[str, dict[str, Any]]) -> str:
    labels = list(results)
    rows: list[tuple[str, list[str]]] = []

    def row(name: str, get: Any) -> None:
        rows.append((name, [get(results[label]) for label in labels]))

    waste = "wastedGpuHoursByFailure"
    row("wasted GPU-hours", lambda s: hours(s["wastedGpuHours"]))
    for mode in (*VISIBLE, "NotReady"):
        row(f"  of which {mode} jobs", lambda s, m=mode: hours(s[waste].get(m, 0.0)))
    row("  of which healthy jobs", lambda s: hours(s[waste].get("healthy", 0.0)))
    row("evictions", lambda s: f"{s['evictions']:,}")
    row(
        "  of which WorkloadFault",
        lambda s: f"{s['evictionsByClass'].get('WorkloadFault', 0):,}",
    )
    row("queue delay p50", lambda s: seconds(s["queueDelaySeconds"]["p50"]))
    row("queue delay p95", lambda s: seconds(s["queueDelaySeconds"]["p95"]))
    row("JCT p50", lambda s: seconds(s["jctSeconds"]["p50"]))
    row("JCT p95", lambda s: seconds(s["jctSeconds"]["p95"]))
    row("deactivated (healthy)", lambda s: f"{s['deactivated']:,} ({s['deactivatedHealthy']})")
    row("finished", lambda s: f"{s['finished']:,}")
    row("CPU seconds", lambda s: f"{s['cpuSeconds']}")
    lines = ["| | " + " | ".join(f"`{label}`" for label in labels) + " |"]
    lines.append("|---|" + "---:|" * len(labels))
    lines += [f"| {name} | " + " | ".join(cells) + " |" for name, cells in rows]
    return "\n".join(lines)


def goals(results: dict[str, dict[str, Any]]) -> list[str]:
    gang, faults = results["gang"], results["gang+workloadFaults"]
    waste = "wastedGpuHoursByFailure"
    before = sum(gang[waste].get(m, 0.0) for m in VISIBLE)
    after = sum(faults[waste].get(m, 0.0) for m in VISIBLE)
    cut = 1 - after / before if before else 0.0
    delay = all(
        (faults["queueDelaySeconds"][q] or 0) <= (gang["queueDelaySeconds"][q] or 0)
        for q in ("p50", "p95")
    )
    return [
        f"visible failures' wasted GPU-hours: {before:,.0f} -> {after:,.0f} "
        f"({cut:.1%} less; goal at least 90%: {'met' if cut >= 0.9 else 'MISSED'})",
        f"queue delay p50/p95 no worse than gang: {'met' if delay else 'MISSED'}",
        f"healthy jobs deactivated: {faults['deactivatedHealthy']} "
        f"(goal 0: {'met' if faults['deactivatedHealthy'] == 0 else 'MISSED'})",
        f"left (jobs that hang without a reason, NotReady): "
        f"{faults[waste].get('NotReady', 0.0):,.0f} GPU-hours wasted, as under gang "
        f"({gang[waste].get('NotReady', 0.0):,.0f})",
    ]


def main(argv: list[str]) -> int:
    trace = find_traces(argv) / "philly-2017-10-02-week.csv"
    if not trace.exists():
        print(f"skipped: no Philly week trace at {trace}")
        return 0
    sc = scenario(trace, int(argv[argv.index("--jobs") + 1]) if "--jobs" in argv else None)
    broken = sum(1 for w in sc.workloads if w.never_ready)
    print(
        f"{EXAMPLE.name}: {len(sc.workloads):,} jobs ({broken} broken), "
        f"{sc.nodes} nodes x {sc.gpus_per_node} GPUs",
        file=sys.stderr,
    )
    results: dict[str, dict[str, Any]] = {}
    for label, policy, faults in RUNS:
        results[label] = run(label, with_faults(sc) if faults else sc, policy)
    print(table(results))
    print()
    for line in goals(results):
        print(f"- {line}")
    if "--json" in argv:
        out = Path(argv[argv.index("--json") + 1])
        out.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
