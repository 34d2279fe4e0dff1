"""The parts of a cluster snapshot, kept until all have arrived, and the last snapshot acted on."""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import ClientError

from muster.aws.dynamo.table import DAY, Table, is_conflict, number, string
from muster.core import SnapshotPart
from muster.runtime.codec import decode_snapshot_part, dumps, encode_snapshot_part


class SnapshotItems(Table):
    """A `Cluster Snapshot` arrives in parts; each is an item that expires after a day."""

    def put_snapshot_part(self, part: SnapshotPart, now: float) -> list[SnapshotPart] | None:
        pk = string(f"SNAPSHOT#{part.scope}")
        prefix = f"PART#{part.snapshot}#"
        self.client.put_item(
            TableName=self.table,
            Item={
                "pk": pk,
                "sk": string(f"{prefix}{part.part:05d}"),
                "part": string(dumps(encode_snapshot_part(part))),
                "expiresAt": number(int(now) + DAY),
            },
        )
        parts = self.snapshot_parts(part.scope, part.snapshot)
        return parts if len(parts) >= part.parts else None

    def snapshot_parts(self, scope: str, snapshot: str) -> list[SnapshotPart]:
        items = self._query(
            KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
            ExpressionAttributeValues={
                ":pk": string(f"SNAPSHOT#{scope}"),
                ":prefix": string(f"PART#{snapshot}#"),
            },
            ConsistentRead=True,
        )
        return [decode_snapshot_part(json.loads(i["part"]["S"])) for i in items]

    def open_slices(self, scope: str, snapshot: str, count: int, now: float) -> list[int]:
        """One item per snapshot holds the numbers of its slices not yet done (a number set,
        which DynamoDB drops when its last number goes)."""
        key = {"pk": string(f"SNAPSHOT#{scope}"), "sk": string(f"SLICES#{snapshot}")}
        item: dict[str, Any] = {**key, "expiresAt": number(int(now) + DAY)}
        if count:
            item["open"] = {"NS": [str(n) for n in range(1, count + 1)]}
        try:
            self.client.put_item(
                TableName=self.table, Item=item, ConditionExpression="attribute_not_exists(pk)"
            )
            return list(range(1, count + 1))
        except ClientError as exc:
            if not is_conflict(exc):
                raise
        found = self.client.get_item(TableName=self.table, Key=key, ConsistentRead=True)
        numbers = (found.get("Item") or {}).get("open", {}).get("NS", [])
        return sorted(int(n) for n in numbers)

    def close_slice(self, scope: str, snapshot: str, number: int) -> int:
        try:
            reply = self.client.update_item(
                TableName=self.table,
                Key={"pk": string(f"SNAPSHOT#{scope}"), "sk": string(f"SLICES#{snapshot}")},
                UpdateExpression="DELETE #o :n",
                ConditionExpression="attribute_exists(pk)",
                ExpressionAttributeNames={"#o": "open"},
                ExpressionAttributeValues={":n": {"NS": [str(number)]}},
                ReturnValues="UPDATED_NEW",
            )
        except ClientError as exc:
            if not is_conflict(exc):
                raise
            return 0  # expired with its snapshot's parts: nothing left to wait for
        return len((reply.get("Attributes") or {}).get("open", {}).get("NS", []))

    def snapshot_revision(self, scope: str) -> int:
        item = self.client.get_item(
            TableName=self.table,
            Key={"pk": string(f"SNAPSHOT#{scope}"), "sk": string("APPLIED")},
            ConsistentRead=True,
        ).get("Item")
        return int(item["revision"]["N"]) if item else 0

    def set_snapshot_revision(self, scope: str, revision: int) -> None:
        try:
            self.client.update_item(
                TableName=self.table,
                Key={"pk": string(f"SNAPSHOT#{scope}"), "sk": string("APPLIED")},
                UpdateExpression="SET revision = :r",
                ConditionExpression="attribute_not_exists(revision) OR revision < :r",
                ExpressionAttributeValues={":r": number(revision)},
            )
        except ClientError as exc:
            if not is_conflict(exc):
                raise
