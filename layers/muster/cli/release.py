"""`muster release`: lift a quarantine once its cause is fixed."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from muster.admin.release import release
from muster.cli import EXIT_OK
from muster.cli.command import add_command, connect_to, deployment_arguments


def command(args: argparse.Namespace, out: TextIO) -> int:
    """The admission function tries the workload's waiting effects again on its next pass."""
    key, effects = release(connect_to(args), args.workload)
    pending = ", ".join(effects) or "none"
    out.write(
        f"{key} released; the admission function carries out its waiting effects "
        f"({pending}) on its next pass, which was requested\n"
    )
    return EXIT_OK


def register(subparsers: Any) -> None:
    add_command(
        subparsers,
        "release",
        command,
        "release a quarantined workload once the cause is fixed (its effects are tried again)",
        parents=[deployment_arguments()],
        workload=True,
    )
