"""Lambda-shaped inputs for handlers: SQS batch events and a context object."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


def sqs_record(body: str, message_id: str, queue: str = "muster-ingest") -> dict[str, Any]:
    return {
        "messageId": message_id,
        "receiptHandle": f"handle-{message_id}",
        "body": body,
        "attributes": {
            "ApproximateReceiveCount": "1",
            "SentTimestamp": "1764493200000",
            "SenderId": "AIDAEXAMPLE",
            "ApproximateFirstReceiveTimestamp": "1764493200001",
        },
        "messageAttributes": {},
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": f"arn:aws:sqs:us-east-1:123456789012:{queue}",
        "awsRegion": "us-east-1",
    }


def sqs_event(*bodies: str | dict[str, Any], queue: str = "muster-ingest") -> dict[str, Any]:
    return {
        "Records": [
            sqs_record(b if isinstance(b, str) else json.dumps(b), f"m{i}", queue)
            for i, b in enumerate(bodies)
        ]
    }


def sqs_event_from_messages(messages: list[dict[str, Any]], queue: str) -> dict[str, Any]:
    """A Lambda event made of messages really received from a queue."""
    return {
        "Records": [
            {**sqs_record(m["Body"], m["MessageId"], queue), "receiptHandle": m["ReceiptHandle"]}
            for m in messages
        ]
    }


@dataclass
class LambdaContext:
    function_name: str = "muster-test"
    memory_limit_in_mb: int = 256
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:muster-test"
    aws_request_id: str = "00000000-0000-0000-0000-000000000000"
    function_version: str = "$LATEST"

    def get_remaining_time_in_millis(self) -> int:
        return 30_000
