"""cdk-nag AwsSolutions findings acknowledged for this stack, each with its reason.

Acknowledgments are scoped to the construct they concern (a path below the
stack) and, for wildcard findings, to the exact resource pattern, so a new
wildcard elsewhere still fails the synth.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Acknowledgment, CfnElement, Stack, Validations

from infra import constants as c

_XRAY = (
    "X-Ray's PutTraceSegments and PutTelemetryRecords and CloudWatch Logs' log-delivery "
    "actions support no resource-level permissions; '*' is the only resource they accept."
)
_RUNTIME = (
    "The Lambda layer is built for CPython 3.12 (the runtime both the functions and their "
    "compiled dependencies are tested with); the runtime is raised deliberately, with the layer."
)
_INDEX = (
    "The state table's global secondary index (gsi1, the admission queue index) is read "
    "through '<table>/index/*'; the table has no other index."
)
_EXECUTIONS = (
    "Timer executions are named at run time (one per workload, attempt, kind and episode); "
    "stopping and describing them needs 'execution:<timer state machine>:*', which names "
    "only this state machine's executions."
)

# construct path below the stack -> [(rule id, reason)]
ACKNOWLEDGED: dict[str, list[tuple[str, str]]] = {
    c.ID_FUNCTIONS: [
        ("AwsSolutions-IAM5[Resource::*]", _XRAY),
        ("AwsSolutions-L1", _RUNTIME),
    ],
    c.ID_TIMERS: [("AwsSolutions-IAM5[Resource::*]", _XRAY)],
}


def acknowledge_findings(stack: Stack, *, table: CfnElement, timer_state_machine_name: str) -> None:
    """Acknowledge the findings above, wildcard ones for their exact resource only."""
    table_id = stack.resolve(stack.get_logical_id(table))
    exact = {
        c.ID_FUNCTIONS: [
            (f"AwsSolutions-IAM5[Resource::<{table_id}.Arn>/index/*]", _INDEX),
            (
                "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:states:<AWS::Region>:"
                f"<AWS::AccountId>:execution:{timer_state_machine_name}:*]",
                _EXECUTIONS,
            ),
        ]
    }
    for acknowledged in (ACKNOWLEDGED, exact):
        for path, rules in acknowledged.items():
            scope = stack.node.find_child(path)
            for rule, reason in rules:
                Validations.of(scope).acknowledge(
                    Acknowledgment(id=f"AwsSolutions::{rule}", reason=reason)
                )


_TUNER_BUCKET_LOGS = (
    "The tuner's bucket holds a tuning's own inputs and results for a month; its reads "
    "and writes are the tuner function's and the state machine's, which log them."
)

_TUNER_OBJECTS = (
    "A tuning's objects are named at run time (runs/<id>/...); each grant names its kind of "
    "object in this bucket only: a run's scenario files, its items file, its results, the "
    "map's results."
)
_TUNER_CHILDREN = (
    "A distributed map's child executions are named at run time; "
    "'execution:<tuner state machine>/*' names only this state machine's."
)


def acknowledge_tuner_findings(stack: Stack, tuner: Any) -> None:
    """The optional tuner's findings (infra/tuner.py); wildcards for their resource only."""
    bucket_id = stack.resolve(stack.get_logical_id(tuner.bucket.node.default_child))
    scope = stack.node.find_child(c.ID_TUNER)
    objects = ("runs/*/scenario/*", "runs/*/results/*", "runs/*/items.json", "map/*")
    rules = [
        ("AwsSolutions-S1", _TUNER_BUCKET_LOGS),
        ("AwsSolutions-IAM5[Resource::*]", _XRAY),
        ("AwsSolutions-L1", _RUNTIME),
        *((f"AwsSolutions-IAM5[Resource::<{bucket_id}.Arn>/{o}]", _TUNER_OBJECTS) for o in objects),
        (
            "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:states:<AWS::Region>:"
            f"<AWS::AccountId>:execution:{tuner.state_machine_name}/*]",
            _TUNER_CHILDREN,
        ),
    ]
    for rule, reason in rules:
        Validations.of(scope).acknowledge(Acknowledgment(id=f"AwsSolutions::{rule}", reason=reason))
