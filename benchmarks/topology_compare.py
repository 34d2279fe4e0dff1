"""`gang+fit` with and without topology on Philly weeks of 8-GPU pods (`make bench-topology`).

The contended cluster of examples/philly-week-contended.yaml (32 nodes x 8 GPUs, no
broken jobs) with the trace's `pods-of-8` mapping (a job of n GPUs is ceil(n/8)
pods of up to 8 GPUs), its nodes in network blocks: 16 nodes per
network-node-layer-1 block, 8 per layer 2, 4 per layer 3 (32 GPUs, the largest
gang of the first week). Each week runs under

- `gang` (quota only) and `gang+fit` with no topology asked for: where gangs land
  when nothing keeps them together;
- `gang+fit`, the multi-node gangs asking `required=network-node-layer-3` (those
  that fit one block; a larger one could never be admitted inside one);
- `gang+fit`, every multi-node gang asking `preferred=network-node-layer-3`.

For each: workloads finished, evictions, multi-node gangs (more GPUs than a node
has), how many ask and how many started (reached PodsReady), their whole runs (a
gang evicted and admitted again runs again) and the share of those whose pods the
simulated cluster bound inside one block at each level, the queue delay of the
multi-node gangs that started and of every job (submission to first PodsReady),
and utilization. It prints a Markdown table and writes it, with every run's summary, to
`out/topology-compare/`. Needs the traces (`MUSTER_TRACES`, the first argument,
or a `shared/traces` folder beside the repository or above it).

    .venv/bin/python benchmarks/topology_compare.py [TRACES_DIR] [--weeks N] [--limit JOBS]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "layers")]

import yaml  # noqa: E402
from fit_compare import hours, write_out  # noqa: E402
from muster.sim.engine import simulate  # noqa: E402
from muster.sim.scenario import Scenario, parse_scenario  # noqa: E402
from simulate import find_traces  # noqa: E402

WEEKS = ("philly-2017-10-02-week.csv", "philly-2017-10-23-week.csv", "philly-2017-11-13-week.csv")
LEVELS = ("network-node-layer-1", "network-node-layer-2", "network-node-layer-3")
BLOCKS = {"network-node-layer-1": 16, "network-node-layer-2": 8, "network-node-layer-3": 4}
# (label, policy, what the multi-node gangs ask for)
VARIANTS = (
    ("none asked", "gang", ""),
    ("none asked", "gang+fit", ""),
    ("required layer 3", "gang+fit", "required=network-node-layer-3"),
    ("preferred layer 3", "gang+fit", "preferred=network-node-layer-3"),
)


def week_in_blocks(trace: Path, request: str, limit: int | None) -> Scenario:
    """The contended week, 8-GPU pods, its nodes in blocks; `request` on its multi-node gangs."""
    path = ROOT / "examples" / "philly-week-contended.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["cluster"]["topology"] = dict(BLOCKS)
    doc["settings"] = dict(doc.get("settings") or {}) | {"topologyLevels": list(LEVELS)}
    doc["trace"] |= {"path": str(trace), "mapping": "pods-of-8"}
    if request:
        doc["trace"]["topology"] = request
    if limit:
        doc["trace"]["limit"] = limit
    return parse_scenario(doc, base_dir=path.parent, name=f"{trace.stem}-blocks")


def share(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f}%"


def row(week: str, label: str, policy: str, scenario: Scenario) -> tuple[list[str], dict[str, Any]]:
    s = simulate(scenario, policy).summary
    topo = s["topology"]
    inside = topo["withinOneBlock"]
    multi, delay = topo["multiNodeQueueDelaySeconds"], s["queueDelaySeconds"]
    cells = [
        week,
        f"`{policy}`, {label}",
        f"{s['finished']}/{s['workloads']}",
        str(s["evictions"]),
        f"{topo['multiNodeGangs']} ({topo['asked']})",
        str(topo["started"]),
        str(topo["placements"]),
        *(share(inside[level]) for level in reversed(LEVELS)),
        hours(multi["p50"]),
        hours(multi["p95"]),
        hours(delay["p50"]),
        hours(delay["p95"]),
        f"{s['utilization'] * 100:.1f}%",
    ]
    return cells, s


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="?", help="the folder holding the Philly weeks")
    parser.add_argument("--weeks", type=int, default=len(WEEKS), help="how many weeks (1-3)")
    parser.add_argument("--limit", type=int, default=0, help="only each week's first N jobs")
    args = parser.parse_args(argv[1:])
    folder = Path(args.traces) if args.traces else find_traces(argv[:1])
    header = [
        "week",
        "policy, topology asked",
        "finished",
        "evictions",
        "multi-node gangs (asking)",
        "started",
        "their whole runs",
        "in one layer-3 block",
        "layer 2",
        "layer 1",
        "multi-node delay p50",
        "p95",
        "all jobs' delay p50",
        "p95",
        "utilization",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    summaries: dict[str, dict[str, Any]] = {}
    for name in WEEKS[: args.weeks]:
        trace = folder / name
        if not trace.exists():
            print(f"(no trace at {trace}: skipped)")
            continue
        week = name.removeprefix("philly-").removesuffix("-week.csv")
        for label, policy, request in VARIANTS:
            scenario = week_in_blocks(trace, request, args.limit or None)
            cells, summary = row(week, label, policy, scenario)
            lines.append("| " + " | ".join(cells) + " |")
            summaries[f"{week} / {policy} / {label}"] = summary
            print(lines[-1], flush=True)
    write_out("topology-compare", lines, summaries)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
