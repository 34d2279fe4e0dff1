"""Pod items: each pod is an item of its own, written on its revision.

A pod item carries `rev` (its writes are conditional on it), the `epoch` it was
written under, and `owner`, the uid of the workload object it belongs to.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from botocore.exceptions import ClientError

from muster.aws.dynamo.table import (
    MAX_TRANSACTION,
    POD_PREFIX,
    STATE,
    Table,
    is_conflict,
    number,
    string,
    workload_pk,
)
from muster.core import Pod
from muster.runtime.codec import decode_effect, decode_pod, decode_workload, dumps, encode_pod
from muster.runtime.ports import (
    MAX_POD_WRITES,
    Conflict,
    PodWrite,
    StoredPod,
    StoredPods,
    belongs,
    settle_pod,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef, UpdateTypeDef


MAX_BATCH_GET = 100  # keys in one BatchGetItem


class PodItems(Table):
    """One pod with the workload item it counts in: read together, written on its revision."""

    def load_pod(self, key: str, pod: str | None) -> StoredPod | None:
        keys = [{"pk": string(workload_pk(key)), "sk": string(STATE)}]
        if pod is not None:
            keys.append({"pk": string(workload_pk(key)), "sk": string(POD_PREFIX + pod)})
        request: dict[str, Any] = {self.table: {"Keys": keys, "ConsistentRead": True}}
        items: list[dict[str, Any]] = []
        while request:
            reply = self.client.batch_get_item(RequestItems=request)
            items.extend(reply["Responses"].get(self.table, []))
            request = reply.get("UnprocessedKeys") or {}
        state = next((i for i in items if i["sk"]["S"] == STATE), None)
        if state is None:
            return None
        epoch = int(state["epoch"]["N"])
        pod_item = next((i for i in items if i["sk"]["S"] != STATE), None)
        uid = decode_workload(json.loads(state["state"]["S"])).uid
        mine = pod_item is not None and belongs(pod_item.get("owner", {}).get("S", ""), uid)
        stored = (
            settle_pod(
                decode_pod(json.loads(pod_item["pod"]["S"])), int(pod_item["epoch"]["N"]), epoch
            )
            if pod_item and mine
            else None
        )
        return StoredPod(
            decode_workload(json.loads(state["state"]["S"])),
            int(state["version"]["N"]),
            epoch,
            int(state.get("readyCount", {}).get("N", "0")),
            tuple(decode_effect(e) for e in json.loads(state.get("outbox", {}).get("S", "[]"))),
            stored,
            int(pod_item["rev"]["N"]) if pod_item else None,
        )

    def load_pods(self, key: str, names: Sequence[str]) -> StoredPods | None:
        """The workload item and the named pods: `BatchGetItem`s of at most 100 keys."""
        pk = string(workload_pk(key))
        keys = [{"pk": pk, "sk": string(STATE)}]
        keys += [{"pk": pk, "sk": string(POD_PREFIX + n)} for n in dict.fromkeys(names)]
        items: list[dict[str, Any]] = []
        for start in range(0, len(keys), MAX_BATCH_GET):
            chunk = keys[start : start + MAX_BATCH_GET]
            request: dict[str, Any] = {self.table: {"Keys": chunk, "ConsistentRead": True}}
            while request:
                reply = self.client.batch_get_item(RequestItems=request)
                items.extend(reply["Responses"].get(self.table, []))
                request = reply.get("UnprocessedKeys") or {}
        state = next((i for i in items if i["sk"]["S"] == STATE), None)
        if state is None:
            return None
        epoch = int(state["epoch"]["N"])
        w = decode_workload(json.loads(state["state"]["S"]))
        pods: dict[str, Pod] = {}
        revs: dict[str, int] = {}
        for item in items:
            if item["sk"]["S"] == STATE:
                continue
            name = item["sk"]["S"].removeprefix(POD_PREFIX)
            revs[name] = int(item["rev"]["N"])
            if belongs(item.get("owner", {}).get("S", ""), w.uid):
                pod = decode_pod(json.loads(item["pod"]["S"]))
                pods[name] = settle_pod(pod, int(item["epoch"]["N"]), epoch)
        return StoredPods(
            w,
            int(state["version"]["N"]),
            epoch,
            int(state.get("readyCount", {}).get("N", "0")),
            tuple(decode_effect(e) for e in json.loads(state.get("outbox", {}).get("S", "[]"))),
            pods,
            revs,
        )

    def write_pods(
        self, key: str, writes: Sequence[PodWrite], epoch: int, ready_delta: int, now: float = 0.0
    ) -> None:
        """One transaction: every pod on its revision, and the count's change on the epoch."""
        if len(writes) > MAX_POD_WRITES:
            raise ValueError(f"{len(writes)} pod writes in one transaction")
        if len(writes) == 1:
            self.write_pod(key, writes[0], epoch, ready_delta, now)
            return
        operations = [self._pod_operation(key, write, epoch, now) for write in writes]
        if ready_delta:
            count: UpdateTypeDef = {
                "TableName": self.table,
                "Key": {"pk": string(workload_pk(key)), "sk": string(STATE)},
                "UpdateExpression": "ADD readyCount :d",
                "ConditionExpression": "epoch = :e",
                "ExpressionAttributeValues": {":d": number(ready_delta), ":e": number(epoch)},
            }
            operations.append({"Update": count})
        if not operations:
            return
        assert len(operations) <= MAX_TRANSACTION
        try:
            self.client.transact_write_items(TransactItems=operations)
        except ClientError as exc:
            if is_conflict(exc):
                raise Conflict(f"{key}: {len(writes)} pods") from exc
            raise

    def _pod_operation(
        self, key: str, write: PodWrite, epoch: int, now: float = 0.0
    ) -> TransactWriteItemTypeDef:
        """A Put or Delete of one pod item, conditional on its revision (transaction form)."""
        condition: dict[str, Any] = (
            {"ConditionExpression": "attribute_not_exists(pk)"}
            if write.expected is None
            else {
                "ConditionExpression": "rev = :rev",
                "ExpressionAttributeValues": {":rev": number(write.expected)},
            }
        )
        if write.pod is None:
            item_key = {"pk": string(workload_pk(key)), "sk": string(POD_PREFIX + write.name)}
            delete = {"TableName": self.table, "Key": item_key, **condition}
            return cast("TransactWriteItemTypeDef", {"Delete": delete})
        item = self._pod_item(key, write.pod, (write.expected or 0) + 1, epoch, write.owner, now)
        put = {"TableName": self.table, "Item": item, **condition}
        return cast("TransactWriteItemTypeDef", {"Put": put})

    def write_pod(
        self, key: str, write: PodWrite, epoch: int, ready_delta: int, now: float = 0.0
    ) -> None:
        operation = self._pod_operation(key, write, epoch, now)
        try:
            if not ready_delta:
                if "Put" in operation:
                    self.client.put_item(**operation["Put"])
                else:
                    self.client.delete_item(**operation["Delete"])
                return
            count: UpdateTypeDef = {
                "TableName": self.table,
                "Key": {"pk": string(workload_pk(key)), "sk": string(STATE)},
                "UpdateExpression": "ADD readyCount :d",
                "ConditionExpression": "epoch = :e",
                "ExpressionAttributeValues": {":d": number(ready_delta), ":e": number(epoch)},
            }
            self.client.transact_write_items(TransactItems=[operation, {"Update": count}])
        except ClientError as exc:
            if is_conflict(exc):
                raise Conflict(f"{key} pod {write.name}") from exc
            raise

    def _pod_item(
        self, key: str, pod: Pod, rev: int, epoch: int, owner: str, now: float
    ) -> dict[str, Any]:
        item: dict[str, Any] = {
            "pk": string(workload_pk(key)),
            "sk": string(POD_PREFIX + pod.name),
            "workload": string(key),
            "rev": number(rev),
            "epoch": number(epoch),
            "owner": string(owner),
            "pod": string(dumps(encode_pod(pod))),
        }
        if pod.deleted:
            item["expiresAt"] = number(int(now) + self.tombstone_ttl)
        if pod.node and not pod.retired and not pod.deleted:
            item["gsi1pk"] = string(f"NODE#{pod.node}")
            item["gsi1sk"] = string(f"{key}#{pod.name}")
        return item

    def expire_pods(self, key: str, names: Sequence[str], now: float) -> None:
        for name in names:
            try:
                self.client.update_item(
                    TableName=self.table,
                    Key={"pk": string(workload_pk(key)), "sk": string(POD_PREFIX + name)},
                    UpdateExpression="SET expiresAt = :t REMOVE gsi1pk, gsi1sk",
                    ConditionExpression="attribute_exists(pk)",
                    ExpressionAttributeValues={":t": number(int(now) + self.history_ttl)},
                )
            except ClientError as exc:
                if not is_conflict(exc):
                    raise
