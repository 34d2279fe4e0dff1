"""The admission ledger: a version every admission moves on, and an entry per quota holder."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from muster.aws.dynamo.table import LEDGER_KEY, RECENT_PREFIX, is_conflict, number, string
from muster.aws.dynamo.workloads import WorkloadItems
from muster.core import Effect, Workload
from muster.runtime.ports import Conflict, Ledger, Stored

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import PutTypeDef, UpdateTypeDef


class AdmissionLedger(WorkloadItems):
    """Admissions are serialised on the ledger's version, written with the workload item."""

    def ledger(self) -> Ledger:
        """The version first, then the holders' entries (both consistent reads).

        In this order a pass that commits on the version it read has seen every
        admission made before that version.
        """
        item = self.client.get_item(TableName=self.table, Key=LEDGER_KEY, ConsistentRead=True).get(
            "Item"
        )
        version = int(item["version"]["N"]) if item else 0
        recent = {
            entry["workload"]["S"]: int(entry["attempt"]["N"])
            for entry in self._query(
                KeyConditionExpression="pk = :pk AND begins_with(sk, :r)",
                ExpressionAttributeValues={
                    ":pk": LEDGER_KEY["pk"],
                    ":r": string(RECENT_PREFIX),
                },
                ConsistentRead=True,
            )
        }
        return Ledger(version, recent)

    def ledger_version(self) -> int:
        item = self.client.get_item(
            TableName=self.table,
            Key=LEDGER_KEY,
            ConsistentRead=True,
            ProjectionExpression="version",
        ).get("Item")
        return int(item["version"]["N"]) if item else 0

    def _ledger_put(self, ledger: Ledger) -> PutTypeDef:
        put: PutTypeDef = {
            "TableName": self.table,
            "Item": {**LEDGER_KEY, "version": number(ledger.version + 1)},
        }
        if ledger.version == 0:
            put["ConditionExpression"] = "attribute_not_exists(pk)"
        else:
            put["ConditionExpression"] = "version = :lv"
            put["ExpressionAttributeValues"] = {":lv": number(ledger.version)}
        return put

    def admit(
        self,
        before: Stored,
        after: Workload,
        outbox: Sequence[Effect],
        ledger: Ledger,
        now: float,
    ) -> int:
        """The admission, the ledger's version and the recent entry in one transaction."""
        version = before.version + 1
        update = self._workload_update(before, after, before.epoch, outbox, now, (0, 0))
        recent: PutTypeDef = {
            "TableName": self.table,
            "Item": {
                "pk": LEDGER_KEY["pk"],
                "sk": string(RECENT_PREFIX + after.key),
                "workload": string(after.key),
                "attempt": number(after.attempt),
            },
        }
        try:
            self.client.transact_write_items(
                TransactItems=[
                    {"Update": update},
                    {"Put": self._ledger_put(ledger)},
                    {"Put": recent},
                ]
            )
        except ClientError as exc:
            if is_conflict(exc):
                raise Conflict(f"admission of {after.key}") from exc
            raise
        return version

    def forget_recent(self, entries: Mapping[str, int]) -> None:
        for key, attempt in entries.items():
            try:
                self.client.delete_item(
                    TableName=self.table,
                    Key={"pk": LEDGER_KEY["pk"], "sk": string(RECENT_PREFIX + key)},
                    ConditionExpression="attempt = :a",
                    ExpressionAttributeValues={":a": number(attempt)},
                )
            except ClientError as exc:
                if not is_conflict(exc):
                    raise

    def hold_again(self, key: str, attempt: int) -> None:
        """The entry put back and the version moved in one transaction: a pass that read
        the ledger before commits no admission on it."""
        entry: PutTypeDef = {
            "TableName": self.table,
            "Item": {
                "pk": LEDGER_KEY["pk"],
                "sk": string(RECENT_PREFIX + key),
                "workload": string(key),
                "attempt": number(attempt),
            },
        }
        bump: UpdateTypeDef = {
            "TableName": self.table,
            "Key": LEDGER_KEY,
            "UpdateExpression": "ADD version :one",
            "ExpressionAttributeValues": {":one": number(1)},
        }
        self.client.transact_write_items(TransactItems=[{"Put": entry}, {"Update": bump}])
