"""Who waits: queue delay by gang size, on every Philly week there is (`make bench-delay`).

Two rules that cut waste also lengthen the queue of the many small jobs on some
weeks: `gang+fit` (the capacity check, pods of 8 GPUs) against `gang`, and
`workloadFaults` against `gang` on a cluster with 5% broken jobs. A single p50 or
p95 over all jobs hides who pays and who gains, so this prints, for each week and
each pair of runs, the queue delay (submission to first PodsReady) of each class
of gang by its GPUs, beside the overall figures:

- `fit`: examples/philly-week-contended.yaml with `mapping: pods-of-8` (32 nodes x
  8 GPUs), under `gang`, `gang+fit` and `gang+fit` with `nodePacking: true` (a
  gang that fits on one node is admitted onto the fullest that holds it);
- `faults`: 48 nodes x 8 GPUs, a pod per GPU, `timeout: 5m`, 5% broken jobs
  (CrashLoopBackOff 0.5, ImagePullBackOff 0.2, NotReady 0.3), node MTBF 2,000 h,
  30 days, under `gang`, `gang` with `workloadFaults: {limitCount: 2,
  evictAfter: 2m}`, and the same with `sizeHandicap: 12h` (each GPU beyond a
  gang's first puts it half a day later in queue order).

The traces are looked for as benchmarks/simulate.py does (`MUSTER_TRACES`, the
first argument, or a `shared/traces` folder above the repository); without them
it says so and ends. `--jobs N` plays only each week's first N jobs (the test
command's small run, with `--weeks 1`: the first week only); `--only fit|faults`
runs one of the pairs.

    .venv/bin/python benchmarks/delay_by_size.py [TRACES_DIR] [--jobs N] [--weeks N] [--only fit|faults]
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "layers")]

import yaml  # noqa: E402
from failure_aware import find_traces  # noqa: E402
from muster.sim.engine import simulate  # noqa: E402
from muster.sim.figures import format_seconds  # noqa: E402
from muster.sim.scenario import Scenario, parse_scenario  # noqa: E402

WEEKS = ("philly-2017-10-02-week.csv", "philly-2017-10-23-week.csv", "philly-2017-11-13-week.csv")
CLASSES = ((1, "1 GPU"), (4, "2-4 GPUs"), (8, "5-8 GPUs"), (32, "9-32 GPUs"), (None, "over 32"))
FAULTS = {"limitCount": 2, "evictAfter": "2m"}
HANDICAP = "12h"  # `sizeHandicap` of the third faults run


def fit_scenario(trace: Path, jobs: int | None, *, packing: bool = False) -> Scenario:
    path = ROOT / "examples" / "philly-week-contended.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["trace"].update(path=str(trace), mapping="pods-of-8")
    if packing:
        doc.setdefault("settings", {})["nodePacking"] = True
    if jobs is not None:
        doc["trace"]["limit"] = jobs
    return parse_scenario(doc, base_dir=path.parent, name=f"{trace.stem}-pods-of-8")


def faults_scenario(
    trace: Path, jobs: int | None, *, workload_faults: bool, handicap: str | None = None
) -> Scenario:
    settings: dict[str, Any] = {"timeout": "5m"}
    if workload_faults:
        settings["workloadFaults"] = FAULTS
    if handicap is not None:
        settings["sizeHandicap"] = handicap
    doc: dict[str, Any] = {
        "cluster": {"nodes": 48, "gpusPerNode": 8},
        "settings": settings,
        "until": "30d",
        "seed": 1,
        "trace": {
            "path": str(trace),
            "mapping": "pod-per-gpu",
            "brokenFraction": 0.05,
            "brokenModes": {"CrashLoopBackOff": 0.5, "ImagePullBackOff": 0.2, "NotReady": 0.3},
            "nodeMtbfHours": 2000,
            "repairAfter": "4h",
        },
    }
    if jobs is not None:
        doc["trace"]["limit"] = jobs
    return parse_scenario(doc, base_dir=ROOT, name=f"{trace.stem}-faults")


def size_class(gpus: int) -> str:
    for bound, label in CLASSES:
        if bound is None or gpus <= bound:
            return label
    raise AssertionError("unreachable")


def delays_by_class(scenario: Scenario, events: Iterable[dict[str, Any]]) -> dict[str, list[float]]:
    """Each healthy workload's queue delay (submission to its first PodsReady), by class."""
    specs = {w.name: w for w in scenario.workloads}
    seen: set[str] = set()
    found: dict[str, list[float]] = {label: [] for _, label in CLASSES}
    for e in events:
        name = e.get("workload")
        if e["event"] != "PodsReady" or name in seen or name not in specs:
            continue
        seen.add(name)
        w = specs[name]
        if not w.never_ready:
            found[size_class(w.gpus)].append(e["t"] - w.submit_at)
    return found


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(
    scenario: Scenario, policy: str, label: str
) -> tuple[dict[str, Any], dict[str, list[float]]]:
    started = time.process_time()
    result = simulate(scenario, policy)
    print(
        f"  {scenario.name} {label}: {time.process_time() - started:.0f} s CPU",
        file=sys.stderr,
        flush=True,
    )
    return result.summary, delays_by_class(scenario, result.events)


