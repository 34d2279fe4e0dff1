"""`muster tune`: try a grid of settings on a scenario and recommend one.

The method (common random numbers, the `none` baseline, the guard rail) is in
`muster.sim.tune`; docs/simulator.md ("Tuning") describes the objectives.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from muster import contract
from muster.aws.tune_map import TunerError, run_on_aws
from muster.cli import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK
from muster.cli.command import output_folder_problem
from muster.sim.scenario import Scenario, load_scenario
from muster.sim.specs import ScenarioError
from muster.sim.tune import format_baseline, provenance, scenarios_to_run
from muster.sim.tune_grid import (
    BASELINE_NAMES,
    Run,
    Tuning,
    assemble,
    baselines,
    combinations,
    parse_grid,
    plan_grid,
    run_grid,
)
from muster.sim.tune_picture import plot_pareto
from muster.sim.tune_pool import run_in_phases
from muster.sim.tune_ranking import (
    DEFAULT_OBJECTIVE,
    OBJECTIVES,
    Objective,
    format_table,
    format_within_spread,
    rank,
    within_spread,
    write_outputs,
)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "tune",
        help="try a grid of settings on a scenario and recommend the best",
        description=(
            "Run a scenario under every combination of the given settings (in parallel, "
            "with the same random draws for every run), rank the runs by an objective and "
            "write the ranking, a Pareto picture and the recommended settings document."
        ),
    )
    p.add_argument(
        "scenario", help="scenario file (YAML), e.g. a trace from `muster history export`"
    )
    p.add_argument(
        "--grid",
        nargs="+",
        required=True,
        metavar="SETTING=V1,V2",
        help="a setting (dotted, as in the settings document) and its values; "
        "'unset' removes it (e.g. requeuingStrategy.backoffLimitCount=unset,3,10)",
    )
    p.add_argument(
        "--objective",
        default=DEFAULT_OBJECTIVE,
        choices=sorted(OBJECTIVES),
        help=f"what to minimise (default {DEFAULT_OBJECTIVE}: wasted GPU-hours)",
    )
    p.add_argument(
        "--policy",
        default="gang",
        choices=("gang", "gang+block"),
        help="gang+block tries every combination with blockAdmission on",
    )
    p.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 1, help="runs at once (default: cores)"
    )
    p.add_argument("--out", type=Path, help="write ranking.csv, pareto.png and the settings here")
    p.add_argument("--seed", type=int, help="seed for every random draw (default: the file's)")
    p.add_argument(
        "--seeds",
        type=int,
        metavar="N",
        help="run every setting on N seeds (--seed and the next ones) and show the spread "
        "(default: 3 when the scenario draws from its seed, else 1)",
    )
    p.add_argument(
        "--no-prune",
        action="store_true",
        help="run every setting to the end, even once it is worse than the best finished "
        "one that passes the guard rail (pruning never changes the recommendation)",
    )
    p.add_argument(
        "--on",
        choices=("local", "aws"),
        default="local",
        help="aws: run every setting on the stack's tuner (a Step Functions distributed "
        "map; deploy it with -c muster:tuner=true); pruned, as two executions: the "
        "baselines first, then the grid with the bound they set",
    )
    p.add_argument(
        "--stack", default=contract.DEFAULT_STACK_NAME, help="the stack of the tuner (--on aws)"
    )
    p.add_argument("--region", help="AWS region of the stack (default: your AWS configuration's)")
    p.add_argument("--no-picture", action="store_true", help="skip the PNG")
    p.add_argument(
        "--progress", action="store_true", help="show the progress bar even when not a terminal"
    )
    p.set_defaults(handler=run_command)


def run_command(
    args: argparse.Namespace, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> int:
    out, err = stdout or sys.stdout, stderr or sys.stderr
    try:
        grid, scenario, scenarios = _inputs(args)
    except ScenarioError as exc:
        print(f"muster tune: {exc}", file=err)
        return EXIT_BAD_INPUT
    objective = OBJECTIVES[args.objective]
    bar = _RunBar(err) if (args.progress or err.isatty()) else None
    try:
        tuning = _tune(args, scenarios, grid, objective.name, bar.update if bar else None)
    except TunerError as exc:
        if bar:
            bar.close()
        print(f"muster tune: {exc}", file=err)
        return EXIT_FAILED
    if bar:
        bar.close()
    ranked = rank(tuning.runs, objective)
    print(_heading(scenario.name, tuning, objective.label), file=out)
    print(format_table(ranked, tuning.dominated), file=out)
    print(format_baseline(tuning.none), file=out)
    best, close = _recommend(ranked, objective, out)
    if args.out is not None:
        where = provenance(args.scenario, scenario, tuning, args.grid, objective.name)
        if best is not None:
            where["withinSpread"] = [r.label for r in close]
        files = write_outputs(tuning, ranked, objective, args.out, provenance=where)
        if not args.no_picture:
            files.append(args.out / "pareto.png")
            plot_pareto(tuning, best, files[-1])
        print("wrote " + ", ".join(str(f) for f in files), file=out)
    return EXIT_OK


def _inputs(
    args: argparse.Namespace,
) -> tuple[list[tuple[str, list[Any]]], Scenario, list[Scenario]]:
    """The grid, the scenario and the scenarios to run, every input checked before any
    run (they may take minutes): a mistake raises `ScenarioError`."""
    if args.jobs < 1:
        raise ScenarioError(f"--jobs: expected at least 1, got {args.jobs}")
    if args.seeds is not None and args.seeds < 1:
        raise ScenarioError(f"--seeds: expected at least 1, got {args.seeds}")
    grid = parse_grid(args.grid)
    scenario = load_scenario(args.scenario, seed=args.seed)
    documents = [doc for _, doc in combinations(scenario, grid)]  # every one checked
    documents += [b.document for b in baselines(scenario)]
    scenarios = scenarios_to_run(args.scenario, scenario, documents, args.seeds)
    problem = None if args.out is None else output_folder_problem(args.out)
    if problem is not None:
        raise ScenarioError(problem)
    return grid, scenario, scenarios


def _tune(
    args: argparse.Namespace,
    scenarios: list[Scenario],
    grid: list[tuple[str, list[Any]]],
    objective: str,
    progress: Callable[[int, int], None] | None,
) -> Tuning:
    """The tuning, run here in a pool of processes or on the stack's tuner."""
    if args.on == "local":
        return run_grid(
            scenarios,
            grid,
            policy=args.policy,
            jobs=args.jobs,
            progress=progress,
            prune=None if args.no_prune else objective,
            source=args.scenario,
        )
    import boto3

    # The map's runs share no bound as they run, as the pool's processes do: pruned,
    # the runs that go to the end run first, and the rest with the bound they set.
    prune = None if args.no_prune else objective
    plan = plan_grid(scenarios, grid, policy=args.policy, source=args.scenario, prune=prune)
    trace = scenarios[0].trace
    results = run_on_aws(
        plan.tasks,
        args.scenario,
        trace.path if trace is not None else None,
        stack=args.stack,
        session=boto3.session.Session(region_name=args.region),
        progress=progress,
        phases=lambda tasks, run_batch: run_in_phases(tasks, run_batch, seeds=len(scenarios)),
    )
    return assemble(plan, results)


