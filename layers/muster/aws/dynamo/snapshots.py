"""The parts of a cluster snapshot, kept until all have arrived, and the last snapshot acted on."""

from __future__ import annotations

import json

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
        items = list(
            self._query(
                KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
                ExpressionAttributeValues={":pk": pk, ":prefix": string(prefix)},
                ConsistentRead=True,
            )
        )
        if len(items) < part.parts:
            return None
        return [decode_snapshot_part(json.loads(i["part"]["S"])) for i in items]

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
