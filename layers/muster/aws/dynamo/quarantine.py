"""Quarantine: failed tries at a workload's outbox, its flag, the index of quarantined ones."""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import ClientError

from muster.aws.dynamo.table import (
    QUARANTINE_PK,
    STATE,
    Table,
    is_conflict,
    number,
    string,
    workload_pk,
)
from muster.runtime.codec import dumps
from muster.runtime.ports import Conflict, Quarantine


def _quarantine_doc(q: Quarantine) -> str:
    return dumps({"error": q.error, "effect": q.effect, "tries": q.tries, "since": q.since})


def decode_quarantine(item: dict[str, Any]) -> Quarantine | None:
    if "quarantine" not in item:
        return None
    doc = json.loads(item["quarantine"]["S"])
    return Quarantine(str(doc["error"]), str(doc["effect"]), int(doc["tries"]), float(doc["since"]))


class QuarantineItems(Table):
    """A workload whose outbox keeps failing is set aside until an operator releases it."""

    def record_failure(self, key: str, version: int, error: str) -> int:
        try:
            reply = self.client.update_item(
                TableName=self.table,
                Key={"pk": string(workload_pk(key)), "sk": string(STATE)},
                UpdateExpression="SET lastError = :e ADD failures :one",
                ConditionExpression="version = :v",
                ExpressionAttributeValues={
                    ":v": number(version),
                    ":e": string(error),
                    ":one": number(1),
                },
                ReturnValues="UPDATED_NEW",
            )
        except ClientError as exc:
            if is_conflict(exc):
                raise Conflict(key) from exc
            raise
        return int(reply["Attributes"]["failures"]["N"])

    def quarantine(self, key: str, version: int, quarantine: Quarantine) -> None:
        """The flag on the workload item and an index item, in one transaction."""
        try:
            self.client.transact_write_items(
                TransactItems=[
                    {
                        "Update": {
                            "TableName": self.table,
                            "Key": {"pk": string(workload_pk(key)), "sk": string(STATE)},
                            "UpdateExpression": "SET quarantine = :q",
                            "ConditionExpression": "version = :v",
                            "ExpressionAttributeValues": {
                                ":v": number(version),
                                ":q": string(_quarantine_doc(quarantine)),
                            },
                        }
                    },
                    {
                        "Put": {
                            "TableName": self.table,
                            "Item": {
                                "pk": string(QUARANTINE_PK),
                                "sk": string(workload_pk(key)),
                                "workload": string(key),
                                "quarantine": string(_quarantine_doc(quarantine)),
                            },
                        }
                    },
                ]
            )
        except ClientError as exc:
            if is_conflict(exc):
                raise Conflict(key) from exc
            raise

    def release(self, key: str) -> bool:
        try:
            self.client.transact_write_items(
                TransactItems=[
                    {
                        "Update": {
                            "TableName": self.table,
                            "Key": {"pk": string(workload_pk(key)), "sk": string(STATE)},
                            "UpdateExpression": "REMOVE quarantine, failures, lastError",
                            "ConditionExpression": "attribute_exists(quarantine)",
                        }
                    },
                    {
                        "Delete": {
                            "TableName": self.table,
                            "Key": {"pk": string(QUARANTINE_PK), "sk": string(workload_pk(key))},
                        }
                    },
                ]
            )
        except ClientError as exc:
            if is_conflict(exc):
                return False
            raise
        return True

    def quarantined(self) -> list[tuple[str, Quarantine]]:
        found: list[tuple[str, Quarantine]] = []
        for item in self._query(
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": string(QUARANTINE_PK)},
            ConsistentRead=True,
        ):
            q = decode_quarantine(item)
            if q is not None:
                found.append((item["workload"]["S"], q))
        return found
