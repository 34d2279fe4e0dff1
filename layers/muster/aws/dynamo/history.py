"""History entries: under the workload's partition, one per event, each expiring on its own."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from muster.aws.dynamo.table import HISTORY_PREFIX, Table, number, string, workload_pk
from muster.core import LogEvent
from muster.runtime.codec import dumps


class HistoryItems(Table):
    """What `muster describe` shows of a workload's past."""

    def append_history(
        self,
        key: str,
        version: int,
        index: int,
        event: LogEvent,
        detail: Mapping[str, Any],
        at: float,
    ) -> None:
        """Idempotent: a re-driven outbox writes the same entry again."""
        self.client.put_item(
            TableName=self.table,
            Item={
                "pk": string(workload_pk(key)),
                "sk": string(f"{HISTORY_PREFIX}{version:010d}#{index:03d}"),
                "event": string(event.value),
                "at": number(at),
                "version": number(version),
                "detail": string(dumps(dict(detail))),
                "expiresAt": number(int(at) + self.history_ttl),
            },
        )

    def history(self, key: str) -> list[dict[str, Any]]:
        return [
            {
                "event": item["event"]["S"],
                "at": float(item["at"]["N"]),
                "version": int(item["version"]["N"]),
                "detail": json.loads(item["detail"]["S"]),
            }
            for item in self._query(
                KeyConditionExpression="pk = :pk AND begins_with(sk, :h)",
                ExpressionAttributeValues={
                    ":pk": string(workload_pk(key)),
                    ":h": string(HISTORY_PREFIX),
                },
            )
        ]
