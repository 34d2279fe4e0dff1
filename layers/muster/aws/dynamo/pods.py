"""Pod items: each pod is an item of its own, written on its revision.

A pod item carries `rev` (its writes are conditional on it), the `epoch` it was
written under, and `owner`, the uid of the workload object it belongs to. Where
the last complete pod listing said something the item does not stand for, the
item carries `listedRev` and `listedUid` (a stub item, without `pod`, where there
is no pod; `muster.runtime.listing`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

from botocore.exceptions import ClientError

from muster.aws.dynamo.table import (
    EXPIRING_PK,
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
from muster.runtime import listing
from muster.runtime.codec import decode_effect, decode_pod, decode_workload, dumps, encode_pod
from muster.runtime.listing import Stamp
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

EXPIRY_ROUNDS = 5
"""Re-reads of a gang's pod items when a chunk of the expiry lost a race with a pod write."""


def stamp_of(item: dict[str, Any]) -> Stamp | None:
    if "listedRev" not in item:
        return None
    return Stamp(int(item["listedRev"]["N"]), item["listedUid"]["S"])


def pod_of(item: dict[str, Any]) -> Pod | None:
    """The pod an item holds; None for a stub."""
    return decode_pod(json.loads(item["pod"]["S"])) if "pod" in item else None


def owner_of(item: dict[str, Any]) -> str:
    return str(item.get("owner", {}).get("S", ""))


def live_count_of(state: dict[str, Any]) -> int | None:
    """The workload item's count of live pods; None on an item written before it was kept."""
    return int(state["liveCount"]["N"]) if "liveCount" in state else None


def count_changes(ready_delta: int, live_delta: int) -> tuple[str, dict[str, Any]]:
    """The ADD clause that moves the counts (only those that move), and its values."""
    parts: list[str] = []
    values: dict[str, Any] = {}
    if ready_delta:
        parts.append("readyCount :d")
        values[":d"] = number(ready_delta)
    if live_delta:
        parts.append("liveCount :live")
        values[":live"] = number(live_delta)
    return ("ADD " + ", ".join(parts) if parts else ""), values


def listing_items(
    items: Iterable[dict[str, Any]],
) -> Iterable[tuple[str, Stamp | None, Pod | None, str]]:
    for item in items:
        yield (
            item["sk"]["S"].removeprefix(POD_PREFIX),
            stamp_of(item),
            pod_of(item),
            owner_of(item),
        )


MAX_BATCH_GET = 100  # keys in one BatchGetItem


