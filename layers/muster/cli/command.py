"""What the commands share: the deployment options, the handler that reports failures, exit codes."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from muster import contract
from muster.admin import deployment as found
from muster.admin.errors import AdminError, BadInput
from muster.cli import EXIT_BAD_INPUT, EXIT_FAILED

Command = Callable[[argparse.Namespace, TextIO], int]


def exit_code(error: AdminError) -> int:
    """How a command that failed with `error` ends."""
    return EXIT_BAD_INPUT if isinstance(error, BadInput) else EXIT_FAILED


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
            return exit_code(exc)
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


def deployment_arguments() -> argparse.ArgumentParser:
    """The options that choose the deployment, shared by every command that reads it."""
    target = argparse.ArgumentParser(add_help=False)
    where = target.add_argument_group("deployment")
    where.add_argument(
        "--stack",
        help=(
            f"CloudFormation stack (default {contract.DEFAULT_STACK_NAME}; "
            f"{contract.LOCAL_STACK_NAME} with --endpoint)"
        ),
    )
    where.add_argument("--region", help="AWS region (default: your AWS configuration's)")
    where.add_argument(
        "--endpoint",
        metavar="URL",
        help="a local deployment's AWS endpoint, e.g. http://127.0.0.1:4566 (muster local --port)",
    )
    return target


def connect_to(args: argparse.Namespace) -> found.Deployment:
    """The deployment that `--stack`, `--region` and `--endpoint` name."""
    return found.connect(args.stack, args.region, args.endpoint)


def output_folder_problem(folder: Path, option: str = "--out") -> str | None:
    """Why a command's results cannot be written into `folder` (made if missing), or None.

    Asked before the work, so that a long run does not end in an error about its output.
    """
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"cannot write to {option} {folder}: {exc.strerror or exc}"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"cannot write to {option} {folder}: permission denied"
    return None


def output_file_problem(path: Path, option: str = "--output") -> str | None:
    """Why a command's output file cannot be written at `path` (its folder made if
    missing), or None; asked before the work, as `output_folder_problem` is."""
    if path.is_dir():
        return f"cannot write {option} {path}: it is a folder"
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"cannot write {option} {path}: {folder}: {exc.strerror or exc}"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"cannot write {option} {path}: permission denied"
    return None


def write_output_file(path: Path, text: str, option: str = "--output") -> None:
    """Write a command's output file; a path that cannot be written is bad input."""
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise BadInput(f"cannot write {option} {path}: {exc.strerror or exc}") from None
