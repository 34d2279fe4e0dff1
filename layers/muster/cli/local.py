"""`muster local`: run a scenario through the whole control plane on this machine."""

from __future__ import annotations

import argparse
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from muster.cli import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from muster.cli.command import output_folder_problem
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
    p.add_argument(
        "--wait-ready",
        action="store_true",
        help=(
            "--hold in the background: show the scenario, return once the control plane "
            f"serves, and leave it serving (stop it with `kill $(cat OUT/{PID_FILE})`)"
        ),
    )
    # The process that --wait-ready starts: it says how it is stopped.
    p.add_argument("--serving-in-background", action="store_true", help=argparse.SUPPRESS)
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


# Faster than this, a one-second timer of the scenario (Step Functions counts whole
# seconds) would fire in a millisecond: nothing the control plane does takes so little.
MAX_SCALE = 1000.0


def scale_problem(scale: float) -> str | None:
    """Why `--scale` cannot be used, or None: a finite factor above 0, at most MAX_SCALE."""
    if math.isfinite(scale) and 0 < scale <= MAX_SCALE:
        return None
    return (
        f"--scale must be above 0 and at most {MAX_SCALE:g} (how many times faster than "
        f"the scenario's clock to run), got {scale:g}"
    )


def run_command(args: argparse.Namespace) -> int:
    try:
        scenario = _scenario(args)
    except (ScenarioError, OSError) as exc:
        print(f"muster local: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    problem = scale_problem(args.scale) or output_folder_problem(args.out)
    if problem is not None:
        print(f"muster local: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.wait_ready:
        return run_in_background(args)
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
        stop = f"stopped (kill {os.getpid()})" if args.serving_in_background else "Ctrl-C"
        print(hold_message(endpoint.url, scenario, args.scale, stop), flush=True)

    # `kill` stops it as cleanly as Ctrl-C: the moto server and the runner go with it.
    # Both are set, since a background job of a shell starts with SIGINT ignored.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _interrupt)
    try:
        result = run_local(
            scenario,
            scale=args.scale,
            port=args.port,
            on_event=None if args.quiet else print_event(sys.stdout),
            on_board=None if args.quiet else print_board(sys.stdout),
            verbose=args.verbose,
            hold=hold if args.hold or args.serving_in_background else None,
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
    if args.hold or args.serving_in_background:
        print("muster local: stopped, with everything it started", file=sys.stderr)
        if args.serving_in_background:
            (args.out / PID_FILE).unlink(missing_ok=True)
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


# The line `--hold` prints once the control plane serves after the scenario.
SERVING = "the scenario is over; the control plane keeps serving on"
PID_FILE = "local.pid"
LOG_FILE = "local.log"


def hold_message(url: str, scenario: Scenario, scale: float, until: str = "Ctrl-C") -> str:
    """What an administrator can do against a held local control plane."""
    where = f"--endpoint {url} --stack {STACK}"
    return (
        f"\n{SERVING} {url} until {until}:\n"
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


def run_in_background(args: argparse.Namespace) -> int:
    """`--wait-ready`: the same run with --hold in a process of its own, whose output
    (in OUT/local.log) is shown here until its control plane serves; then this one
    returns and leaves it serving, its process id in OUT/local.pid."""
    log_path, pid_path = args.out / LOG_FILE, args.out / PID_FILE
    command = [sys.executable, "-m", "muster.cli", "local", *forwarded(args)]
    with log_path.open("wb") as log:
        child = subprocess.Popen(
            [*command, "--serving-in-background"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # not stopped with this shell's job, nor by its Ctrl-C
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
    pid_path.write_text(f"{child.pid}\n")
    try:
        with log_path.open(encoding="utf-8", errors="replace") as follow:
            ready = _follow(follow, child)
    except KeyboardInterrupt:
        child.terminate()  # it stops as on Ctrl-C: everything it started goes with it
        child.wait()
        pid_path.unlink(missing_ok=True)
        print("muster local: interrupted; everything it started is stopped", file=sys.stderr)
        return EXIT_INTERRUPTED
    if not ready:
        pid_path.unlink(missing_ok=True)
        return child.wait()
    print(
        f"muster local: serving in the background as process {child.pid} (its output goes "
        f"on in {log_path}); stop it with: kill $(cat {pid_path})",
        flush=True,
    )
    return EXIT_OK


def _follow(log: TextIO, child: subprocess.Popen[bytes]) -> bool:
    """Echo `log` as `child` writes it, until it serves (True) or has ended (False)."""
    ready = False
    while True:
        line = log.readline()
        if line:
            sys.stdout.write(line)
            ready = ready or line.startswith(SERVING)
            continue
        if ready:  # the rest of its message comes with it: take what is left of it
            time.sleep(0.2)
            sys.stdout.write(log.read())
            sys.stdout.flush()
            return True
        sys.stdout.flush()
        if child.poll() is not None:
            sys.stdout.write(log.read())
            return False
        time.sleep(0.2)


def forwarded(args: argparse.Namespace) -> list[str]:
    """The arguments that choose the run, as the command line gave them."""
    argv = [args.scenario] if args.scenario else []
    if args.builtin:
        argv += ["--builtin", args.builtin]
    argv += ["--scale", repr(args.scale), "--out", str(args.out)]
    if args.port is not None:
        argv += ["--port", str(args.port)]
    argv += [flag for flag, on in (("--quiet", args.quiet), ("--verbose", args.verbose)) if on]
    return argv


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _scenario(args: argparse.Namespace) -> Scenario:
    if args.scenario and args.builtin:
        raise ScenarioError("give a scenario file or --builtin, not both")
    scenario = (
        load_scenario(Path(args.scenario))
        if args.scenario
        else load_builtin(args.builtin or DEFAULT_SCENARIO)
    )
    if scenario.topology:
        # The local cluster's nodes carry no labels: its gangs would be placed as if
        # the blocks were not there, and the run would not say so.
        raise ScenarioError(
            "cluster.topology: the local mode does not model network blocks; "
            "run this scenario with `muster simulate`"
        )
    return scenario