class PodItems(Table):
    """One pod with the workload item it counts in: read together, written on its revision."""

    def load_pod(self, key: str, pod: str | None) -> StoredPod | None:
        keys = [{"pk": string(workload_pk(key)), "sk": string(STATE)}]
        if pod is not None:
            keys.append({"pk": string(workload_pk(key)), "sk": string(POD_PREFIX + pod)})
        items = self._batch_get(keys)
        state = next((i for i in items if i["sk"]["S"] == STATE), None)
        if state is None:
            return None
        epoch = int(state["epoch"]["N"])
        pod_item = next((i for i in items if i["sk"]["S"] != STATE), None)
        workload = decode_workload(json.loads(state["state"]["S"]))
        stored: Pod | None = None
        if pod_item is not None:
            found = pod_of(pod_item)
            if found is not None and belongs(owner_of(pod_item), workload.uid):
                stored = settle_pod(found, int(pod_item["epoch"]["N"]), epoch)
            found_listed = listing_items([pod_item])
            workload = replace(
                workload, listed=listing.rebuilt(workload.listed_seq, found_listed, workload.uid)
            )
        return StoredPod(
            workload,
            int(state["version"]["N"]),
            epoch,
            int(state.get("readyCount", {}).get("N", "0")),
            tuple(decode_effect(e) for e in json.loads(state.get("outbox", {}).get("S", "[]"))),
            stored,
            int(pod_item["rev"]["N"]) if pod_item else None,
            live_count_of(state),
            int(state.get("failures", {}).get("N", "0")),
        )

    def _batch_get(self, keys: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Consistent reads of `keys`, `MAX_BATCH_GET` at a time, unprocessed ones again."""
        items: list[dict[str, Any]] = []
        for start in range(0, len(keys), MAX_BATCH_GET):
            chunk = list(keys[start : start + MAX_BATCH_GET])
            request: dict[str, Any] = {self.table: {"Keys": chunk, "ConsistentRead": True}}
            while request:
                reply = self.client.batch_get_item(RequestItems=request)
                items.extend(reply["Responses"].get(self.table, []))
                request = reply.get("UnprocessedKeys") or {}
        return items

    def load_pods(self, key: str, names: Sequence[str]) -> StoredPods | None:
        """The workload item and the named pods: `BatchGetItem`s of at most 100 keys."""
        pk = string(workload_pk(key))
        keys = [{"pk": pk, "sk": string(STATE)}]
        keys += [{"pk": pk, "sk": string(POD_PREFIX + n)} for n in dict.fromkeys(names)]
        items = self._batch_get(keys)
        state = next((i for i in items if i["sk"]["S"] == STATE), None)
        if state is None:
            return None
        epoch = int(state["epoch"]["N"])
        w = decode_workload(json.loads(state["state"]["S"]))
        pods: dict[str, Pod] = {}
        revs: dict[str, int] = {}
        pod_items = [i for i in items if i["sk"]["S"] != STATE]
        for item in pod_items:
            name = item["sk"]["S"].removeprefix(POD_PREFIX)
            revs[name] = int(item["rev"]["N"])
            pod = pod_of(item)  # None: a listing's stub
            if pod is not None and belongs(owner_of(item), w.uid):
                pods[name] = settle_pod(pod, int(item["epoch"]["N"]), epoch)
        w = replace(w, listed=listing.rebuilt(w.listed_seq, listing_items(pod_items), w.uid))
        return StoredPods(
            w,
            int(state["version"]["N"]),
            epoch,
            int(state.get("readyCount", {}).get("N", "0")),
            tuple(decode_effect(e) for e in json.loads(state.get("outbox", {}).get("S", "[]"))),
            pods,
            revs,
            live_count_of(state),
            int(state.get("failures", {}).get("N", "0")),
        )

    def write_pods(
        self,
        key: str,
        writes: Sequence[PodWrite],
        epoch: int,
        ready_delta: int,
        now: float = 0.0,
        *,
        live_delta: int = 0,
    ) -> None:
        """One transaction: every pod on its revision, and the counts' changes on the epoch."""
        if len(writes) > MAX_POD_WRITES:
            raise ValueError(f"{len(writes)} pod writes in one transaction")
        if len(writes) == 1:
            self.write_pod(key, writes[0], epoch, ready_delta, now, live_delta=live_delta)
            return
        operations = [
            self._pod_operation(key, write, epoch, now, listing.carried(write)) for write in writes
        ]
        if ready_delta or live_delta:
            operations.append({"Update": self._count_update(key, epoch, ready_delta, live_delta)})
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
        self, key: str, write: PodWrite, epoch: int, now: float = 0.0, stamp: Stamp | None = None
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
        if write.pod is None and stamp is None:
            item_key = {"pk": string(workload_pk(key)), "sk": string(POD_PREFIX + write.name)}
            delete = {"TableName": self.table, "Key": item_key, **condition}
            return cast("TransactWriteItemTypeDef", {"Delete": delete})
        item = self._pod_item(
            key, write.name, write.pod, (write.expected or 0) + 1, epoch, write.owner, now, stamp
        )
        put = {"TableName": self.table, "Item": item, **condition}
        return cast("TransactWriteItemTypeDef", {"Put": put})

    def _stamp_operation(
        self, key: str, name: str, stamp: Stamp, expected: int | None, owner: str
    ) -> TransactWriteItemTypeDef:
        """A listing's stamp on an item not otherwise written; a stub where there is none.

        It moves the item's revision, so a pod write that read the item before loses
        its race and reads the new listing.
        """
        if expected is None:
            write = PodWrite(name, None, None, owner)
            return self._pod_operation(key, write, 0, stamp=stamp)
        update = {
            "TableName": self.table,
            "Key": {"pk": string(workload_pk(key)), "sk": string(POD_PREFIX + name)},
            "UpdateExpression": "SET listedRev = :lr, listedUid = :lu, rev = :next",
            "ConditionExpression": "rev = :rev",
            "ExpressionAttributeValues": {
                ":lr": number(stamp.rev),
                ":lu": string(stamp.uid),
                ":next": number(expected + 1),
                ":rev": number(expected),
            },
        }
        return cast("TransactWriteItemTypeDef", {"Update": update})

    def _count_update(
        self, key: str, epoch: int, ready_delta: int, live_delta: int
    ) -> UpdateTypeDef:
        """The counts' changes on the workload item, on its epoch (transaction form)."""
        expression, values = count_changes(ready_delta, live_delta)
        return {
            "TableName": self.table,
            "Key": {"pk": string(workload_pk(key)), "sk": string(STATE)},
            "UpdateExpression": expression,
            "ConditionExpression": "epoch = :e",
            "ExpressionAttributeValues": {**values, ":e": number(epoch)},
        }

    def write_pod(
        self,
        key: str,
        write: PodWrite,
        epoch: int,
        ready_delta: int,
        now: float = 0.0,
        *,
        live_delta: int = 0,
    ) -> None:
        operation = self._pod_operation(key, write, epoch, now, listing.carried(write))
        try:
            if not ready_delta and not live_delta:
                if "Put" in operation:
                    self.client.put_item(**operation["Put"])
                else:
                    self.client.delete_item(**operation["Delete"])
                return
            count = self._count_update(key, epoch, ready_delta, live_delta)
            self.client.transact_write_items(TransactItems=[operation, {"Update": count}])
        except ClientError as exc:
            if is_conflict(exc):
                raise Conflict(f"{key} pod {write.name}") from exc
            raise

    def _pod_item(
        self,
        key: str,
        name: str,
        pod: Pod | None,
        rev: int,
        epoch: int,
        owner: str,
        now: float,
        stamp: Stamp | None = None,
    ) -> dict[str, Any]:
        item: dict[str, Any] = {
            "pk": string(workload_pk(key)),
            "sk": string(POD_PREFIX + name),
            "workload": string(key),
            "rev": number(rev),
            "epoch": number(epoch),
            "owner": string(owner),
        }
        if stamp is not None:
            item["listedRev"] = number(stamp.rev)
            item["listedUid"] = string(stamp.uid)
        if pod is None:
            return item  # a stub: what a listing said of a pod not stored
        item["pod"] = string(dumps(encode_pod(pod)))
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

    # ------------------------------------------------------------------ leftover expiry

    def expire_leftover_pods(self, key: str) -> bool:
        """The expiry a write recorded (`expiring` on the workload item), in
        transactions of 100 pod items; the record goes once none is left.

        Idempotent: only items still without a TTL or still on the node index are
        written, each on its revision (a pod written meanwhile is read again).
        """
        pk = string(workload_pk(key))
        state = self.client.get_item(
            TableName=self.table,
            Key={"pk": pk, "sk": string(STATE)},
            ProjectionExpression="expiring",
            ConsistentRead=True,
        ).get("Item")
        if not state or "expiring" not in state:
            self._forget_expiring(key)  # left by a crash after the record went
            return True
        record = state["expiring"]["S"]
        doc = json.loads(record)
        for _ in range(EXPIRY_ROUNDS):
            todo = self._still_to_expire(key, str(doc["keep"]))
            try:
                for start in range(0, len(todo), MAX_TRANSACTION):
                    chunk = todo[start : start + MAX_TRANSACTION]
                    self.client.transact_write_items(
                        TransactItems=[self._expiry(pk, sk, rev, doc["at"]) for sk, rev in chunk]
                    )
            except ClientError as exc:
                if is_conflict(exc):
                    continue
                raise
            return self._expired(key, record)
        return False

    def _still_to_expire(self, key: str, keep: str) -> list[tuple[str, int]]:
        return [
            (item["sk"]["S"], int(item["rev"]["N"]))
            for item in self._query(
                KeyConditionExpression="pk = :pk AND begins_with(sk, :p)",
                ExpressionAttributeValues={
                    ":pk": string(workload_pk(key)),
                    ":p": string(POD_PREFIX),
                },
                ProjectionExpression="sk, rev, #o, expiresAt, gsi1pk",
                ExpressionAttributeNames={"#o": "owner"},
                ConsistentRead=True,
            )
            if (not keep or owner_of(item) != keep)
            and ("expiresAt" not in item or "gsi1pk" in item)
        ]

    def _expiry(self, pk: dict[str, str], sk: str, rev: int, at: float) -> TransactWriteItemTypeDef:
        update = {
            "TableName": self.table,
            "Key": {"pk": pk, "sk": string(sk)},
            # A tombstone keeps its own, shorter, TTL.
            "UpdateExpression": "SET expiresAt = if_not_exists(expiresAt, :t) REMOVE gsi1pk, gsi1sk",
            "ConditionExpression": "rev = :rev",
            "ExpressionAttributeValues": {":t": number(at), ":rev": number(rev)},
        }
        return cast("TransactWriteItemTypeDef", {"Update": update})

    def _expired(self, key: str, record: str) -> bool:
        """The record and its index item go together, unless a later write recorded another."""
        try:
            self.client.transact_write_items(
                TransactItems=[
                    {
                        "Update": {
                            "TableName": self.table,
                            "Key": {"pk": string(workload_pk(key)), "sk": string(STATE)},
                            "UpdateExpression": "REMOVE expiring",
                            "ConditionExpression": "expiring = :r",
                            "ExpressionAttributeValues": {":r": string(record)},
                        }
                    },
                    {"Delete": self._expiring_key(key)},
                ]
            )
        except ClientError as exc:
            if is_conflict(exc):
                return False
            raise
        return True

    def _expiring_key(self, key: str) -> Any:
        return {
            "TableName": self.table,
            "Key": {"pk": string(EXPIRING_PK), "sk": string(workload_pk(key))},
        }

    def _forget_expiring(self, key: str) -> None:
        self.client.delete_item(**self._expiring_key(key))

    def expiring(self) -> list[str]:
        return sorted(
            item["workload"]["S"]
            for item in self._query(
                KeyConditionExpression="pk = :pk",
                ExpressionAttributeValues={":pk": string(EXPIRING_PK)},
                ConsistentRead=True,
            )
        )
