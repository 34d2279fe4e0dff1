"""Simulator throughput: simulated events per second, and the Philly week's wall time.

Run with `make bench-sim`. The Philly week (../shared/traces/philly-2017-10-02-week.csv
beside the repository, or the path given as the first argument) is replayed in the
`pod-per-gpu` mapping under each policy on the cluster of examples/philly-week.yaml.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import yaml
from muster.sim.engine import simulate
from muster.sim.scenario import load_builtin, parse_scenario

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = ROOT.parent / "shared" / "traces" / "philly-2017-10-02-week.csv"


def main(argv: list[str]) -> int:
    trace = Path(argv[1]) if len(argv) > 1 else DEFAULT_TRACE
    synthetic = load_builtin("synthetic")
    started = time.perf_counter()
    result = simulate(synthetic, "gang")
    wall = time.perf_counter() - started
    events = result.summary["simulatedEvents"]
    print(
        f"synthetic (2,000 jobs, gang): {events:,} simulated events in {wall:.2f} s "
        f"= {events / wall:,.0f} events/s"
    )
    if not trace.exists():
        print(f"Philly week: skipped, no trace at {trace}")
        return 0
    started = time.perf_counter()
    example = ROOT / "examples" / "philly-week.yaml"
    doc = yaml.safe_load(example.read_text())
    doc["trace"]["path"] = str(trace)
    scenario = parse_scenario(doc, base_dir=example.parent, name="philly-week")
    assert scenario.trace is not None and scenario.trace.mapping == "pod-per-gpu"
    loaded = time.perf_counter() - started
    print(
        f"Philly week: {len(scenario.workloads):,} jobs, "
        f"{sum(w.pods for w in scenario.workloads):,} pods, loaded in {loaded:.2f} s"
    )
    for policy in ("gang", "gang+block", "none"):
        started = time.perf_counter()
        result = simulate(scenario, policy)
        wall = time.perf_counter() - started
        events = result.summary["simulatedEvents"]
        print(
            f"Philly week, pod-per-gpu, {policy}: wall {wall:.2f} s, "
            f"{events:,} simulated events = {events / wall:,.0f} events/s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
