"""The administrator's commands: `status`, `describe`, `settings`, `reactivate`, `release`.

They work against a deployed stack: the stack's outputs name the ingest
function, and that function's environment names the table, the requeue queue
and the deployment's settings, so the commands read and write exactly what the
functions use (`deployment`). With `--endpoint` they talk to a local deployment
(`muster local`, or `python -m infra.deploy_local --serve`) instead of AWS.

One module per command; `deployment` finds the stack and loads its settings
(one path, one behaviour for a bad settings record), `render` turns views into
text, `errors` holds the exit codes and the handler that reports failures.
Nothing here decides anything: views come from `muster.runtime.views`, settings
are validated by the core's parser, and `reactivate` goes through the same
`ControlPlane` as the Lambdas.
"""

from __future__ import annotations

import argparse
from typing import Any

from muster import contract
from muster.admin import describe, reactivate, release, settings, status
from muster.admin.command import AdminError, add_command, reporting_handler
from muster.admin.deployment import connect
from muster.cli import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_FAILED",
    "EXIT_OK",
    "AdminError",
    "connect",
    "deployment_arguments",
    "register",
    "reporting_handler",
]


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


def register(subparsers: Any) -> None:
    target = [deployment_arguments()]
    add_command(
        subparsers,
        "status",
        status.command,
        "workloads by phase and queue, and who holds admission",
        parents=target,
        json=True,
    ).add_argument("--all", action="store_true", help="list finished workloads too")
    add_command(
        subparsers,
        "describe",
        describe.command,
        "one workload's state and history: why was it evicted?",
        parents=target,
        workload=True,
        json=True,
    )
    settings.register(subparsers, target[0])
    add_command(
        subparsers,
        "reactivate",
        reactivate.command,
        "return a Deactivated workload to its queue (requeue count reset)",
        parents=target,
        workload=True,
    )
    add_command(
        subparsers,
        "release",
        release.command,
        "release a quarantined workload once the cause is fixed (its effects are tried again)",
        parents=target,
        workload=True,
    )
