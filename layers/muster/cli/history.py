"""`muster history export`: the deployment's recent history as a trace for the simulator."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any, TextIO

from muster.admin.errors import BadInput
from muster.admin.export import recent_trace
from muster.cli import EXIT_OK
from muster.cli.command import (
    connect_to,
    deployment_arguments,
    output_file_problem,
    reporting_handler,
)
from muster.core import DurationError, parse_duration
from muster.sim.history_trace import parse_time, write_trace


def since_epoch(text: str, now: float) -> float:
    """`7d`, `36h` (that long before now) or an ISO 8601 time."""
    try:
        return now - parse_duration(text)
    except DurationError:
        pass
    try:
        return parse_time(text)
    except ValueError:
        raise BadInput(
            f"--since: expected a duration like 7d or 36h, or a time like "
            f"2026-11-24T00:00:00Z, got {text!r}"
        ) from None


def export_command(args: argparse.Namespace, out: TextIO) -> int:
    now = time.time()
    since = since_epoch(args.since, now)
    if args.out != "-":  # asked before the history is read
        problem = output_file_problem(Path(args.out), "--out")
        if problem is not None:
            raise BadInput(problem)
    deployment = connect_to(args)
    rows = recent_trace(deployment, since, now)
    if args.out == "-":
        write_trace(rows, out)
        return EXIT_OK
    path = Path(args.out)
    try:
        with path.open("w", newline="", encoding="utf-8") as handle:
            written = write_trace(rows, handle)
    except OSError as exc:
        raise BadInput(f"cannot write --out {path}: {exc.strerror or exc}") from None
    outcomes: dict[str, int] = {}
    for r in rows:
        outcomes[r.outcome] = outcomes.get(r.outcome, 0) + 1
    counts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(outcomes.items()))
    out.write(
        f"wrote {written} workloads of cluster {deployment.config.cluster_name} "
        f"submitted since {args.since} to {path}" + (f" ({counts})" if counts else "") + "\n"
    )
    return EXIT_OK


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "history", help="the deployment's workload history (export it as a simulator trace)"
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    e = actions.add_parser(
        "export",
        parents=[deployment_arguments()],
        help="write the workloads submitted since a moment as a trace for muster simulate/tune",
        description=(
            "One CSV row per workload submitted since --since: submission time, gang size, "
            "GPUs, observed startup and run times, outcome. A scenario's trace.path reads "
            "it (docs/simulator.md, 'Muster traces')."
        ),
    )
    e.add_argument("--since", default="7d", help="a duration (7d, 36h) or an ISO time (default 7d)")
    e.add_argument("--out", default="-", help="the CSV file to write (default: stdout)")
    e.set_defaults(handler=reporting_handler(export_command, "muster history export"))
