"""`muster reactivate`: return a Deactivated workload to its queue, through the control plane."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from muster.admin.reactivate import reactivate
from muster.cli import EXIT_OK
from muster.cli.command import add_command, connect_to, deployment_arguments


def command(args: argparse.Namespace, out: TextIO) -> int:
    key, status_stale = reactivate(connect_to(args), args.workload)
    out.write(
        f"{key} reactivated: Pending again with its requeue count reset; "
        "admission requested (the admission function admits it when there is room)\n"
    )
    if status_stale:
        out.write(
            "  its muster.io status on the cluster object still says Deactivated until "
            "the admission function admits it\n"
        )
    return EXIT_OK


def register(subparsers: Any) -> None:
    add_command(
        subparsers,
        "reactivate",
        command,
        "return a Deactivated workload to its queue (requeue count reset)",
        parents=[deployment_arguments()],
        workload=True,
    )
