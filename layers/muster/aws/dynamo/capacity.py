"""Node capacity for `capacityCheck`: one item per node, the newest report by `seq` wins.

A deleted node's item stays only to order reports that arrive late, leaves the
view at once, and expires (`expiresAt`) after `tombstone_ttl_hours`; a node of that
name that comes back is a newer report and clears the expiry.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError

from muster.aws.dynamo.table import NODES_PK, Table, is_conflict, number, string
from muster.core.capacity import NodeCapacity
from muster.core.topology import LEVELS
from muster.schema import NODE_DELETED


def _node_of(item: Mapping[str, Any]) -> NodeCapacity:
    return NodeCapacity(
        node=item["sk"]["S"].removeprefix("NODE#"),
        seq=int(item["seq"]["N"]),
        gpus=int(item["gpus"]["N"]),
        schedulable=bool(item["schedulable"]["BOOL"]),
        unschedulable=item["unschedulable"]["S"] if "unschedulable" in item else None,
        foreign_gpus=int(item["foreignGpus"]["N"]),
        topology=tuple(
            (level, item["topology"]["M"][level]["S"])
            for level in LEVELS
            if level in item.get("topology", {}).get("M", {})
        ),
    )


class NodeItems(Table):
    """The capacity view the admission pass reads."""

    def put_node(
        self, node: NodeCapacity, now: float | None = None
    ) -> tuple[bool, NodeCapacity | None]:
        """One item per node, written only over an older report (a reordered one loses)."""
        values: dict[str, Any] = {
            ":seq": number(node.seq),
            ":gpus": number(node.gpus),
            ":sched": {"BOOL": node.schedulable},
            ":foreign": number(node.foreign_gpus),
        }
        sets = ["seq = :seq", "gpus = :gpus", "schedulable = :sched", "foreignGpus = :foreign"]
        removes = []
        if node.unschedulable:
            values[":why"] = string(node.unschedulable)
            sets.append("unschedulable = :why")
        else:
            removes.append("unschedulable")
        if node.topology:
            values[":topology"] = {"M": {level: string(v) for level, v in node.topology}}
            sets.append("topology = :topology")
        else:
            removes.append("topology")
        if node.unschedulable == NODE_DELETED:
            at = time.time() if now is None else now
            values[":expires"] = number(int(at) + self.tombstone_ttl)
            sets.append("expiresAt = :expires")
        else:
            removes.append("expiresAt")
        update = "SET " + ", ".join(sets) + (" REMOVE " + ", ".join(removes) if removes else "")
        try:
            reply = self.client.update_item(
                TableName=self.table,
                Key={"pk": string(NODES_PK), "sk": string(f"NODE#{node.node}")},
                UpdateExpression=update,
                ConditionExpression="attribute_not_exists(seq) OR seq < :seq",
                ExpressionAttributeValues=values,
                ReturnValues="ALL_OLD",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if is_conflict(exc):
                refused: Mapping[str, Any] = exc.response  # with the item kept (asked for above)
                kept = refused.get("Item") or {}
                return False, _node_of(kept) if "seq" in kept else None
            raise
        old = reply.get("Attributes")
        return True, _node_of(old) if old and "seq" in old else None

    def nodes(self) -> list[NodeCapacity]:
        """The capacity view: one Query (paged) of the nodes' items."""
        return [
            _node_of(item)
            for item in self._query(
                KeyConditionExpression="pk = :pk",
                FilterExpression="attribute_not_exists(expiresAt)",
                ExpressionAttributeValues={":pk": string(NODES_PK)},
                ConsistentRead=True,
            )
        ]