def pair_table(week: str, pair: str, runs: list[tuple[str, Scenario, str]]) -> list[str]:
    results = [(label, *run(sc, policy, label)) for label, sc, policy in runs]
    labels = [label for label, _, _ in results]
    lines = [f"### {week}, {pair}", ""]
    lines.append("| gangs | " + " | ".join(f"{x} p50 | {x} p95" for x in labels) + " |")
    lines.append("|---|" + "---:|---:|" * len(labels))
    delay = [s["queueDelaySeconds"] for _, s, _ in results]
    overall = [f"{format_seconds(d['p50'] or 0)} | {format_seconds(d['p95'] or 0)}" for d in delay]
    counts = ", ".join(
        f"{s['evictions']:,} evictions, {s['wastedGpuHours']:,.0f} wasted GPU-h"
        for _, s, _ in results
    )
    lines.append(f"| all ({counts}) | " + " | ".join(overall) + " |")
    for _, label in CLASSES:
        cells = []
        for _, _, by in results:
            values = by[label]
            cells.append(
                f"{format_seconds(statistics.median(values))} | {format_seconds(quantile(values, 0.95))}"
                if values
                else "- | -"
            )
        n = max(len(by[label]) for _, _, by in results)
        if n:
            lines.append(f"| {label} (n={n:,}) | " + " | ".join(cells) + " |")
    return [*lines, ""]


def main(argv: list[str]) -> int:
    traces = find_traces(argv)
    jobs = int(argv[argv.index("--jobs") + 1]) if "--jobs" in argv else None
    only = argv[argv.index("--only") + 1] if "--only" in argv else None
    weeks = [traces / week for week in WEEKS if (traces / week).exists()]
    if "--weeks" in argv:
        weeks = weeks[: int(argv[argv.index("--weeks") + 1])]
    if not weeks:
        print(f"skipped: no Philly week trace in {traces}")
        return 0
    for trace in weeks:
        if only in (None, "fit"):
            sc = fit_scenario(trace, jobs)
            packed = fit_scenario(trace, jobs, packing=True)
            lines = pair_table(
                trace.stem,
                "pods of 8 GPUs",
                [
                    ("gang", sc, "gang"),
                    ("gang+fit", sc, "gang+fit"),
                    ("gang+fit+nodePacking", packed, "gang+fit"),
                ],
            )
            print("\n".join(lines), flush=True)
        if only in (None, "faults"):
            plain = faults_scenario(trace, jobs, workload_faults=False)
            aware = faults_scenario(trace, jobs, workload_faults=True)
            ordered = faults_scenario(trace, jobs, workload_faults=True, handicap=HANDICAP)
            lines = pair_table(
                trace.stem,
                "5% broken jobs",
                [
                    ("gang", plain, "gang"),
                    ("workloadFaults", aware, "gang"),
                    (f"workloadFaults+sizeHandicap {HANDICAP}", ordered, "gang"),
                ],
            )
            print("\n".join(lines), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
