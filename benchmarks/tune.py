"""The tuner's time on the Philly week, with and without pruning (`make bench-tune`).

The docs' grid (docs/simulator.md, "Choosing settings"): `timeout` 2m, 5m, 15m x
`requeuingStrategy.backoffLimitCount` unset, 3, 10 on examples/philly-week.yaml
(80 nodes of 8 GPUs, one 1-GPU pod per GPU, 2% broken jobs, node faults), on
three seeds, beside the baselines and plain Kubernetes, in a pool of `--jobs`
processes (default: the cores). It runs twice, pruned and not, and prints for
each the wall time and the CPU time (this process and its pool), the runs
stopped as dominated and where, and whether the two recommend the same setting
with the same figures. CPU time is what a run costs whatever else the machine
runs; the wall time is printed beside it with the load average.

It runs the grid a third time as `muster tune --on aws` prunes, in-process: two
batches whose items share nothing while they run (plain Kubernetes and the
baselines, then the grid with the bound they set, `run_in_phases`), and prints
the same figures for it. Before any run it synthesizes the stack with the tuner
(`python app.py -c muster:tuner=true`, as a user does) and prints the
Distributed Map's `MaxConcurrency` read from the state machine's definition in
the template, with how many waves of items each of the map's executions takes.

The trace is looked for in `MUSTER_TRACES`, the first argument, or the first
`shared/traces` folder beside the repository or above it. `--limit N` plays
only the trace's first N jobs and `--seeds K` runs K seeds (the test command's
small run: `--limit 500 --seeds 1`).
"""

from __future__ import annotations

import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from muster.sim.locate import traces_dir
from muster.sim.scenario import Scenario, parse_scenario
from muster.sim.tune_grid import Tuning, assemble, parse_grid, plan_grid, run_grid
from muster.sim.tune_pool import run_in_phases, run_tasks
from muster.sim.tune_ranking import OBJECTIVES, rank

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "philly-week.yaml"
GRID = ["timeout=2m,5m,15m", "requeuingStrategy.backoffLimitCount=unset,3,10"]


def find_traces(argv: list[str]) -> Path:
    if len(argv) > 1 and not argv[1].startswith("--"):
        return Path(argv[1])
    return traces_dir(ROOT) or ROOT.parent / "shared" / "traces"


def _option(argv: list[str], name: str, default: int | None) -> int | None:
    if name in argv:
        return int(argv[argv.index(name) + 1])
    return default


def scenarios(trace_dir: Path, limit: int | None, seeds: int) -> list[Scenario]:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["trace"]["path"] = str(trace_dir / Path(doc["trace"]["path"]).name)
    if limit is not None:
        doc["trace"]["limit"] = limit
    first = int(doc.get("seed", 0))
    return [
        parse_scenario(doc, base_dir=EXAMPLE.parent, seed=first + i, name=EXAMPLE.stem)
        for i in range(seeds)
    ]


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    pool = resource.getrusage(resource.RUSAGE_CHILDREN)  # the pool's processes, once joined
    return own.ru_utime + own.ru_stime + pool.ru_utime + pool.ru_stime


def timed(
    runs_on: list[Scenario], jobs: int, prune: str | None, grid: list[str] = GRID
) -> tuple[Tuning, float, float]:
    started, cpu = time.perf_counter(), _cpu()
    tuning = run_grid(runs_on, parse_grid(grid), jobs=jobs, prune=prune)
    return tuning, time.perf_counter() - started, _cpu() - cpu


def report_pruned(
    pruned: Tuning, wall: float, cpu: float, full: Tuning, full_wall: float, full_cpu: float
) -> None:
    """The pruned run's times, what it stopped and where, and its ratio to the full run."""
    print(
        f"with pruning:    {wall:.1f} s wall, {cpu:.1f} s CPU, "
        f"{len(pruned.dominated)} of {len(full.runs)} settings stopped as dominated",
        flush=True,
    )
    for d in pruned.dominated:
        print(f"  dominated at {d.at * 100:.0f}% of the trace: {d.label}")
    print(f"ratio pruned / full: wall {wall / full_wall:.2f}, CPU {cpu / full_cpu:.2f}")


def timed_as_on_aws(runs_on: list[Scenario], jobs: int) -> tuple[Tuning, float, float, list[int]]:
    """The pruned grid as the tuner's map runs it: two batches of items that share no
    bound (each batch in the pool, with no bound shared between its processes)."""
    started, cpu = time.perf_counter(), _cpu()
    plan = plan_grid(runs_on, parse_grid(GRID), prune="wasted")
    sizes: list[int] = []

    def run_batch(batch: Any) -> Any:
        sizes.append(len(batch))
        return run_tasks(list(batch), plan.scenarios, settings=len(plan.settings), jobs=jobs)

    results = run_in_phases(plan.tasks, run_batch, seeds=len(runs_on))
    tuning = assemble(plan, results)
    return tuning, time.perf_counter() - started, _cpu() - cpu, sizes


