"""How `muster tune` tries a grid of settings on a scenario and recommends one.

Every combination of the `--grid` values runs the same scenario (the same
workloads, startup times, broken jobs, node faults and jitter draws, all from the
scenario's seed: common random numbers, so two runs differ by their settings
alone) through the simulator, in parallel across the machine's cores. When the
scenario draws from its seed, every combination runs on several seeds and the
figures are their means, with the spread. Beside the grid run the baselines
(today's settings, the scenario's own, and Muster's defaults) and plain Kubernetes
(`none`): a workload that finished under `none` is healthy, and settings that lose
a healthy workload (deactivate it, or leave it unfinished) on any seed are never
recommended. The runs are ranked by the objective; the best one that passes the
guard rail is written as a settings document for `muster settings set --file` and
the CDK context, with where it came from. A setting whose objective can only grow
(wasted GPU-hours, evictions) stops once it is past the best finished one that
passes the guard rail, and is listed as dominated: it could only have ranked
below it. docs/simulator.md ("Tuning") describes the objectives, the guard rail
and the pruning.

The grid and its runs are `muster.sim.tune_grid`, one run as a JSON item
`muster.sim.tune_item`, the pool and its bound `muster.sim.tune_pool`, the ranking
and files `muster.sim.tune_ranking`, the picture `muster.sim.tune_picture`; the
command is `muster.cli.tune`.
"""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from muster import __version__
from muster.sim.figures import format_seconds
from muster.sim.scenario import Scenario, load_scenario
from muster.sim.tune_grid import Run, Tuning, draws_from_seed

SEEDS_WHEN_RANDOM = 3


def scenarios_to_run(
    path: str | Path,
    first: Scenario,
    documents: Sequence[Mapping[str, Any]],
    seeds: int | None,
) -> list[Scenario]:
    """The scenario expanded under each seed to run, from its own (or `--seed`) on:
    `seeds` of them, or when not given SEEDS_WHEN_RANDOM if its runs draw from the
    seed (a trace's startup times, broken jobs and node faults; backoff jitter in
    `documents`, the settings to run), else one."""
    found = [first]
    if seeds is None:
        # Only a trace is expanded with draws; listed workloads and faults are as written.
        other = load_scenario(path, seed=first.seed + 1) if first.trace is not None else first
        seeds = SEEDS_WHEN_RANDOM if draws_from_seed(first, other, documents) else 1
        if other is not first:
            found.append(other)
    while len(found) < seeds:
        found.append(load_scenario(path, seed=first.seed + len(found)))
    return found[:seeds]


def provenance(
    path: str | Path,
    scenario: Scenario,
    tuning: Tuning,
    grid_items: Sequence[str],
    objective: str,
) -> dict[str, Any]:
    """Where a recommendation came from: enough to run it again and to tell whether
    the scenario or its trace changed since."""
    source = Path(path)
    found: dict[str, Any] = {
        "tunedBy": f"muster tune {__version__}",
        "scenario": {"name": scenario.name, "path": str(source), "sha256": _sha256(source)},
    }
    trace = scenario.trace
    if trace is not None and trace.path is not None:
        found["trace"] = {"path": str(trace.path), "sha256": _sha256(trace.path)}
    elif trace is not None:
        found["trace"] = {"synthetic": dict(trace.synthetic or {})}
    found["seeds"] = list(tuning.seeds)
    found["policy"] = tuning.policy
    found["objective"] = objective
    found["grid"] = list(grid_items)
    found["command"] = shlex.join(
        [
            "muster",
            "tune",
            str(source),
            "--grid",
            *grid_items,
            "--policy",
            tuning.policy,
            "--objective",
            objective,
            "--seed",
            str(tuning.seeds[0]),
            "--seeds",
            str(len(tuning.seeds)),
        ]
    )
    return found


def _sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def format_baseline(none: Run) -> str:
    """The `none` run's line beside the ranking: what plain Kubernetes makes of the scenario."""
    return (
        f"plain Kubernetes (none): {none.wasted:.1f} wasted GPU-h, "
        f"queue p95 {format_seconds(none.queue_delay_p95)}, "
        f"JCT p95 {format_seconds(none.jct_p95)}"
    )
