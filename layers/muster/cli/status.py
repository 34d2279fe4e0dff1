"""`muster status`: every workload by queue and phase, and who may be admitted next."""

from __future__ import annotations

import argparse
import json
from typing import Any, TextIO

from muster.admin.render import format_status
from muster.admin.status import status_view
from muster.cli import EXIT_OK
from muster.cli.command import add_command, connect_to, deployment_arguments


def command(args: argparse.Namespace, out: TextIO) -> int:
    doc = status_view(connect_to(args))
    if args.json:
        out.write(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    else:
        out.write(format_status(doc, include_finished=args.all))
    return EXIT_OK


def register(subparsers: Any) -> None:
    add_command(
        subparsers,
        "status",
        command,
        "workloads by phase and queue, and who holds admission",
        parents=[deployment_arguments()],
        json=True,
    ).add_argument("--all", action="store_true", help="list finished workloads too")
