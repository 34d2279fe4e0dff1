"""The optional tuner (`muster:tuner`): `muster tune --on aws` as a Distributed Map.

A bucket holds each run (`runs/<id>/`: the scenario file, its trace, the items
file and the items' results; `muster.aws.tune_map` describes the layout), a
function runs one item (`functions/tuner`, `muster.lambdas.tune`: one setting on
one seed, with the simulator in a layer of its own, so the control plane's layer
is unchanged), and a state machine's distributed map reads the items file, hands
each item to the function with at most `muster:tunerConcurrency` at once, and
writes the items' summaries and failures under `map/`.

Rights, each on this bucket and this function only: the function reads a run's
files and writes its results; the state machine reads the items file, invokes
the function, writes the map's results and starts and follows its own child
executions.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import ArnFormat, Duration, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from infra import constants as c
from infra.layer import FUNCTIONS_DIR, LayerBuilder, MusterLayer, tuner_handler_files
from infra.security import state_machine_role

RUNS = "runs"
MAP_RESULTS = "map"


class Tuner(Construct):
    """Bucket, function (with its layer) and the state machine of the map."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        concurrency: int,
        log_retention: logs.RetentionDays,
        removal_policy: RemovalPolicy,
        layer_builder: LayerBuilder | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.bucket = s3.Bucket(
            self,
            "Bucket",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            versioned=False,
            removal_policy=removal_policy,
            lifecycle_rules=[
                s3.LifecycleRule(expiration=Duration.days(c.TUNER_RUN_DAYS), prefix=f"{RUNS}/"),
                s3.LifecycleRule(
                    expiration=Duration.days(c.TUNER_RUN_DAYS), prefix=f"{MAP_RESULTS}/"
                ),
                s3.LifecycleRule(abort_incomplete_multipart_upload_after=Duration.days(1)),
            ],
        )
        self.function = self._function(log_retention, removal_policy, layer_builder)
        self.state_machine_name = f"{stack.stack_name}-{c.TUNER_STATE_MACHINE_SUFFIX}"
        self.state_machine = self._state_machine(concurrency, log_retention, removal_policy)

    def _function(
        self,
        log_retention: logs.RetentionDays,
        removal_policy: RemovalPolicy,
        layer_builder: LayerBuilder | None,
    ) -> lambda_.Function:
        layer = MusterLayer(
            self,
            "Layer",
            builder=layer_builder,
            entry_points=tuner_handler_files(),
            description="muster's simulator and its run-time dependencies (the tuner)",
        )
        self.function_role = iam.Role(
            self,
            "FunctionRole",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description="Muster tuner function",
        )
        log_group = logs.LogGroup(
            self, "FunctionLogs", retention=log_retention, removal_policy=removal_policy
        )
        function = lambda_.Function(
            self,
            "Function",
            description="Muster tuner: simulates one setting on one seed of muster tune --on aws",
            runtime=lambda_.Runtime.PYTHON_3_12,
            architecture=lambda_.Architecture.X86_64,
            handler=c.HANDLER,
            code=lambda_.Code.from_asset(
                str(FUNCTIONS_DIR / c.TUNER), exclude=["__pycache__", "*.pyc"]
            ),
            layers=[layer.layer],
            role=self.function_role,
            log_group=log_group,
            timeout=Duration.minutes(c.TUNER_TIMEOUT_MINUTES),
            memory_size=c.TUNER_MEMORY_MB,
            tracing=lambda_.Tracing.ACTIVE,
            environment={
                c.ENV_TUNER_BUCKET: self.bucket.bucket_name,
                c.ENV_POWERTOOLS_SERVICE_NAME: c.SERVICE_NAME,
                c.ENV_LOG_LEVEL: "INFO",
            },
        )
        log_group.grant_write(self.function_role)
        self.function_role.add_to_policy(
            iam.PolicyStatement(
                sid="ReadRunFiles",  # the scenario and its trace (`muster.lambdas.tune`)
                actions=["s3:GetObject"],
                resources=[self.bucket.arn_for_objects(f"{RUNS}/*/scenario/*")],
            )
        )
        self.function_role.add_to_policy(
            iam.PolicyStatement(
                sid="WriteResults",
                actions=["s3:PutObject"],
                resources=[self.bucket.arn_for_objects(f"{RUNS}/*/results/*")],
            )
        )
        return function

    def _state_machine(
        self, concurrency: int, log_retention: logs.RetentionDays, removal_policy: RemovalPolicy
    ) -> sfn.StateMachine:
        stack = Stack.of(self)
        # The map as Amazon States Language, so that its rights are exactly the ones
        # granted below (CDK's own map grants reads of the whole bucket).
        runs = sfn.CustomState(self, "Settings", state_json=self.map_state(concurrency))
        self.role, own_arn = state_machine_role(
            self,
            "StateMachineRole",
            self.state_machine_name,
            "Muster tuner: run a tuning's items on the tuner function",
        )
        self._grant_map_rights(own_arn)
        self.log_group = logs.LogGroup(
            self,
            "Logs",
            log_group_name=f"/aws/vendedlogs/states/{stack.stack_name}-tuner",
            retention=log_retention,
            removal_policy=removal_policy,
        )
        machine = sfn.StateMachine(
            self,
            "StateMachine",
            state_machine_name=self.state_machine_name,
            role=self.role,
            definition_body=sfn.DefinitionBody.from_chainable(runs),
            state_machine_type=sfn.StateMachineType.STANDARD,
            comment="Muster tuner: every setting of a muster tune --on aws run.",
            tracing_enabled=True,
            logs=sfn.LogOptions(destination=self.log_group, level=sfn.LogLevel.ALL),
        )
        machine.node.add_dependency(self.role)
        return machine

    def map_state(self, concurrency: int) -> dict[str, Any]:
        """The distributed map: the run's items file in, each item with the run's
        files beside it to the function, the items' summaries out to `map/`."""
        partition = Stack.of(self).partition
        return {
            "Type": "Map",
            "Comment": "Every item of the run's items file, at most muster:tunerConcurrency at once.",
            "ItemReader": {
                "Resource": f"arn:{partition}:states:::s3:getObject",
                "ReaderConfig": {"InputType": "JSON"},
                "Parameters": {"Bucket": self.bucket.bucket_name, "Key.$": "$.items"},
            },
            "ItemSelector": {
                "prefix.$": "$.prefix",
                "scenario.$": "$.scenario",
                "files.$": "$.files",
                "item.$": "$$.Map.Item.Value",
            },
            "MaxConcurrency": concurrency,
            "ItemProcessor": {
                # Standard child executions: a week's simulation can outlast an
                # Express execution's five minutes.
                "ProcessorConfig": {"Mode": "DISTRIBUTED", "ExecutionType": "STANDARD"},
                "StartAt": "SimulateSetting",
                "States": {
                    "SimulateSetting": {
                        "Type": "Task",
                        "Comment": "One setting on one seed; the result is written to the bucket.",
                        "Resource": self.function.function_arn,
                        "Retry": [
                            {
                                "ErrorEquals": [
                                    "Lambda.ServiceException",
                                    "Lambda.AWSLambdaException",
                                    "Lambda.SdkClientException",
                                    "Lambda.TooManyRequestsException",
                                ],
                                "IntervalSeconds": 2,
                                "MaxAttempts": 6,
                                "BackoffRate": 2,
                            }
                        ],
                        "End": True,
                    }
                },
            },
            "ResultWriter": {
                "Resource": f"arn:{partition}:states:::s3:putObject",
                "Parameters": {"Bucket": self.bucket.bucket_name, "Prefix": MAP_RESULTS},
            },
            "ResultPath": None,
            "End": True,
        }

    def _grant_map_rights(self, own_arn: str) -> None:
        """The map's calls: read the items file, invoke the function, write the
        map's results, start and follow its own child executions."""
        stack = Stack.of(self)
        executions = stack.format_arn(
            service="states",
            resource="execution",
            resource_name=f"{self.state_machine_name}/*",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        for sid, actions, resources in (
            ("ReadItems", ["s3:GetObject"], [self.bucket.arn_for_objects(f"{RUNS}/*/items.json")]),
            (
                "WriteMapResults",
                ["s3:PutObject", "s3:ListMultipartUploadParts", "s3:AbortMultipartUpload"],
                [self.bucket.arn_for_objects(f"{MAP_RESULTS}/*")],
            ),
            ("SimulateSettings", ["lambda:InvokeFunction"], [self.function.function_arn]),
            ("StartChildExecutions", ["states:StartExecution"], [own_arn]),
            (
                "FollowChildExecutions",
                ["states:DescribeExecution", "states:StopExecution"],
                [executions],
            ),
        ):
            self.role.add_to_policy(
                iam.PolicyStatement(sid=sid, actions=actions, resources=resources)
            )
