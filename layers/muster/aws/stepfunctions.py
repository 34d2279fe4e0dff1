"""Readiness timers as Step Functions executions, one per (workload, attempt, kind, episode).

The execution name is derived from those four, so a retried start is a no-op
(ExecutionAlreadyExists) and an operator finds a workload's timer in the console
by searching for its namespace and name.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from muster.core import Timer
from muster.core.keys import KIND_MARKER
from muster.runtime.messages import timer_input

if TYPE_CHECKING:
    from mypy_boto3_stepfunctions import SFNClient

MAX_NAME = 80
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def execution_name(workload: str, timer: Timer) -> str:
    """e.g. `team-a.bert-large.a3.startup.e1.5f1c2a9b`; long names keep a hash for uniqueness."""
    suffix = f".a{timer.attempt}.{timer.kind.value}.e{timer.episode}"
    if timer.incarnation:
        # A new object under the same name numbers its attempts afresh.
        suffix += f".{_UNSAFE.sub('-', timer.incarnation)}"
    # '.' for the '/' and '_' for the kind's '@' (neither occurs in a namespace or name), so
    # `ns/x@jobset` and a Job named `x-jobset` never share a name.
    base = workload.replace("/", ".").replace(KIND_MARKER, "_")
    base = _UNSAFE.sub("-", base).strip("-.") or "workload"
    if len(base) + len(suffix) > MAX_NAME:
        digest = hashlib.sha256(workload.encode()).hexdigest()[:8]
        base = f"{base[: MAX_NAME - len(suffix) - 9]}-{digest}"
    return base + suffix


def execution_arn(state_machine_arn: str, name: str) -> str:
    prefix, _, machine = state_machine_arn.rpartition(":stateMachine:")
    return f"{prefix}:execution:{machine}:{name}"


class StepFunctionsTimers:
    def __init__(self, client: SFNClient, state_machine_arn: str) -> None:
        self.client = client
        self.state_machine_arn = state_machine_arn

    def start(self, workload: str, timer: Timer) -> None:
        try:
            self.client.start_execution(
                stateMachineArn=self.state_machine_arn,
                name=execution_name(workload, timer),
                input=json.dumps(timer_input(workload, timer)),
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ExecutionAlreadyExists":
                raise

    def stop(self, workload: str, timer: Timer) -> None:
        """Best effort by design: the timer handler re-checks state before evicting."""
        arn = execution_arn(self.state_machine_arn, execution_name(workload, timer))
        try:
            self.client.stop_execution(executionArn=arn, cause="gang became ready or left")
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in (
                "ExecutionDoesNotExist",
                "ExecutionNotFound",
            ):
                raise
