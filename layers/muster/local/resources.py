"""The control plane's AWS resources on moto, built as the stack defines them.

Queues (each with a DLQ), the table with `gsi1` and TTL, the bus with the rule
that routes the agent's events into the ingest queue, and the timer state
machine with the stack's definition. Integration tests and benchmarks create
them in a moto session.
"""

from __future__ import annotations

import json
from typing import Any

import boto3

from muster.schema import AGENT_SOURCE

CLUSTER = "training"


def timer_definition(timer_queue_url: str) -> dict[str, Any]:
    """The stack's timer state machine (wait until the deadline, then signal the timer queue)."""
    return {
        "Comment": "Muster readiness timer: wait until the deadline, then signal it",
        "StartAt": "WaitUntilDeadline",
        "States": {
            "WaitUntilDeadline": {
                "Type": "Wait",
                "TimestampPath": "$.deadline",
                "Next": "SignalDeadlineReached",
            },
            "SignalDeadlineReached": {
                "Type": "Task",
                "Resource": "arn:aws:states:::sqs:sendMessage",
                "Parameters": {"QueueUrl": timer_queue_url, "MessageBody.$": "$"},
                "End": True,
            },
        },
    }


def create_resources(session: boto3.Session, prefix: str = "muster") -> dict[str, str]:
    ddb = session.client("dynamodb")
    sqs = session.client("sqs")
    events = session.client("events")
    sfn = session.client("stepfunctions")
    table = f"{prefix}-state"
    ddb.create_table(
        TableName=table,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[
            {"AttributeName": n, "AttributeType": "S"} for n in ("pk", "sk", "gsi1pk", "gsi1sk")
        ],
        KeySchema=[
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "gsi1",
                "KeySchema": [
                    {"AttributeName": "gsi1pk", "KeyType": "HASH"},
                    {"AttributeName": "gsi1sk", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
    )
    ddb.update_time_to_live(
        TableName=table,
        TimeToLiveSpecification={"Enabled": True, "AttributeName": "expiresAt"},
    )
    urls: dict[str, str] = {}
    for name in ("ingest", "timer", "admission", "observer"):
        dlq = sqs.create_queue(QueueName=f"{prefix}-{name}-dlq")["QueueUrl"]
        dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        urls[name] = sqs.create_queue(
            QueueName=f"{prefix}-{name}",
            Attributes={
                "VisibilityTimeout": "180",
                "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 5}),
            },
        )["QueueUrl"]

    def arn(url: str) -> str:
        return sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]

    bus = f"{prefix}-bus"
    events.create_event_bus(Name=bus)
    events.put_rule(
        Name="agent-to-ingest",
        EventBusName=bus,
        EventPattern=json.dumps({"source": [AGENT_SOURCE]}),
    )
    events.put_targets(
        Rule="agent-to-ingest",
        EventBusName=bus,
        Targets=[{"Id": "ingest", "Arn": arn(urls["ingest"])}],
    )
    # What a user would add: lifecycle events to their own queue (here, to read them back).
    events.put_rule(
        Name="lifecycle-observer",
        EventBusName=bus,
        EventPattern=json.dumps({"source": ["muster.controlplane"]}),
    )
    events.put_targets(
        Rule="lifecycle-observer",
        EventBusName=bus,
        Targets=[{"Id": "observer", "Arn": arn(urls["observer"])}],
    )
    machine = sfn.create_state_machine(
        name=f"{prefix}-timer",
        definition=json.dumps(timer_definition(urls["timer"])),
        roleArn="arn:aws:iam::123456789012:role/muster-timer",
        type="STANDARD",
    )["stateMachineArn"]
    return {
        "MUSTER_TABLE_NAME": table,
        "MUSTER_EVENT_BUS_NAME": bus,
        "MUSTER_ADMISSION_QUEUE_URL": urls["admission"],
        "MUSTER_TIMER_STATE_MACHINE_ARN": machine,
        "MUSTER_CLUSTER_NAME": CLUSTER,
        "MUSTER_TIMER_QUEUE_URL": urls["timer"],
        "ingest": urls["ingest"],
        "timer": urls["timer"],
        "observer": urls["observer"],
    }
