"""Gang scheduling with and without the capacity check, side by side (`make bench-fit`).

Three scenarios under `gang` (Kueue's defaults: quota only), `gang+block`
(`blockAdmission`) and `gang+fit` (`capacityCheck`):

- the built-in deadlock scenario (two gangs that deadlock on quota alone);
- the built-in synthetic scenario (healthy and broken gangs on a busy cluster);
- the contended Philly week (examples/philly-week-contended.yaml: the October
  2017 week on 32 nodes x 8 GPUs with no broken jobs, every job a gang of 1-GPU
  pods), and the same week with the trace's other mapping, `pods-of-8` (a job of
  n GPUs is ceil(n/8) pods of up to 8 GPUs, so a pod needs that many GPUs on one
  node); these need the trace (`MUSTER_TRACES`, the first argument, or a
  `shared/traces` folder beside the repository or above it; skipped without it).

For each: workloads finished and deactivated (and, of the deactivated, how many
were healthy), evictions, wasted GPU-hours (held by pods of gangs that were not
whole), queue delay p50/p95 (submission to first PodsReady) and utilization. It
prints a Markdown table and writes it, with every run's summary, to
`out/fit-compare/`.

    .venv/bin/python benchmarks/fit_compare.py [TRACES_DIR]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "layers")]

import yaml  # noqa: E402
from muster.sim.engine import simulate  # noqa: E402
from muster.sim.scenario import Scenario, load_builtin, parse_scenario  # noqa: E402
from simulate import find_traces, philly_week  # noqa: E402

POLICIES = ("gang", "gang+block", "gang+fit")


def pods_of_8(trace: Path) -> Scenario:
    """The contended week with 8-GPU pods: where a gang's pods land starts to matter."""
    path = ROOT / "examples" / "philly-week-contended.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["trace"]["path"] = str(trace)
    doc["trace"]["mapping"] = "pods-of-8"
    return parse_scenario(doc, base_dir=path.parent, name=f"{path.stem}-pods-of-8")


def hours(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 86400:
        return f"{seconds / 86400:.1f} d"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"


def healthy_deactivated(scenario: Scenario, events: list[dict[str, Any]]) -> int:
    broken = {w.name for w in scenario.workloads if w.never_ready}
    return sum(1 for e in events if e["event"] == "Deactivated" and e["workload"] not in broken)


def row(name: str, policy: str, scenario: Scenario) -> tuple[list[str], dict[str, Any]]:
    result = simulate(scenario, policy)
    s = result.summary
    delay = s["queueDelaySeconds"]
    cells = [
        name,
        f"`{policy}`",
        f"{s['finished']}/{s['workloads']}",
        f"{s['deactivated']} ({healthy_deactivated(scenario, result.events)})",
        str(s["evictions"]),
        f"{s['wastedGpuHours']:.1f}",
        f"{s['wastedGpuHours'] / max(1, s['finished']):.4f}",
        hours(delay["p50"]),
        hours(delay["p95"]),
        f"{s['utilization'] * 100:.1f}%",
    ]
    return cells, s


def main(argv: list[str]) -> int:
    scenarios: list[tuple[str, Scenario]] = [
        ("deadlock", load_builtin("deadlock")),
        ("synthetic", load_builtin("synthetic")),
    ]
    trace = find_traces(argv) / "philly-2017-10-02-week.csv"
    if trace.exists():
        scenarios.append(
            ("Philly week, contended", philly_week("philly-week-contended.yaml", trace))
        )
        scenarios.append(("same, pods of 8 GPUs", pods_of_8(trace)))
    else:
        print(f"(no trace at {trace}: the Philly week is skipped)")
    header = [
        "scenario",
        "policy",
        "finished",
        "deactivated (healthy)",
        "evictions",
        "wasted GPU-h",
        "per finished job",
        "queue delay p50",
        "p95",
        "utilization",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    summaries: dict[str, dict[str, Any]] = {}
    for name, scenario in scenarios:
        for policy in POLICIES:
            cells, summary = row(name, policy, scenario)
            lines.append("| " + " | ".join(cells) + " |")
            summaries[f"{name} / {policy}"] = summary
            print(lines[-1], flush=True)
    write_out("fit-compare", lines, summaries)
    return 0


def write_out(name: str, lines: list[str], summaries: dict[str, Any]) -> None:
    """The table and every run's summary under out/NAME/, and the table once more."""
    out = ROOT / "out" / name
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text("\n".join(lines) + "\n")
    (out / "summaries.json").write_text(json.dumps(summaries, indent=2, sort_keys=True) + "\n")
    print()
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
