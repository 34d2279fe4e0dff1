"""`muster simulate`: replay a scenario or a job trace through the decision core."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from muster.cli import EXIT_BAD_INPUT, EXIT_OK
from muster.cli.command import output_folder_problem
from muster.sim.engine import POLICIES, RunResult, simulate
from muster.sim.report import summary_table, write_outputs
from muster.sim.scenario import Scenario, builtin_names, load_builtin, load_scenario
from muster.sim.specs import ScenarioError


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "simulate",
        help="replay a scenario or job trace through the decision core in simulated time",
        description=(
            "Run a scenario (YAML) through Muster's decision core against a simulated "
            "cluster and report GPU use, evictions, queue delay and job completion time. "
            "Policies: gang (the scenario's settings), gang+block (the same with "
            "blockAdmission), gang+fit (the same with capacityCheck), none (plain Kubernetes)."
        ),
    )
    p.add_argument("scenario", nargs="?", help="scenario file (YAML)")
    p.add_argument(
        "--builtin",
        metavar="NAME|all",
        help=f"run a built-in scenario, or all of them ({', '.join(builtin_names())})",
    )
    p.add_argument("--policy", default="gang", help=f"one of {', '.join(POLICIES)} (default gang)")
    p.add_argument("--compare", metavar="P1,P2", help="run several policies side by side")
    p.add_argument("--out", type=Path, help="write events.jsonl, summary.json, gpu-use.png here")
    p.add_argument(
        "--seed", type=int, help="seed for every random draw (default: the file's, or 0)"
    )
    p.add_argument("--no-picture", action="store_true", help="skip the PNG")
    p.add_argument(
        "--progress",
        action="store_true",
        help="show a progress bar on stderr even when it is not a terminal",
    )
    p.set_defaults(handler=run_command)


def run_command(
    args: argparse.Namespace, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> int:
    out, err = stdout or sys.stdout, stderr or sys.stderr
    try:
        policies = _policies(args)
        scenarios = _scenarios(args)
    except ScenarioError as exc:
        print(f"muster simulate: {exc}", file=err)
        return EXIT_BAD_INPUT
    problem = None if args.out is None else output_folder_problem(args.out)
    if problem is not None:
        print(f"muster simulate: {problem}", file=err)
        return EXIT_BAD_INPUT
    show_progress = args.progress or err.isatty()
    for scenario in scenarios:
        results: list[RunResult] = []
        for policy in policies:
            bar = _ProgressBar(err, f"{scenario.name} [{policy}]") if show_progress else None
            results.append(
                simulate(
                    scenario,
                    policy,
                    progress=bar.update if bar else None,
                    record=args.out is not None,  # the log and samples only for the files
                )
            )
            if bar:
                bar.close()
        title = f"{scenario.name} (seed {scenario.seed})"
        print(title, file=out)
        print(summary_table(results), file=out)
        if args.out is not None:
            target = args.out / scenario.name if len(scenarios) > 1 else args.out
            files = write_outputs(results, target, picture=not args.no_picture)
            print("wrote " + ", ".join(str(f) for f in files), file=out)
        print(file=out)
    return EXIT_OK


def _policies(args: argparse.Namespace) -> list[str]:
    chosen = args.compare.split(",") if args.compare else [args.policy]
    chosen = [p.strip() for p in chosen if p.strip()]
    for p in chosen:
        if p not in POLICIES:
            raise ScenarioError(
                f"--policy/--compare: unknown policy {p!r} (choose from {', '.join(POLICIES)})"
            )
    if not chosen:
        raise ScenarioError("--compare: name at least one policy")
    return list(dict.fromkeys(chosen))


def _scenarios(args: argparse.Namespace) -> list[Scenario]:
    if (args.scenario is None) == (args.builtin is None):
        raise ScenarioError("give a scenario file or --builtin NAME|all (not both)")
    if args.builtin == "all":
        return [load_builtin(name, seed=args.seed) for name in builtin_names()]
    if args.builtin is not None:
        return [load_builtin(args.builtin, seed=args.seed)]
    return [load_scenario(args.scenario, seed=args.seed)]


class _ProgressBar:
    """A one-line bar of simulated time on stderr."""

    def __init__(self, stream: TextIO, label: str, width: int = 30) -> None:
        self.stream, self.label, self.width = stream, label, width
        self.update: Callable[[float, float], None] = self._update

    def _update(self, now: float, until: float) -> None:
        done = min(now / until, 1.0) if until > 0 else 1.0
        filled = int(done * self.width)
        bar = "#" * filled + "-" * (self.width - filled)
        self.stream.write(f"\r{self.label} [{bar}] {done * 100:5.1f}% of simulated time")
        self.stream.flush()

    def close(self) -> None:
        self.stream.write("\r" + " " * (len(self.label) + self.width + 30) + "\r")
        self.stream.flush()
