"""The `muster` command line: one subcommand module per concern."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Each module has `register(subparsers)`, which adds its subcommands and sets
# `handler` (a function of the parsed arguments returning an exit code).
COMMAND_MODULES: tuple[str, ...] = (
    "muster.sim.cli",
    "muster.sim.tune",
    "muster.local.cli",
    "muster.kube.cli",
    "muster.kube.policy_params",
    "muster.admin",
    "muster.history_export",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="muster",
        description="Gang scheduling for distributed training on Amazon EKS.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    return int(args.handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
