"""How `muster tune` tries a grid of settings on a scenario and recommends one.

Every combination of the `--grid` values runs the same scenario (the same
workloads, startup times, broken jobs, node faults and jitter draws, all from the
scenario's seed: common random numbers, so two runs differ by their settings
alone) through the simulator, in parallel across the machine's cores. Plain
Kubernetes (`none`) runs once beside them: a workload that finished there is
healthy, and settings that deactivate a healthy workload are never recommended.
The runs are ranked by the objective; the best one that passes the guard rail is
written as a settings document for `muster settings set --file` and the CDK
context. docs/simulator.md ("Tuning") describes the objectives and the guard rail.

The grid and its runs are `muster.sim.tune_grid`, the ranking, files and picture
`muster.sim.tune_ranking`; the command is `muster.cli.tune`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from muster.sim.tune_grid import none_as_inf
from muster.sim.tune_ranking import format_seconds


def format_baseline(baseline: Mapping[str, Any]) -> str:
    """The `none` run's line beside the ranking: what plain Kubernetes makes of the scenario."""
    return (
        f"plain Kubernetes (none): {baseline['wastedGpuHours']:.1f} wasted GPU-h, "
        f"queue p95 {format_seconds(none_as_inf(baseline['queueDelaySeconds']['p95']))}, "
        f"JCT p95 {format_seconds(none_as_inf(baseline['jctSeconds']['p95']))}"
    )
