"""The DynamoDB store: one table, conditional writes, pods as items of their own.

Layout (partition key `pk`, sort key `sk`; index `gsi1` on `gsi1pk`/`gsi1sk`):

| item | pk | sk | gsi1pk / gsi1sk |
|---|---|---|---|
| workload state | `WL#<ns/name>` | `STATE` | `PHASE#<phase>` / `<ns/name>` (queue index) |
| pod | `WL#<ns/name>` | `POD#<pod>` | `NODE#<node>` / `<ns/name>#<pod>` (node index, live pods only) |
| history entry | `WL#<ns/name>` | `HIST#<version>#<index>` | none; TTL `expiresAt` |
| admission ledger | `ADMISSION` | `LEDGER` | none |
| recent admission | `ADMISSION` | `RECENT#<ns/name>` | none |
| quarantine index | `QUARANTINE` | `WL#<ns/name>` | none |
| settings record | `SETTINGS` | `CLUSTER#<cluster>` | none |
| cluster listing part | `SNAPSHOT#<scope>` | `PART#<id>#<part>` | none; TTL `expiresAt` |
| last listing acted on | `SNAPSHOT#<scope>` | `APPLIED` | none |
| node capacity (`capacityCheck`) | `NODES` | `NODE#<node>` | none |

The workload item carries `version` (every write is conditional on it), `epoch`
(bumped by an eviction; pods written under an older epoch are retired),
`readyCount` (changed only by deltas, in the same transaction as the pod write
that causes them), `state` and `outbox` (JSON). A pod item carries `rev` (its
writes are conditional on it) and `owner`, the uid of the workload object it
belongs to: a new object under the same key (a new incarnation) never sees the
pods of an earlier one. A finished workload's items expire (`expiresAt`, the
table's TTL attribute) and its pods leave the node index; a deleted pod leaves a
tombstone that expires after `tombstone_ttl_hours`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from botocore.exceptions import ClientError

from muster.core import Effect, LogEvent, Phase, Pod, SnapshotPart, Workload
from muster.core.capacity import NodeCapacity
from muster.runtime.codec import (
    decode_effect,
    decode_pod,
    decode_snapshot_part,
    decode_workload,
    dumps,
    encode_effect,
    encode_pod,
    encode_snapshot_part,
    encode_workload,
)
from muster.runtime.memory import belongs, settle_pod
from muster.runtime.ports import Conflict, Ledger, PodSnapshot, PodWrite, Quarantine, Snapshot

STATE = "STATE"
POD_PREFIX = "POD#"
HISTORY_PREFIX = "HIST#"
LEDGER_KEY = {"pk": {"S": "ADMISSION"}, "sk": {"S": "LEDGER"}}
RECENT_PREFIX = "RECENT#"
QUARANTINE_PK = "QUARANTINE"
NODES_PK = "NODES"
INDEX = "gsi1"
MAX_TRANSACTION = 100
DAY = 86400


def workload_pk(key: str) -> str:
    return f"WL#{key}"


def _s(value: str) -> dict[str, str]:
    return {"S": value}


def _n(value: float) -> dict[str, str]:
    return {"N": str(int(value)) if float(value).is_integer() else repr(value)}


def _ready_delta(writes: Sequence[PodWrite], before: Snapshot | None) -> int:
    """How a chunk of pod writes changes the number of pods counting ready."""
    pods = before.workload.pods if before else {}
    delta = 0
    for w in writes:
        old = pods.get(w.name)
        delta += int(bool(w.pod and w.pod.counts_ready)) - int(bool(old and old.counts_ready))
    return delta


CONFLICT_REASONS = frozenset({"ConditionalCheckFailed", "TransactionConflict"})


def _is_conflict(exc: ClientError) -> bool:
    """A lost race: a failed condition, or a transaction cancelled only for such reasons.

    A transaction cancelled for anything else (a validation error, an item too
    large, throttling) is not a conflict: deciding again would fail again.
    """
    code = exc.response.get("Error", {}).get("Code", "")
    if code == "ConditionalCheckFailedException":
        return True
    if code != "TransactionCanceledException":
        return False
    reasons = [r.get("Code") or "None" for r in exc.response.get("CancellationReasons") or []]
    if not reasons:
        # No reasons given: the message lists them, e.g. "[None, ConditionalCheckFailed]".
        message = exc.response.get("Error", {}).get("Message", "")
        listed = message.partition("reasons [")[2].partition("]")[0]
        reasons = [r.strip() for r in listed.split(",") if r.strip()]
    failing = {r for r in reasons if r != "None"}
    return bool(failing) and failing <= CONFLICT_REASONS


def _node_of(item: Mapping[str, Any]) -> NodeCapacity:
    return NodeCapacity(
        node=item["sk"]["S"].removeprefix("NODE#"),
        seq=int(item["seq"]["N"]),
        gpus=int(item["gpus"]["N"]),
        schedulable=bool(item["schedulable"]["BOOL"]),
        unschedulable=item["unschedulable"]["S"] if "unschedulable" in item else None,
        foreign_gpus=int(item["foreignGpus"]["N"]),
    )


def _quarantine_doc(q: Quarantine) -> str:
    return dumps({"error": q.error, "effect": q.effect, "tries": q.tries, "since": q.since})


def _decode_quarantine(item: dict[str, Any]) -> Quarantine | None:
    if "quarantine" not in item:
        return None
    doc = json.loads(item["quarantine"]["S"])
    return Quarantine(str(doc["error"]), str(doc["effect"]), int(doc["tries"]), float(doc["since"]))


class DynamoStore:
    """`WorkloadStore` on one DynamoDB table (see the module docstring for the layout)."""

    def __init__(
        self,
        client: Any,
        table: str,
        cluster: str,
        history_ttl_days: int = 30,
        tombstone_ttl_hours: int = 24,
    ) -> None:
        self.client = client
        self.table = table
        self.cluster = cluster
        self.history_ttl = history_ttl_days * DAY
        self.tombstone_ttl = tombstone_ttl_hours * 3600

    # ------------------------------------------------------------------ workloads

    def load(self, key: str) -> Snapshot | None:
        state: dict[str, Any] | None = None
        pods: list[dict[str, Any]] = []
        for item in self._query(
            KeyConditionExpression="pk = :pk AND sk >= :from",
            ExpressionAttributeValues={":pk": _s(workload_pk(key)), ":from": _s(POD_PREFIX)},
            ConsistentRead=True,
        ):
            if item["sk"]["S"] == STATE:
                state = item
            elif item["sk"]["S"].startswith(POD_PREFIX):
                pods.append(item)
        if state is None:
            return None
        epoch = int(state["epoch"]["N"])
        workload = decode_workload(json.loads(state["state"]["S"]))
        settled: dict[str, Pod] = {}
        revs: dict[str, int] = {}
        for item in pods:
            pod = decode_pod(json.loads(item["pod"]["S"]))
            revs[pod.name] = int(item["rev"]["N"])
            if belongs(item.get("owner", {}).get("S", ""), workload.uid):
                settled[pod.name] = settle_pod(pod, int(item["epoch"]["N"]), epoch)
        outbox = tuple(decode_effect(e) for e in json.loads(state.get("outbox", {}).get("S", "[]")))
        return Snapshot(
            replace(workload, pods=settled),
            int(state["version"]["N"]),
            epoch,
            revs,
            outbox,
            int(state.get("readyCount", {}).get("N", "0")),
            int(state.get("failures", {}).get("N", "0")),
            _decode_quarantine(state),
        )

    def load_pod(self, key: str, pod: str | None) -> PodSnapshot | None:
        keys = [{"pk": _s(workload_pk(key)), "sk": _s(STATE)}]
        if pod is not None:
            keys.append({"pk": _s(workload_pk(key)), "sk": _s(POD_PREFIX + pod)})
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
        return PodSnapshot(
            decode_workload(json.loads(state["state"]["S"])),
            int(state["version"]["N"]),
            epoch,
            int(state.get("readyCount", {}).get("N", "0")),
            tuple(decode_effect(e) for e in json.loads(state.get("outbox", {}).get("S", "[]"))),
            stored,
            int(pod_item["rev"]["N"]) if pod_item else None,
        )

    def _pod_operation(
        self, key: str, write: PodWrite, epoch: int, now: float = 0.0
    ) -> dict[str, Any]:
        """A Put or Delete of one pod item, conditional on its revision (transaction form)."""
        condition: dict[str, Any] = (
            {"ConditionExpression": "attribute_not_exists(pk)"}
            if write.expected is None
            else {
                "ConditionExpression": "rev = :rev",
                "ExpressionAttributeValues": {":rev": _n(write.expected)},
            }
        )
        if write.pod is None:
            item_key = {"pk": _s(workload_pk(key)), "sk": _s(POD_PREFIX + write.name)}
            return {"Delete": {"TableName": self.table, "Key": item_key, **condition}}
        item = self._pod_item(key, write.pod, (write.expected or 0) + 1, epoch, write.owner, now)
        return {"Put": {"TableName": self.table, "Item": item, **condition}}

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
            count = {
                "TableName": self.table,
                "Key": {"pk": _s(workload_pk(key)), "sk": _s(STATE)},
                "UpdateExpression": "ADD readyCount :d",
                "ConditionExpression": "epoch = :e",
                "ExpressionAttributeValues": {":d": _n(ready_delta), ":e": _n(epoch)},
            }
            self.client.transact_write_items(TransactItems=[operation, {"Update": count}])
        except ClientError as exc:
            if _is_conflict(exc):
                raise Conflict(f"{key} pod {write.name}") from exc
            raise

    def _pod_item(
        self, key: str, pod: Pod, rev: int, epoch: int, owner: str, now: float
    ) -> dict[str, Any]:
        item: dict[str, Any] = {
            "pk": _s(workload_pk(key)),
            "sk": _s(POD_PREFIX + pod.name),
            "workload": _s(key),
            "rev": _n(rev),
            "epoch": _n(epoch),
            "owner": _s(owner),
            "pod": _s(dumps(encode_pod(pod))),
        }
        if pod.deleted:
            item["expiresAt"] = _n(int(now) + self.tombstone_ttl)
        if pod.node and not pod.retired and not pod.deleted:
            item["gsi1pk"] = _s(f"NODE#{pod.node}")
            item["gsi1sk"] = _s(f"{key}#{pod.name}")
        return item

    def _workload_update(
        self,
        before: Snapshot | None,
        after: Workload,
        epoch: int,
        outbox: Sequence[Effect],
        now: float,
        ready_delta: int,
    ) -> dict[str, Any]:
        """An Update of the workload item on its version (transaction form).

        An update, not a put: the ready count is changed only by deltas, so a
        concurrent pod write's count is never overwritten; an eviction (a new
        epoch) resets it, since every pod of the attempt is then retired.
        """
        version = (before.version if before else 0) + 1
        values: dict[str, Any] = {
            ":workload": _s(after.key),
            ":version": _n(version),
            ":epoch": _n(epoch),
            ":phase": _s(after.phase.value),
            ":queue": _s(after.queue),
            ":state": _s(dumps(encode_workload(after))),
            ":now": _n(now),
            ":g1pk": _s(f"PHASE#{after.phase.value}"),
            ":g1sk": _s(after.key),
        }
        sets = [
            "#workload = :workload",
            "#version = :version",
            "#epoch = :epoch",
            "#phase = :phase",
            "#queue = :queue",
            "#state = :state",
            "#updatedAt = :now",
            "gsi1pk = :g1pk",
            "gsi1sk = :g1sk",
        ]
        names = {
            f"#{n}": n
            for n in ("workload", "version", "epoch", "phase", "queue", "state", "updatedAt")
        }
        removes = []
        if outbox:
            sets.append("outbox = :outbox")
            values[":outbox"] = _s(dumps([encode_effect(e) for e in outbox]))
        else:
            removes.append("outbox")
        if after.phase is Phase.FINISHED:
            sets.append("expiresAt = :expires")
            values[":expires"] = _n(int(now) + self.history_ttl)
        else:
            removes.append("expiresAt")  # a new incarnation under a finished one's key
        adds = []
        if before is None or epoch != before.epoch:
            sets.append("readyCount = :ready")
            values[":ready"] = _n(ready_delta)
        else:
            adds.append("readyCount :delta")
            values[":delta"] = _n(ready_delta)
        expression = "SET " + ", ".join(sets)
        if removes:
            expression += " REMOVE " + ", ".join(removes)
        if adds:
            expression += " ADD " + ", ".join(adds)
        update: dict[str, Any] = {
            "TableName": self.table,
            "Key": {"pk": _s(workload_pk(after.key)), "sk": _s(STATE)},
            "UpdateExpression": expression,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
        }
        if before is None:
            update["ConditionExpression"] = "attribute_not_exists(pk)"
        else:
            update["ConditionExpression"] = "#version = :expected"
            values[":expected"] = _n(before.version)
        return update

    def write_workload(
        self,
        before: Snapshot | None,
        after: Workload,
        epoch: int,
        outbox: Sequence[Effect],
        now: float,
        pods: Sequence[PodWrite] = (),
        ready_delta: int = 0,
    ) -> int:
        update = self._workload_update(before, after, epoch, outbox, now, ready_delta)
        try:
            if not pods:
                self.client.update_item(**update)
            else:
                # At most 100 items per transaction: a node rarely holds that many
                # pods of one gang, and each chunk keeps pods and count in step.
                chunks = [
                    list(pods[i : i + MAX_TRANSACTION - 1])
                    for i in range(0, len(pods), MAX_TRANSACTION - 1)
                ]
                for chunk in chunks[:-1]:
                    delta = _ready_delta(chunk, before)
                    ready_delta -= delta
                    self.client.transact_write_items(
                        TransactItems=[
                            *(self._pod_operation(after.key, w, epoch, now) for w in chunk),
                            {"Update": self._count_update(after.key, before, delta)},
                        ]
                    )
                last = self._workload_update(before, after, epoch, outbox, now, ready_delta)
                self.client.transact_write_items(
                    TransactItems=[
                        *(self._pod_operation(after.key, w, epoch, now) for w in chunks[-1]),
                        {"Update": last},
                    ]
                )
        except ClientError as exc:
            if _is_conflict(exc):
                raise Conflict(after.key) from exc
            raise
        return (before.version if before else 0) + 1

    def _count_update(self, key: str, before: Snapshot | None, delta: int) -> dict[str, Any]:
        return {
            "TableName": self.table,
            "Key": {"pk": _s(workload_pk(key)), "sk": _s(STATE)},
            "UpdateExpression": "ADD readyCount :d",
            "ConditionExpression": "#version = :expected",
            "ExpressionAttributeNames": {"#version": "version"},
            "ExpressionAttributeValues": {
                ":d": _n(delta),
                ":expected": _n(before.version if before else 0),
            },
        }

    def clear_outbox(self, key: str, version: int) -> None:
        try:
            self.client.update_item(
                TableName=self.table,
                Key={"pk": _s(workload_pk(key)), "sk": _s(STATE)},
                UpdateExpression="REMOVE outbox, failures, lastError",
                ConditionExpression="version = :v",
                ExpressionAttributeValues={":v": _n(version)},
            )
        except ClientError as exc:
            if _is_conflict(exc):
                raise Conflict(key) from exc
            raise

    # ------------------------------------------------------------------ quarantine

    def record_failure(self, key: str, version: int, error: str) -> int:
        try:
            reply = self.client.update_item(
                TableName=self.table,
                Key={"pk": _s(workload_pk(key)), "sk": _s(STATE)},
                UpdateExpression="SET lastError = :e ADD failures :one",
                ConditionExpression="version = :v",
                ExpressionAttributeValues={":v": _n(version), ":e": _s(error), ":one": _n(1)},
                ReturnValues="UPDATED_NEW",
            )
        except ClientError as exc:
            if _is_conflict(exc):
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
                            "Key": {"pk": _s(workload_pk(key)), "sk": _s(STATE)},
                            "UpdateExpression": "SET quarantine = :q",
                            "ConditionExpression": "version = :v",
                            "ExpressionAttributeValues": {
                                ":v": _n(version),
                                ":q": _s(_quarantine_doc(quarantine)),
                            },
                        }
                    },
                    {
                        "Put": {
                            "TableName": self.table,
                            "Item": {
                                "pk": _s(QUARANTINE_PK),
                                "sk": _s(workload_pk(key)),
                                "workload": _s(key),
                                "quarantine": _s(_quarantine_doc(quarantine)),
                            },
                        }
                    },
                ]
            )
        except ClientError as exc:
            if _is_conflict(exc):
                raise Conflict(key) from exc
            raise

    def release(self, key: str) -> bool:
        try:
            self.client.transact_write_items(
                TransactItems=[
                    {
                        "Update": {
                            "TableName": self.table,
                            "Key": {"pk": _s(workload_pk(key)), "sk": _s(STATE)},
                            "UpdateExpression": "REMOVE quarantine, failures, lastError",
                            "ConditionExpression": "attribute_exists(quarantine)",
                        }
                    },
                    {
                        "Delete": {
                            "TableName": self.table,
                            "Key": {"pk": _s(QUARANTINE_PK), "sk": _s(workload_pk(key))},
                        }
                    },
                ]
            )
        except ClientError as exc:
            if _is_conflict(exc):
                return False
            raise
        return True

    def quarantined(self) -> list[tuple[str, Quarantine]]:
        found: list[tuple[str, Quarantine]] = []
        for item in self._query(
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": _s(QUARANTINE_PK)},
            ConsistentRead=True,
        ):
            q = _decode_quarantine(item)
            if q is not None:
                found.append((item["workload"]["S"], q))
        return found

    def expire_pods(self, key: str, names: Sequence[str], now: float) -> None:
        for name in names:
            try:
                self.client.update_item(
                    TableName=self.table,
                    Key={"pk": _s(workload_pk(key)), "sk": _s(POD_PREFIX + name)},
                    UpdateExpression="SET expiresAt = :t REMOVE gsi1pk, gsi1sk",
                    ConditionExpression="attribute_exists(pk)",
                    ExpressionAttributeValues={":t": _n(int(now) + self.history_ttl)},
                )
            except ClientError as exc:
                if not _is_conflict(exc):
                    raise

    # ------------------------------------------------------------------ cluster listings

    def put_snapshot_part(self, part: SnapshotPart, now: float) -> list[SnapshotPart] | None:
        pk = _s(f"SNAPSHOT#{part.scope}")
        prefix = f"PART#{part.snapshot}#"
        self.client.put_item(
            TableName=self.table,
            Item={
                "pk": pk,
                "sk": _s(f"{prefix}{part.part:05d}"),
                "part": _s(dumps(encode_snapshot_part(part))),
                "expiresAt": _n(int(now) + DAY),
            },
        )
        items = list(
            self._query(
                KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
                ExpressionAttributeValues={":pk": pk, ":prefix": _s(prefix)},
                ConsistentRead=True,
            )
        )
        if len(items) < part.parts:
            return None
        return [decode_snapshot_part(json.loads(i["part"]["S"])) for i in items]

    def snapshot_revision(self, scope: str) -> int:
        item = self.client.get_item(
            TableName=self.table,
            Key={"pk": _s(f"SNAPSHOT#{scope}"), "sk": _s("APPLIED")},
            ConsistentRead=True,
        ).get("Item")
        return int(item["revision"]["N"]) if item else 0

    def set_snapshot_revision(self, scope: str, revision: int) -> None:
        try:
            self.client.update_item(
                TableName=self.table,
                Key={"pk": _s(f"SNAPSHOT#{scope}"), "sk": _s("APPLIED")},
                UpdateExpression="SET revision = :r",
                ConditionExpression="attribute_not_exists(revision) OR revision < :r",
                ExpressionAttributeValues={":r": _n(revision)},
            )
        except ClientError as exc:
            if not _is_conflict(exc):
                raise

    # ------------------------------------------------------------------ capacity

    def put_node(self, node: NodeCapacity) -> tuple[bool, NodeCapacity | None]:
        """One item per node, written only over an older report (a reordered one loses)."""
        values: dict[str, Any] = {
            ":seq": _n(node.seq),
            ":gpus": _n(node.gpus),
            ":sched": {"BOOL": node.schedulable},
            ":foreign": _n(node.foreign_gpus),
        }
        update = "SET seq = :seq, gpus = :gpus, schedulable = :sched, foreignGpus = :foreign"
        if node.unschedulable:
            values[":why"] = _s(node.unschedulable)
            update += ", unschedulable = :why"
        else:
            update += " REMOVE unschedulable"
        try:
            reply = self.client.update_item(
                TableName=self.table,
                Key={"pk": _s(NODES_PK), "sk": _s(f"NODE#{node.node}")},
                UpdateExpression=update,
                ConditionExpression="attribute_not_exists(seq) OR seq < :seq",
                ExpressionAttributeValues=values,
                ReturnValues="ALL_OLD",
            )
        except ClientError as exc:
            if _is_conflict(exc):
                return False, None
            raise
        old = reply.get("Attributes")
        return True, _node_of(old) if old and "seq" in old else None

    def nodes(self) -> list[NodeCapacity]:
        """The capacity view: one Query (paged) of the nodes' items."""
        return [
            _node_of(item)
            for item in self._query(
                KeyConditionExpression="pk = :pk",
                ExpressionAttributeValues={":pk": _s(NODES_PK)},
                ConsistentRead=True,
            )
        ]

    # ------------------------------------------------------------------ indexes

    def workloads_on_node(self, node: str) -> list[str]:
        keys = {
            item["workload"]["S"]
            for item in self._query(
                IndexName=INDEX,
                KeyConditionExpression="gsi1pk = :pk",
                ExpressionAttributeValues={":pk": _s(f"NODE#{node}")},
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
                ExpressionAttributeValues={":pk": _s(f"PHASE#{phase}")},
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
                ExpressionAttributeValues={":pk": _s(f"PHASE#{phase}")},
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
                        {"pk": _s(workload_pk(k)), "sk": _s(STATE)}
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

    # ------------------------------------------------------------------ admission ledger

    def ledger(self) -> Ledger:
        """The version first, then the recent admissions (both consistent reads).

        In this order a pass that commits on the version it read has seen every
        recent admission made before that version.
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
                    ":r": _s(RECENT_PREFIX),
                },
                ConsistentRead=True,
            )
        }
        return Ledger(version, recent)

    def _ledger_put(self, ledger: Ledger) -> dict[str, Any]:
        put: dict[str, Any] = {
            "TableName": self.table,
            "Item": {**LEDGER_KEY, "version": _n(ledger.version + 1)},
        }
        if ledger.version == 0:
            put["ConditionExpression"] = "attribute_not_exists(pk)"
        else:
            put["ConditionExpression"] = "version = :lv"
            put["ExpressionAttributeValues"] = {":lv": _n(ledger.version)}
        return put

    def admit(
        self,
        before: Snapshot,
        after: Workload,
        outbox: Sequence[Effect],
        ledger: Ledger,
        now: float,
    ) -> int:
        """The admission, the ledger's version and the recent entry in one transaction."""
        version = before.version + 1
        update = self._workload_update(before, after, before.epoch, outbox, now, 0)
        recent = {
            "TableName": self.table,
            "Item": {
                "pk": LEDGER_KEY["pk"],
                "sk": _s(RECENT_PREFIX + after.key),
                "workload": _s(after.key),
                "attempt": _n(after.attempt),
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
            if _is_conflict(exc):
                raise Conflict(f"admission of {after.key}") from exc
            raise
        return version

    def forget_recent(self, entries: Mapping[str, int]) -> None:
        for key, attempt in entries.items():
            try:
                self.client.delete_item(
                    TableName=self.table,
                    Key={"pk": LEDGER_KEY["pk"], "sk": _s(RECENT_PREFIX + key)},
                    ConditionExpression="attempt = :a",
                    ExpressionAttributeValues={":a": _n(attempt)},
                )
            except ClientError as exc:
                if not _is_conflict(exc):
                    raise

    # ------------------------------------------------------------------ history

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
                "pk": _s(workload_pk(key)),
                "sk": _s(f"{HISTORY_PREFIX}{version:010d}#{index:03d}"),
                "event": _s(event.value),
                "at": _n(at),
                "version": _n(version),
                "detail": _s(dumps(dict(detail))),
                "expiresAt": _n(int(at) + self.history_ttl),
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
                ExpressionAttributeValues={":pk": _s(workload_pk(key)), ":h": _s(HISTORY_PREFIX)},
            )
        ]

    # ------------------------------------------------------------------ settings

    def _settings_key(self) -> dict[str, Any]:
        return {"pk": _s("SETTINGS"), "sk": _s(f"CLUSTER#{self.cluster}")}

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
                "ExpressionAttributeValues": {":v": _n(expected)},
            }
        )
        try:
            self.client.put_item(
                TableName=self.table,
                Item={
                    **self._settings_key(),
                    "document": _s(json.dumps(dict(doc), sort_keys=True)),
                    "version": _n((expected or 0) + 1),
                },
                **condition,
            )
        except ClientError as exc:
            if _is_conflict(exc):
                raise Conflict("settings record changed meanwhile") from exc
            raise

    # ------------------------------------------------------------------ helpers

    def _query(self, **kwargs: Any) -> Iterable[dict[str, Any]]:
        request = {"TableName": self.table, **kwargs}
        while True:
            reply = self.client.query(**request)
            yield from reply.get("Items", [])
            last = reply.get("LastEvaluatedKey")
            if not last:
                return
            request["ExclusiveStartKey"] = last
