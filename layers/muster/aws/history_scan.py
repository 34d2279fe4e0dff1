"""Every workload's history entries written since a moment, read from the state table.

One paginated Scan with a filter (history items are `HIST#...` sort keys under each
workload's partition, see `muster.aws.dynamo`): it reads the whole table once,
which is what an export of a week of history costs whatever its layout. Only the
operator's `muster history export` calls it, with the operator's credentials; the
functions never do (their roles grant no Scan).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from muster.aws.dynamo.table import HISTORY_PREFIX

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


def scan_history(
    client: DynamoDBClient, table: str, since: float
) -> dict[str, list[dict[str, Any]]]:
    """Workload key -> its history entries at or after `since`, in the table's order."""
    request: dict[str, Any] = {
        "TableName": table,
        "FilterExpression": "begins_with(sk, :h) AND #at >= :since",
        "ExpressionAttributeNames": {"#at": "at"},
        "ExpressionAttributeValues": {":h": {"S": HISTORY_PREFIX}, ":since": {"N": repr(since)}},
    }
    found: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    while True:
        reply = client.scan(**request)
        for item in reply.get("Items", []):
            key = item["pk"]["S"].removeprefix("WL#")
            found.setdefault(key, []).append(
                (
                    item["sk"]["S"],
                    {
                        "event": item["event"]["S"],
                        "at": float(item["at"]["N"]),
                        "version": int(item["version"]["N"]),
                        "detail": json.loads(item["detail"]["S"]),
                    },
                )
            )
        last = reply.get("LastEvaluatedKey")
        if not last:
            break
        request["ExclusiveStartKey"] = last
    return {
        key: [e for _, e in sorted(entries, key=lambda p: p[0])] for key, entries in found.items()
    }
