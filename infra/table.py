"""The state table: workloads, pods, the admission queue index, the lock, the history."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from constructs import Construct

from infra import constants as c


class StateTable(Construct):
    """One on-demand table with a generic key schema and one GSI (`gsi1`).

    History items carry `expiresAt` so DynamoDB removes them after the
    configured number of days; the rest lives as long as its workload.
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, removal_policy: RemovalPolicy
    ) -> None:
        super().__init__(scope, construct_id)
        self.table = dynamodb.Table(
            self,
            "Table",
            partition_key=dynamodb.Attribute(
                name=c.PARTITION_KEY, type=dynamodb.AttributeType.STRING
            ),
            sort_key=dynamodb.Attribute(name=c.SORT_KEY, type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            time_to_live_attribute=c.TTL_ATTRIBUTE,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            deletion_protection=removal_policy == RemovalPolicy.RETAIN,
            removal_policy=removal_policy,
        )
        self.table.add_global_secondary_index(
            index_name=c.GSI1_NAME,
            partition_key=dynamodb.Attribute(
                name=c.GSI1_PARTITION_KEY, type=dynamodb.AttributeType.STRING
            ),
            sort_key=dynamodb.Attribute(name=c.GSI1_SORT_KEY, type=dynamodb.AttributeType.STRING),
            projection_type=dynamodb.ProjectionType.ALL,
        )
