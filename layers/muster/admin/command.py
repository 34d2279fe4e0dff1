"""What every command shares: exit codes, its error, the handler that reports it, its parser."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from muster.cli import EXIT_FAILED

Command = Callable[[argparse.Namespace, TextIO], int]


class AdminError(Exception):
    """A command cannot go on; the message says why, `exit_code` how it ends."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def listed(errors: Sequence[str]) -> str:
    """One error inline; several, one per line, so that each names its field."""
    if len(errors) == 1:
        return errors[0]
    return f"{len(errors)} errors:" + "".join(f"\n  {e}" for e in errors)


def reporting_handler(
    command: Command, name: str | None = None
) -> Callable[[argparse.Namespace], int]:
    """A handler that prints an `AdminError` as one line on stderr and returns its exit code.

    Messages start with `name`, by default `muster <command>`."""

    def handler(args: argparse.Namespace) -> int:
        from botocore.exceptions import BotoCoreError, ClientError

        prefix = name or f"muster {args.command}"
        try:
            return command(args, sys.stdout)
        except AdminError as exc:
            print(f"{prefix}: {exc}", file=sys.stderr)
            return exc.exit_code
        except ClientError as exc:  # e.g. AccessDenied on the table: name the call
            error = exc.response.get("Error", {})
            print(
                f"{prefix}: {exc.operation_name} failed: "
                f"{error.get('Code', '')} {error.get('Message', '')}".rstrip(),
                file=sys.stderr,
            )
            return EXIT_FAILED
        except BotoCoreError as exc:
            print(f"{prefix}: {exc}", file=sys.stderr)
            return EXIT_FAILED

    return handler


def add_command(
    subparsers: Any,
    name: str,
    command: Command,
    help: str,
    *,
    parents: Sequence[argparse.ArgumentParser] = (),
    workload: bool = False,
    json: bool = False,
) -> argparse.ArgumentParser:
    """A subcommand whose handler reports failures; `workload` and `json` add those arguments."""
    p: argparse.ArgumentParser = subparsers.add_parser(name, parents=list(parents), help=help)
    if workload:
        p.add_argument("workload", help="namespace/name")
    if json:
        p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=reporting_handler(command))
    return p
