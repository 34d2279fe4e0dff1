"""The table's keys and attribute values, what counts as a lost race, and its paged Query."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

STATE = "STATE"
POD_PREFIX = "POD#"
HISTORY_PREFIX = "HIST#"
LEDGER_KEY = {"pk": {"S": "ADMISSION"}, "sk": {"S": "LEDGER"}}
RECENT_PREFIX = "RECENT#"
QUARANTINE_PK = "QUARANTINE"
NODES_PK = "NODES"
EXPIRING_PK = "EXPIRING"
INDEX = "gsi1"
MAX_TRANSACTION = 100
DAY = 86400


def workload_pk(key: str) -> str:
    return f"WL#{key}"


def string(value: str) -> dict[str, str]:
    return {"S": value}


def number(value: float) -> dict[str, str]:
    return {"N": str(int(value)) if float(value).is_integer() else repr(value)}


CONFLICT_REASONS = frozenset({"ConditionalCheckFailed", "TransactionConflict"})


def is_conflict(exc: ClientError) -> bool:
    """A lost race: a failed condition, or a transaction cancelled only for such reasons.

    A transaction cancelled for anything else (a validation error, an item too
    large, throttling) is not a conflict: deciding again would fail again.
    """
    code = exc.response.get("Error", {}).get("Code", "")
    if code == "ConditionalCheckFailedException":
        return True
    if code != "TransactionCanceledException":
        return False
    reasons = [r.get("Code") or "None" for r in exc.response.get("CancellationReasons") or []]
    if not reasons:
        # No reasons given: the message lists them, e.g. "[None, ConditionalCheckFailed]".
        message = exc.response.get("Error", {}).get("Message", "")
        listed = message.partition("reasons [")[2].partition("]")[0]
        reasons = [r.strip() for r in listed.split(",") if r.strip()]
    failing = {r for r in reasons if r != "None"}
    return bool(failing) and failing <= CONFLICT_REASONS


class Table:
    """One table and how long what expires in it lives; each kind of item adds its requests."""

    def __init__(
        self,
        client: DynamoDBClient,
        table: str,
        cluster: str,
        history_ttl_days: int = 30,
        tombstone_ttl_hours: int = 24,
    ) -> None:
        self.client = client
        self.table = table
        self.cluster = cluster
        self.history_ttl = history_ttl_days * DAY
        self.tombstone_ttl = tombstone_ttl_hours * 3600

    def _query(self, **kwargs: Any) -> Iterable[dict[str, Any]]:
        request = {"TableName": self.table, **kwargs}
        while True:
            reply = self.client.query(**request)
            yield from reply.get("Items", [])
            last = reply.get("LastEvaluatedKey")
            if not last:
                return
            request["ExclusiveStartKey"] = last