def _render(value: Any) -> str:
    """A template's `Fn::Join` of strings and references as one string."""
    if isinstance(value, str):
        return value
    if "Fn::Join" in value:
        sep, parts = value["Fn::Join"]
        return str(sep).join(_render(p) for p in parts)
    return "<ref>"


def map_concurrency() -> int:
    """The Distributed Map's MaxConcurrency, from the state machine's definition in
    the template synthesized with the tuner (cdk.json's context otherwise)."""
    with tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, CDK_OUTDIR=out)
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        done = subprocess.run(
            [sys.executable, "app.py", "-c", "muster:clusterName=bench", "-c", "muster:tuner=true"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
        )
        if done.returncode != 0:
            raise SystemExit(f"the stack with the tuner did not synthesize:\n{done.stderr[-2000:]}")
        template = json.loads((Path(out) / "Muster.template.json").read_text())
    maps = []
    for resource_ in template["Resources"].values():
        if resource_["Type"] == "AWS::StepFunctions::StateMachine":
            definition = json.loads(_render(resource_["Properties"]["DefinitionString"]))
            maps += [s for s in definition["States"].values() if s["Type"] == "Map"]
    [tuner_map] = maps
    return int(tuner_map["MaxConcurrency"])


def main(argv: list[str]) -> int:
    trace_dir = find_traces(argv)
    limit = _option(argv, "--limit", None)
    seeds = _option(argv, "--seeds", 3) or 3
    jobs = _option(argv, "--jobs", os.cpu_count() or 1) or 1
    runs_on = scenarios(trace_dir, limit, seeds)
    jobs_in = f"first {limit:,} jobs" if limit else "every job"
    print(
        f"muster tune on the Philly week ({jobs_in}, {len(runs_on[0].workloads):,} workloads), "
        f"9 settings x {seeds} seeds beside the baselines and none, {jobs} processes; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores",
        flush=True,
    )
    concurrency = map_concurrency()
    print(
        f"on AWS: the template's Distributed Map (muster:tuner=true) runs at most "
        f"{concurrency} items at once (MaxConcurrency)",
        flush=True,
    )
    objective = OBJECTIVES["wasted"]
    full, full_wall, full_cpu = timed(runs_on, jobs, None)
    runs = (len(full.runs) + 1) * seeds
    slowest = max(float(t.summary["wallSeconds"]) for r in full.runs for t in r.trials)
    print(
        f"without pruning: {full_wall:.1f} s wall, {full_cpu:.1f} s CPU, {runs} runs "
        f"(slowest single run {slowest:.1f} s)",
        flush=True,
    )
    pruned, pruned_wall, pruned_cpu = timed(runs_on, jobs, "wasted")
    report_pruned(pruned, pruned_wall, pruned_cpu, full, full_wall, full_cpu)
    phased, phased_wall, phased_cpu, sizes = timed_as_on_aws(runs_on, jobs)
    waves = " and ".join(str(math.ceil(n / concurrency)) for n in sizes)
    print(
        f"as on AWS:       {phased_wall:.1f} s wall, {phased_cpu:.1f} s CPU, "
        f"{len(phased.dominated)} of {len(full.runs)} settings stopped as dominated; "
        f"{len(sizes)} executions of {' and '.join(map(str, sizes))} items "
        f"({waves} waves of at most {concurrency})",
        flush=True,
    )
    for d in phased.dominated:
        print(f"  dominated at {d.at * 100:.0f}% of the trace: {d.label}")
    print(f"ratio as on AWS / full: CPU {phased_cpu / full_cpu:.2f}")
    return 0 if same_recommendation([full, pruned, phased], objective) else 1


def same_recommendation(
    tunings: list[Tuning], objective: Any, runs: str = "here and as on AWS"
) -> bool:
    """Print the recommendation; whether every tuning makes it, with the same figure."""
    best = [next((r for r in rank(t.runs, objective) if r.guarded), None) for t in tunings]
    found = [b for b in best if b is not None]
    same = len(found) == len(best) and all(
        b.index == found[0].index and b.wasted == found[0].wasted for b in found
    )
    shown = best[0].label if best[0] is not None else "nothing"
    print(
        f"recommendation: {shown}; the same with and without pruning, {runs}: "
        f"{'yes' if same else 'NO'}"
    )
    return same or not found


if __name__ == "__main__":
    sys.exit(main(sys.argv))
