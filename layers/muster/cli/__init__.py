"""The `muster` command line: one module per subcommand, one set of exit codes.

Each command module parses its arguments and turns them into calls of the
library (`muster.sim`, `muster.local`, `muster.agent`, `muster.admin`, ...) and
an exit code; `command` holds what the commands share: the deployment options,
the handler that reports failures, and which exit code an error ends with.

Every command ends with one of the documented exit codes and, when it fails, a
message on stderr; a traceback is shown only with `--debug` (or MUSTER_DEBUG=1).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
from collections.abc import Sequence

# Each module has `register(subparsers)`, which adds its subcommands and sets
# `handler` (a function of the parsed arguments returning an exit code).
# In the order `muster --help` lists them.
COMMAND_MODULES: tuple[str, ...] = tuple(
    f"muster.cli.{name}"
    for name in (
        "simulate",
        "tune",
        "trace_cut",
        "local",
        "agent",
        "policy_params",
        "status",
        "describe",
        "settings",
        "reactivate",
        "release",
        "history",
        "manifests",
        "agent_image",
    )
)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130
DEBUG_ENV = "MUSTER_DEBUG"

EXIT_CODES = f"""\
exit codes:
  {EXIT_OK}    done
  {EXIT_FAILED}    the command failed (the message says why)
  {EXIT_BAD_INPUT}    bad input: arguments, settings, scenario or trace files
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C or SIGTERM)
Add --debug (or set {DEBUG_ENV}=1) to see the traceback of an unexpected error."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="muster",
        description="Gang scheduling for distributed training on Amazon EKS.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        default=os.environ.get(DEBUG_ENV, "") not in ("", "0"),
        help=f"show the traceback of an unexpected error ({DEBUG_ENV}=1)",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    _name_each_command(parser)
    return parser


def _name_each_command(parser: argparse.ArgumentParser) -> None:
    """Let every (sub)command's arguments say which parser read them, so that an
    argument it does not know is reported with its usage, not `muster`'s."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                sub.set_defaults(command_parser=sub)
                _name_each_command(sub)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        reader: argparse.ArgumentParser = getattr(args, "command_parser", None) or parser
        reader.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command is None:
        parser.print_help()
        return EXIT_BAD_INPUT
    try:
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        print(f"muster {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # the last resort: a message, not a traceback
        if args.debug:
            traceback.print_exc()
        else:
            print(
                f"muster {args.command}: unexpected error: {type(exc).__name__}: {exc}\n"
                f"  (run again with --debug or {DEBUG_ENV}=1 for the traceback)",
                file=sys.stderr,
            )
        return EXIT_FAILED