def _recommend(
    ranked: list[Run], objective: Objective, out: TextIO
) -> tuple[Run | None, list[Run]]:
    """The best run that passes the guard rail (printed), and the others the seeds do
    not tell apart from it."""
    best = next((r for r in ranked if r.guarded), None)
    if best is None:
        print("no setting passes the guard rail: nothing recommended", file=out)
        return None, []
    print(f"recommended: {best.label}{best.mark}", file=out)
    close = within_spread(best, ranked, objective)
    if close:
        print(format_within_spread(best, close, objective), file=out)
    return best, close


def _heading(name: str, tuning: Tuning, objective: str) -> str:
    seeds = tuning.seeds
    grid = sum(1 for r in tuning.runs if r.in_grid) + sum(1 for d in tuning.dominated if d.in_grid)
    marks = ", ".join(
        f"[{', '.join(r.baselines)}] "
        + " and ".join(BASELINE_NAMES[n] for n in r.baselines)
        + ("" if r.in_grid else " (beside the grid)")
        for r in tuning.baseline_runs
    )
    on = (
        f"seeds {', '.join(map(str, seeds))}: means, ± half the spread"
        if len(seeds) > 1
        else f"seed {seeds[0]}"
    )
    return (
        f"{name} ({on}): {grid} settings under {tuning.policy}, ranked by {objective}; "
        f"{marks}; (x) loses workloads that finish under none (deactivated, or never "
        "finished), on the worst seed"
        + (
            "; dominated: stopped once worse than the best that passes the guard rail"
            if tuning.dominated
            else ""
        )
    )


class _RunBar:
    """A one-line bar of runs finished, on stderr."""

    def __init__(self, stream: TextIO, width: int = 30) -> None:
        self.stream, self.width = stream, width

    def update(self, done: int, total: int) -> None:
        filled = int(done / total * self.width)
        bar = "#" * filled + "-" * (self.width - filled)
        self.stream.write(f"\rmuster tune [{bar}] {done}/{total} runs")
        self.stream.flush()

    def close(self) -> None:
        self.stream.write("\r" + " " * (self.width + 40) + "\r")
        self.stream.flush()
