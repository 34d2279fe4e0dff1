"""Reads through the index `gsi1` (pods by node, workloads by phase) and batched workload reads."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from muster.aws.dynamo.table import INDEX, STATE, Table, string, workload_pk
from muster.core import Phase, Workload
from muster.runtime.codec import decode_workload


class IndexReads(Table):
    """Which workloads a node event reaches, the queue, and the workloads themselves."""

    def workloads_on_node(self, node: str) -> list[str]:
        keys = {
            item["workload"]["S"]
            for item in self._query(
                IndexName=INDEX,
                KeyConditionExpression="gsi1pk = :pk",
                ExpressionAttributeValues={":pk": string(f"NODE#{node}")},
                ProjectionExpression="workload",
            )
        }
        return sorted(keys)

    def pending(self) -> list[Workload]:
        return self.by_phase(Phase.PENDING.value)

    def by_phase(self, phase: str) -> list[Workload]:
        return [
            decode_workload(json.loads(item["state"]["S"]))
            for item in self._query(
                IndexName=INDEX,
                KeyConditionExpression="gsi1pk = :pk",
                ExpressionAttributeValues={":pk": string(f"PHASE#{phase}")},
                ProjectionExpression="#s",
                ExpressionAttributeNames={"#s": "state"},
            )
        ]

    def unsettled(self, phase: str) -> list[str]:
        """Workloads of `phase` with effects left in their outbox (from the phase index)."""
        return sorted(
            item["workload"]["S"]
            for item in self._query(
                IndexName=INDEX,
                KeyConditionExpression="gsi1pk = :pk",
                FilterExpression="attribute_exists(outbox)",
                ExpressionAttributeValues={":pk": string(f"PHASE#{phase}")},
                ProjectionExpression="workload",
            )
        )

    def get_workloads(
        self,
        keys: Iterable[str],
        unsettled: set[str] | None = None,
        quarantined: set[str] | None = None,
    ) -> list[Workload]:
        """Consistent reads of workload items (without pods), in batches of 100."""
        wanted = sorted(set(keys))
        found: dict[str, Workload] = {}
        for start in range(0, len(wanted), 100):
            request: dict[str, Any] = {
                self.table: {
                    "Keys": [
                        {"pk": string(workload_pk(k)), "sk": string(STATE)}
                        for k in wanted[start : start + 100]
                    ],
                    "ConsistentRead": True,
                    "ProjectionExpression": "#s, outbox, quarantine",
                    "ExpressionAttributeNames": {"#s": "state"},
                }
            }
            while request:
                reply = self.client.batch_get_item(RequestItems=request)
                for item in reply["Responses"].get(self.table, []):
                    w = decode_workload(json.loads(item["state"]["S"]))
                    found[w.key] = w
                    if unsettled is not None and "outbox" in item:
                        unsettled.add(w.key)
                    if quarantined is not None and "quarantine" in item:
                        quarantined.add(w.key)
                request = reply.get("UnprocessedKeys") or {}
        return [found[k] for k in wanted if k in found]
