"""The runtime settings record of one cluster, replaced on its version."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError

from muster.aws.dynamo.table import Table, is_conflict, number, string
from muster.runtime.ports import Conflict


class SettingsRecord(Table):
    """The settings an operator set at run time, over the deployment's."""

    def _settings_key(self) -> dict[str, Any]:
        return {"pk": string("SETTINGS"), "sk": string(f"CLUSTER#{self.cluster}")}

    def settings_record(self) -> tuple[dict[str, Any], int] | None:
        item = self.client.get_item(
            TableName=self.table, Key=self._settings_key(), ConsistentRead=True
        ).get("Item")
        if item is None:
            return None
        return json.loads(item["document"]["S"]), int(item["version"]["N"])

    def put_settings_record(self, doc: Mapping[str, Any], expected: int | None) -> None:
        condition: dict[str, Any] = (
            {"ConditionExpression": "attribute_not_exists(pk)"}
            if expected is None
            else {
                "ConditionExpression": "version = :v",
                "ExpressionAttributeValues": {":v": number(expected)},
            }
        )
        try:
            self.client.put_item(
                TableName=self.table,
                Item={
                    **self._settings_key(),
                    "document": string(json.dumps(dict(doc), sort_keys=True)),
                    "version": number((expected or 0) + 1),
                },
                **condition,
            )
        except ClientError as exc:
            if is_conflict(exc):
                raise Conflict("settings record changed meanwhile") from exc
            raise
