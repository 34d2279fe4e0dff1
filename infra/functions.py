"""The control-plane functions, each with its own role: three behind their queues,
and the sweeper on a schedule.

Handlers are thin (`functions/<name>/handler.py`); every decision lives in the
`muster` package of the layer. The three queue consumers carry out the core's
effects (write state, publish lifecycle events, start and stop timers, request
requeues and admission passes, act on the cluster), so each role gets the same
narrow set of named resources, plus consuming its own queue. The sweeper reads
the table, finishes the pod expiries an invocation left halfway, and sends
messages to the admission and timer queues.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aws_cdk import ArnFormat, Duration, RemovalPolicy, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as event_targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from infra import constants as c
from infra.config import MusterConfig
from infra.layer import REPO_ROOT
from infra.network import FunctionNetwork

FUNCTIONS_DIR = REPO_ROOT / "functions"


@dataclass(frozen=True)
class FunctionWiring:
    """What the functions read and write (passed in so the construct stays a leaf)."""

    table: dynamodb.ITable
    bus: events.IEventBus
    bus_name: str
    queues: dict[str, sqs.IQueue]  # by queue name
    state_machine: sfn.IStateMachine
    state_machine_name: str
    layer: lambda_.ILayerVersion
    log_retention: logs.RetentionDays
    removal_policy: RemovalPolicy
    network: FunctionNetwork | None = None  # the cluster's VPC, when muster:vpcId is set


class ControlPlaneFunctions(Construct):
    """`ingest`, `timer` and `admission`."""

    def __init__(
        self, scope: Construct, construct_id: str, *, config: MusterConfig, wiring: FunctionWiring
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.cluster_arn = stack.format_arn(
            service="eks", resource="cluster", resource_name=config.cluster_name
        )
        environment = {
            c.ENV_TABLE_NAME: wiring.table.table_name,
            c.ENV_EVENT_BUS_NAME: wiring.bus_name,
            c.ENV_ADMISSION_QUEUE_URL: wiring.queues[c.ADMISSION].queue_url,
            c.ENV_TIMER_STATE_MACHINE_ARN: wiring.state_machine.state_machine_arn,
            c.ENV_CLUSTER_NAME: config.cluster_name,
            c.ENV_SETTINGS: config.settings_json,
            c.ENV_HISTORY_TTL_DAYS: str(config.history_ttl_days),
            c.ENV_TIMER_QUEUE_URL: wiring.queues[c.TIMER].queue_url,
            c.ENV_POWERTOOLS_SERVICE_NAME: c.SERVICE_NAME,
            c.ENV_POWERTOOLS_METRICS_NAMESPACE: c.METRICS_NAMESPACE,
            c.ENV_LOG_LEVEL: config.log_level,
        }
        if wiring.network is not None:
            environment.update(wiring.network.endpoint_environment)
        self.functions: dict[str, lambda_.Function] = {}
        self.roles: dict[str, iam.Role] = {}
        for name in c.FUNCTION_NAMES:
            own = dict(environment)
            if name == c.INGEST:
                # A complete snapshot's reconciliation goes out in slices on its own queue.
                own[c.ENV_INGEST_QUEUE_URL] = wiring.queues[c.INGEST].queue_url
            self.functions[name], self.roles[name] = self._function(name, own, wiring)
        self.sweeper, self.sweeper_role = self._sweeper(config, environment, wiring)

    def _sweeper(
        self, config: MusterConfig, environment: dict[str, str], wiring: FunctionWiring
    ) -> tuple[lambda_.Function, iam.Role]:
        """Every `sweepMinutes`, send again what a lost message should have moved on."""
        function, role = self._lambda(
            c.SWEEPER,
            "Muster sweeper: resends requeues, deadlines and admission passes that were lost",
            environment,
            wiring,
        )
        events.Rule(
            self,
            c.ID_SWEEP_SCHEDULE,
            description="Run the Muster sweeper",
            schedule=events.Schedule.rate(Duration.minutes(config.sweep_minutes)),
            targets=[event_targets.LambdaFunction(function, retry_attempts=0)],
        )
        table = wiring.table
        role.add_to_policy(
            iam.PolicyStatement(
                sid="SweepReads",
                actions=["dynamodb:GetItem", "dynamodb:Query"],  # the phase index, the record
                resources=[table.table_arn, f"{table.table_arn}/index/*"],
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                # The pod expiry an ended incarnation's invocation left halfway: pod items
                # and the workload's record updated, the expiry's index item deleted.
                sid="FinishPodExpiries",
                actions=["dynamodb:UpdateItem", "dynamodb:DeleteItem"],
                resources=[table.table_arn],
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                sid="SendAgain",
                actions=["sqs:SendMessage"],
                resources=[wiring.queues[c.ADMISSION].queue_arn, wiring.queues[c.TIMER].queue_arn],
            )
        )
        return function, role

    def _function(
        self, name: str, environment: dict[str, str], wiring: FunctionWiring
    ) -> tuple[lambda_.Function, iam.Role]:
        function, role = self._lambda(
            name, f"Muster {name}: consumes the {c.FUNCTION_QUEUE[name]} queue", environment, wiring
        )
        queue = wiring.queues[c.FUNCTION_QUEUE[name]]
        function.add_event_source_mapping(
            "QueueMapping",
            event_source_arn=queue.queue_arn,
            batch_size=c.BATCH_SIZE[name],
            max_batching_window=(
                Duration.seconds(c.BATCHING_WINDOW_SECONDS[name])
                if c.BATCHING_WINDOW_SECONDS[name]
                else None
            ),
            report_batch_item_failures=True,
            # Admission passes: as few at once as AWS allows (see the constant).
            max_concurrency=c.ADMISSION_MAX_CONCURRENCY if name == c.ADMISSION else None,
        )
        # What the event source mapping needs of its queue, and nothing more: no
        # handler changes a message's visibility or looks a queue's URL up.
        role.add_to_policy(
            iam.PolicyStatement(
                sid="ConsumeOwnQueue",
                actions=["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"],
                resources=[queue.queue_arn],
            )
        )
        self._grant_runtime_rights(role, wiring)
        if name == c.INGEST:
            role.add_to_policy(
                iam.PolicyStatement(
                    sid="SendReconcileSlices",
                    actions=["sqs:SendMessage"],
                    resources=[wiring.queues[c.INGEST].queue_arn],
                )
            )
        return function, role

    def _lambda(
        self, name: str, description: str, environment: dict[str, str], wiring: FunctionWiring
    ) -> tuple[lambda_.Function, iam.Role]:
        title = name.capitalize()
        role = iam.Role(
            self,
            f"{title}Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"Muster {name} function",
        )
        log_group = logs.LogGroup(
            self,
            f"{title}Logs",
            retention=wiring.log_retention,
            removal_policy=wiring.removal_policy,
        )
        function = lambda_.Function(
            self,
            title,
            description=description,
            runtime=lambda_.Runtime.PYTHON_3_12,
            architecture=lambda_.Architecture.X86_64,
            handler=c.HANDLER,
            code=lambda_.Code.from_asset(
                str(FUNCTIONS_DIR / name), exclude=["__pycache__", "*.pyc"]
            ),
            layers=[wiring.layer],
            role=role,
            log_group=log_group,
            timeout=Duration.seconds(c.FUNCTION_TIMEOUT_SECONDS[name]),
            memory_size=c.FUNCTION_MEMORY_MB[name],
            tracing=lambda_.Tracing.ACTIVE,
            environment=environment,
            **_placement(wiring.network),
        )
        log_group.grant_write(role)
        return function, role

    def _grant_runtime_rights(self, role: iam.Role, wiring: FunctionWiring) -> None:
        """Exactly the calls `muster.aws` makes, on this stack's own resources.

        DynamoDB: the item reads and writes of `DynamoStore` (transactions need only
        the per-item actions they contain) and queries of the table and its index;
        no Scan, batch write, stream or describe call is made. The consumed queue's
        rights are granted beside its event source mapping.
        """
        table = wiring.table
        role.add_to_policy(
            iam.PolicyStatement(
                sid="WorkloadRecords",
                actions=[
                    "dynamodb:GetItem",
                    "dynamodb:BatchGetItem",
                    "dynamodb:PutItem",
                    "dynamodb:UpdateItem",
                    "dynamodb:DeleteItem",
                    "dynamodb:Query",
                ],
                resources=[table.table_arn, f"{table.table_arn}/index/*"],
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                sid="PutLifecycleEvents",
                actions=["events:PutEvents"],
                resources=[wiring.bus.event_bus_arn],
                conditions={"StringEquals": {"events:source": c.CONTROLPLANE_SOURCE}},
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                sid="SendRequeues",
                actions=["sqs:SendMessage"],
                # the timer queue too: a timer signal that came early is re-armed
                resources=[wiring.queues[c.ADMISSION].queue_arn, wiring.queues[c.TIMER].queue_arn],
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                sid="StartReadinessTimers",
                actions=["states:StartExecution"],
                resources=[wiring.state_machine.state_machine_arn],
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                sid="StopReadinessTimers",
                actions=["states:StopExecution"],
                resources=[
                    Stack.of(self).format_arn(
                        service="states",
                        resource="execution",
                        resource_name=f"{wiring.state_machine_name}:*",
                        arn_format=ArnFormat.COLON_RESOURCE_NAME,
                    )
                ],
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                sid="DescribeManagedCluster",
                actions=["eks:DescribeCluster"],
                resources=[self.cluster_arn],
            )
        )


def _placement(network: FunctionNetwork | None) -> dict[str, Any]:
    """Where a function runs: Lambda's own network, or the cluster's VPC."""
    if network is None:
        return {}
    return {
        "vpc": network.vpc,
        "vpc_subnets": network.subnets,
        "security_groups": network.security_groups,
    }
