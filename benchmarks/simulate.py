"""Simulator throughput against its targets (`make bench-sim`).

- the built-in synthetic scenario under `gang`: simulated events per second;
- the Philly week (philly-2017-10-02-week.csv) under every policy, on the
  80-node cluster of examples/philly-week.yaml and on the contended 32-node
  cluster of examples/philly-week-contended.yaml (no broken jobs, queues of
  thousands): wall time and events per second;
- a month of a 500-node cluster from the synthetic generator
  (examples/synthetic-month-500.yaml): wall time and peak memory;
- with `--full PATH`, a whole Philly CSV (the full trace's 82,247 jobs) under
  `gang` on the 80-node cluster of examples/philly-week.yaml, until 14 days after
  its last submission: CPU time and peak memory.

Each line gives the CPU time and the wall time; the targets are judged on the CPU
time, which does not grow with what else the machine runs. Runs are made without
a record (`simulate(record=False)`: no event log, no GPU-use samples), as a caller
that reads only the summary makes them; each line also gives the process's peak
resident memory so far (runs go from small to large, so the last is the largest's).

The traces are looked for in `MUSTER_TRACES`, the first argument, or the first
`shared/traces` folder beside the repository or above it; without them the Philly
lines are skipped. `--quick` runs only the synthetic scenario and the Philly week
under `gang`.
"""

from __future__ import annotations

import math
import resource
import sys
import time
from pathlib import Path

import yaml
from muster.sim.engine import POLICIES, simulate
from muster.sim.locate import traces_dir
from muster.sim.scenario import Scenario, load_builtin, load_scenario, parse_scenario

ROOT = Path(__file__).resolve().parent.parent
TARGET_EVENTS_PER_SECOND = 100_000
TARGET_WEEK_SECONDS = 10.0
TARGET_MONTH_SECONDS = 120.0
TARGET_FULL_SECONDS = 360.0
TARGET_PEAK_MB = 1024.0  # the month, and the full trace


def peak_mb() -> float:
    """The process's peak resident memory so far, in MB (Linux reports KB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def find_traces(argv: list[str]) -> Path:
    if len(argv) > 1 and not argv[1].startswith("--"):
        return Path(argv[1])
    return traces_dir(ROOT) or ROOT.parent / "shared" / "traces"


def philly_week(example: str, trace: Path) -> Scenario:
    path = ROOT / "examples" / example
    doc = yaml.safe_load(path.read_text())
    doc["trace"]["path"] = str(trace)
    return parse_scenario(doc, base_dir=path.parent, name=path.stem)


def philly_full(trace: Path) -> Scenario:
    """A whole Philly CSV on the week's cluster, until 14 days after its last submission."""
    scenario = philly_week("philly-week.yaml", trace)
    last = max(w.submit_at for w in scenario.workloads)
    path = ROOT / "examples" / "philly-week.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["trace"]["path"] = str(trace)
    doc["until"] = f"{math.ceil(last / 86400) + 14}d"
    return parse_scenario(doc, base_dir=path.parent, name=trace.stem)


def run(
    label: str,
    scenario: Scenario,
    policy: str,
    target: float | None = None,
    memory_target: float | None = None,
) -> float:
    """One run; returns events per CPU second.

    Both the wall time and the process's CPU time are printed: on a shared machine
    the wall time grows with the other processes' load while the CPU time is what
    the run costs, close to its wall time on an idle machine. Targets are judged on
    the CPU time.
    """
    started, cpu_started = time.perf_counter(), time.process_time()
    result = simulate(scenario, policy, record=False)
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    events = result.summary["simulatedEvents"]
    rate = events / cpu
    verdict = ""
    if target is not None:
        verdict = "  (target < {:.0f} s: {})".format(target, "met" if cpu < target else "MISSED")
    peak = peak_mb()
    memory = f"{peak:,.0f} MB peak"
    if memory_target is not None:
        memory += " (target < {:,.0f} MB: {})".format(
            memory_target, "met" if peak < memory_target else "MISSED"
        )
    print(
        f"{label} [{policy}]: {events:,} simulated events, {cpu:.2f} s CPU ({wall:.2f} s wall) "
        f"= {rate:,.0f} events per CPU second{verdict}; {memory}",
        flush=True,
    )
    return rate


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    rate = run("synthetic (2,000 jobs)", load_builtin("synthetic"), "gang")
    print(
        f"  target {TARGET_EVENTS_PER_SECOND:,} events/s: "
        f"{'met' if rate >= TARGET_EVENTS_PER_SECOND else 'MISSED'}"
    )
    week = find_traces(argv) / "philly-2017-10-02-week.csv"
    if not week.exists():
        print(f"Philly week: skipped, no trace at {week}")
    else:
        for example in ("philly-week.yaml", "philly-week-contended.yaml"):
            scenario = philly_week(example, week)
            print(
                f"{example}: {len(scenario.workloads):,} jobs, "
                f"{sum(w.pods for w in scenario.workloads):,} pods, "
                f"{scenario.nodes} nodes x {scenario.gpus_per_node} GPUs"
            )
            for policy in ("gang",) if quick else POLICIES:
                rate = run(f"  {example}", scenario, policy, TARGET_WEEK_SECONDS)
                if policy == "gang" and example == "philly-week.yaml":
                    print(
                        f"  target {TARGET_EVENTS_PER_SECOND:,} events/s under gang: "
                        f"{'met' if rate >= TARGET_EVENTS_PER_SECOND else 'MISSED'}"
                    )
            if quick:
                break
    if not quick:
        started = time.perf_counter()
        month = load_scenario(ROOT / "examples" / "synthetic-month-500.yaml")
        print(
            f"synthetic-month-500: {len(month.workloads):,} jobs on {month.nodes} nodes "
            f"generated in {time.perf_counter() - started:.1f} s"
        )
        run("  synthetic-month-500", month, "gang", TARGET_MONTH_SECONDS, TARGET_PEAK_MB)
    if "--full" in argv:
        full = philly_full(Path(argv[argv.index("--full") + 1]))
        print(f"{full.name}: {len(full.workloads):,} jobs until {full.until / 86400:.0f} days")
        run(f"  {full.name}", full, "gang", TARGET_FULL_SECONDS, TARGET_PEAK_MB)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
