"""`muster local`: run a scenario through the whole control plane on this machine."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import Any

from muster.cli import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from muster.core.durations import format_duration
from muster.local.moto_server import Endpoint, PortInUse
from muster.local.report import as_run_result
from muster.local.run import (
    STACK,
    LocalModeError,
    LocalResult,
    print_board,
    print_event,
    run_local,
)
from muster.sim.report import summary_table, write_outputs
from muster.sim.scenario import Scenario, load_builtin, load_scenario
from muster.sim.specs import ScenarioError

DEFAULT_SCENARIO = "local-story"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "local",
        help="run a scenario through the real control plane on this machine (moto, no AWS account)",
        description=(
            "Deploy the stack's own template into a local moto server, run the real "
            "Lambda handlers against a simulated EKS cluster, play a scenario in scaled "
            "time and write the same files as `muster simulate`. With no scenario it "
            f"plays the built-in '{DEFAULT_SCENARIO}'."
        ),
    )
    p.add_argument("scenario", nargs="?", help="scenario file (YAML), as for `muster simulate`")
    p.add_argument("--builtin", metavar="NAME", help="a built-in scenario instead of a file")
    p.add_argument(
        "--scale",
        type=float,
        default=10.0,
        help="how many times faster than the scenario's clock to run (default 10: a 60s timeout takes 6 s)",
    )
    p.add_argument(
        "--port", type=port_number, help="port of the local AWS endpoint (default: a free one)"
    )
    p.add_argument("--out", type=Path, default=Path("out/local"), help="where to write the results")
    p.add_argument("--quiet", action="store_true", help="no live view")
    p.add_argument("--verbose", action="store_true", help="also show the functions' own logs")
    p.add_argument(
        "--hold",
        action="store_true",
        help="after the scenario, keep the control plane serving (for muster status, describe, ...) until Ctrl-C",
    )
    p.set_defaults(handler=run_command)


def port_number(text: str) -> int:
    """A TCP port from the command line: a message, not a traceback, when it is not one."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port number (1-65535)")
    return port


def run_command(args: argparse.Namespace) -> int:
    try:
        scenario = _scenario(args)
    except (ScenarioError, OSError) as exc:
        print(f"muster local: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.scale <= 0:
        print("muster local: --scale must be above 0", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(
        f"muster local: {scenario.name}, {len(scenario.workloads)} workloads, "
        f"{args.scale:g}x faster than scenario time; setting up the local AWS endpoint and stack...",
        file=sys.stderr,
    )
    print(f"muster local: {scaled_time_note(scenario, args.scale)}", file=sys.stderr)

    def report(result: LocalResult) -> None:
        run = as_run_result(scenario, result)
        written = write_outputs([run], args.out)
        print()
        print(summary_table([run]))
        print(f"\nwall {result.wall_seconds:.1f} s; wrote {', '.join(str(p) for p in written)}")
        if result.runner_errors:
            print(
                f"{len(result.runner_errors)} function errors (retried): {result.runner_errors[:3]}",
                file=sys.stderr,
            )

    def hold(endpoint: Endpoint, result: LocalResult) -> None:
        report(result)
        print(hold_message(endpoint.url, scenario, args.scale), flush=True)

    # `kill` stops it as cleanly as Ctrl-C: the moto server and the runner go with it.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        result = run_local(
            scenario,
            scale=args.scale,
            port=args.port,
            on_event=None if args.quiet else print_event(sys.stdout),
            on_board=None if args.quiet else print_board(sys.stdout),
            verbose=args.verbose,
            hold=hold if args.hold else None,
        )
    except PortInUse as exc:
        print(f"muster local: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except LocalModeError as exc:
        print(f"muster local: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("muster local: interrupted; everything it started is stopped", file=sys.stderr)
        return EXIT_INTERRUPTED
    if args.hold:
        print("muster local: stopped, with everything it started", file=sys.stderr)
    else:
        report(result)
    return EXIT_OK


def scaled_time_note(scenario: Scenario, scale: float) -> str:
    """Local mode deploys the scenario's settings divided by the scale: say so."""
    q = scenario.settings.defaults
    return (
        f"settings run in scaled time: the control plane is deployed with every duration "
        f"divided by {scale:g} (timeout {format_duration(q.timeout)} runs as "
        f"{format_duration(q.timeout / scale)}, backoff base {q.backoff_base_seconds:g}s as "
        f"{q.backoff_base_seconds / scale:g}s); times printed here are scenario time"
    )


def hold_message(url: str, scenario: Scenario, scale: float) -> str:
    """What an administrator can do against a held local control plane."""
    where = f"--endpoint {url} --stack {STACK}"
    return (
        f"\nthe scenario is over; the control plane keeps serving on {url} until Ctrl-C:\n"
        f"  muster status {where}\n"
        f"  muster describe default/WORKLOAD {where}\n"
        f"  muster settings get {where}\n"
        f"  muster settings set timeout=30s {where}\n"
        f"  muster reactivate default/WORKLOAD {where}\n"
        f"settings there are in scaled time ({scale:g}x faster: the scenario's timeout "
        f"{format_duration(scenario.settings.defaults.timeout)} reads "
        f"{format_duration(scenario.settings.defaults.timeout / scale)}); set durations "
        "divided by the same factor"
    )


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _scenario(args: argparse.Namespace) -> Scenario:
    if args.scenario and args.builtin:
        raise ScenarioError("give a scenario file or --builtin, not both")
    if args.scenario:
        return load_scenario(Path(args.scenario))
    return load_builtin(args.builtin or DEFAULT_SCENARIO)
