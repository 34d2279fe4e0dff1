"""The readiness timers: one Standard execution per (workload, attempt, kind, episode).

Each execution waits until the deadline in its input and then sends its input,
unchanged, to the timer queue. Going through SQS rather than a Lambda task
keeps one path for the cloud and the local mode, and gives the timer function
batching, retries and a DLQ. Stopping an execution early is an optimisation:
the timer function re-checks the workload's state and attempt.
"""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from infra import constants as c
from infra.security import state_machine_role


class TimerStateMachine(Construct):
    """`WaitUntilDeadline` (Wait on `$.deadline`) then `SignalDeadlineReached` (SQS)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        timer_queue: sqs.IQueue,
        log_retention: logs.RetentionDays,
        removal_policy: RemovalPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        wait = sfn.Wait(
            self,
            c.STATE_WAIT,
            time=sfn.WaitTime.timestamp_path(c.TIMER_DEADLINE_PATH),
            comment="Sleep until the workload's readiness deadline (RFC 3339, UTC).",
        )
        signal = tasks.SqsSendMessage(
            self,
            c.STATE_SIGNAL,
            queue=timer_queue,
            message_body=sfn.TaskInput.from_json_path_at("$"),
            comment="Hand the timer (workload, attempt, kind, episode) to the timer function.",
        )
        signal.add_retry(
            errors=["States.ALL"],
            interval=Duration.seconds(2),
            max_attempts=6,
            backoff_rate=2.0,
        )
        self.log_group = logs.LogGroup(
            self,
            "Logs",
            # The vendedlogs prefix keeps CloudWatch Logs' resource policy small.
            log_group_name=f"/aws/vendedlogs/states/{Stack.of(self).stack_name}-timers",
            retention=log_retention,
            removal_policy=removal_policy,
        )
        # A fixed name: operators find it in the console, the functions' rights name
        # its executions (`execution:<name>:*`), and its role trusts it by name.
        stack = Stack.of(self)
        self.state_machine_name = f"{stack.stack_name}-{c.TIMER_STATE_MACHINE_SUFFIX}"
        self.role, _ = state_machine_role(
            self,
            "Role",
            self.state_machine_name,
            "Muster readiness timers: signal the timer queue",
        )
        self.state_machine = sfn.StateMachine(
            self,
            c.ID_STATE_MACHINE,
            state_machine_name=self.state_machine_name,
            role=self.role,
            definition_body=sfn.DefinitionBody.from_chainable(wait.next(signal)),
            state_machine_type=sfn.StateMachineType.STANDARD,
            comment="Muster readiness timer: wait until the deadline, then signal the timer queue.",
            tracing_enabled=True,
            logs=sfn.LogOptions(
                destination=self.log_group, level=sfn.LogLevel.ALL, include_execution_data=True
            ),
        )
