"""Stores for tests that run one scenario on the in-memory store and on DynamoDB (moto)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import boto3
from moto import mock_aws
from muster.aws.dynamo import DynamoStore
from muster.local.resources import create_resources


@contextmanager
def dynamo_store(name: str = "item") -> Iterator[DynamoStore]:
    """A `DynamoStore` on a table made as the stack makes it, in moto."""
    with mock_aws():
        session = boto3.Session(
            region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
        )
        names = create_resources(session, name)
        yield DynamoStore(session.client("dynamodb"), names["MUSTER_TABLE_NAME"], "training")


def raw_items(store: DynamoStore, key: str) -> list[dict[str, Any]]:
    """Every item of a workload's partition, as DynamoDB holds it."""
    return list(
        store._query(
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": f"WL#{key}"}},
            ConsistentRead=True,
        )
    )


def _number_size(text: str) -> int:
    digits = text.lstrip("-").replace(".", "").lstrip("0") or "0"
    return (len(digits.rstrip("0") or "0") + 1) // 2 + 1


def _value_size(value: dict[str, Any]) -> int:
    ((kind, v),) = value.items()
    if kind == "S":
        return len(v.encode())
    if kind == "N":
        return _number_size(v)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "M":
        return 3 + sum(len(k.encode()) + 1 + _value_size(x) for k, x in v.items())
    if kind == "L":
        return 3 + sum(1 + _value_size(x) for x in v)
    raise ValueError(kind)


def item_size(item: dict[str, Any]) -> int:
    """An item's size by DynamoDB's rules: attribute names in UTF-8 plus each value
    (strings in UTF-8 bytes, numbers about one byte per two significant digits plus one,
    booleans one byte)."""
    return sum(len(name.encode()) + _value_size(value) for name, value in item.items())
