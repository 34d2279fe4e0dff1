"""`muster describe`: one workload's state and history, or "why was my job evicted?"."""

from __future__ import annotations

import argparse
import json
from typing import Any, TextIO

from muster.admin.describe import describe_view
from muster.admin.render import format_describe
from muster.cli import EXIT_OK
from muster.cli.command import add_command, connect_to, deployment_arguments


def command(args: argparse.Namespace, out: TextIO) -> int:
    doc = describe_view(connect_to(args), args.workload)
    if args.json:
        out.write(json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")
    else:
        out.write(format_describe(doc))
    return EXIT_OK


def register(subparsers: Any) -> None:
    add_command(
        subparsers,
        "describe",
        command,
        "one workload's state and history: why was it evicted?",
        parents=[deployment_arguments()],
        workload=True,
        json=True,
    )
