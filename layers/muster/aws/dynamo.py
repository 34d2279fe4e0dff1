"""The DynamoDB store: one table, conditional writes, pods as items of their own.

Layout (partition key `pk`, sort key `sk`; index `gsi1` on `gsi1pk`/`gsi1sk`):

| item | pk | sk | gsi1pk / gsi1sk |
|---|---|---|---|
| workload state | `WL#<ns/name>` | `STATE` | `PHASE#<phase>` / `<ns/name>` (queue index) |
| pod | `WL#<ns/name>` | `POD#<pod>` | `NODE#<node>` / `<ns/name>#<pod>` (node index) |
| history entry | `WL#<ns/name>` | `HIST#<version>#<index>` | none; TTL `expiresAt` |
| admission ledger | `ADMISSION` | `LEDGER` | none |
| settings record | `SETTINGS` | `CLUSTER#<cluster>` | none |

The workload item carries `version` (every write is conditional on it), `epoch`
(bumped by an eviction; pods written under an older epoch are retired), `state`
and `outbox` (JSON). A pod item carries `rev` (its writes are conditional on it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from botocore.exceptions import ClientError

from muster.core import Effect, LogEvent, Phase, Pod, Workload
from muster.runtime.codec import (
    decode_effect,
    decode_pod,
    decode_workload,
    dumps,
    encode_effect,
    encode_pod,
    encode_workload,
)
from muster.runtime.memory import settle_pod
from muster.runtime.ports import Conflict, Ledger, PodWrite, Snapshot

STATE = "STATE"
POD_PREFIX = "POD#"
HISTORY_PREFIX = "HIST#"
LEDGER_KEY = {"pk": {"S": "ADMISSION"}, "sk": {"S": "LEDGER"}}
INDEX = "gsi1"
DAY = 86400


def workload_pk(key: str) -> str:
    return f"WL#{key}"


def _s(value: str) -> dict[str, str]:
    return {"S": value}


def _n(value: float) -> dict[str, str]:
    return {"N": str(int(value)) if float(value).is_integer() else repr(value)}


def _is_conflict(exc: ClientError) -> bool:
    code = exc.response.get("Error", {}).get("Code", "")
    return code in ("ConditionalCheckFailedException", "TransactionCanceledException")


class DynamoStore:
    """`WorkloadStore` on one DynamoDB table (see the module docstring for the layout)."""

    def __init__(self, client: Any, table: str, cluster: str, history_ttl_days: int = 30) -> None:
        self.client = client
        self.table = table
        self.cluster = cluster
        self.history_ttl = history_ttl_days * DAY

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
        settled: dict[str, Pod] = {}
        revs: dict[str, int] = {}
        for item in pods:
            pod = decode_pod(json.loads(item["pod"]["S"]))
            settled[pod.name] = settle_pod(pod, int(item["epoch"]["N"]), epoch)
            revs[pod.name] = int(item["rev"]["N"])
        outbox = tuple(decode_effect(e) for e in json.loads(state.get("outbox", {}).get("S", "[]")))
        return Snapshot(
            decode_workload(json.loads(state["state"]["S"]), settled),
            int(state["version"]["N"]),
            epoch,
            revs,
            outbox,
        )

    def write_pods(self, key: str, epoch: int, writes: Sequence[PodWrite]) -> None:
        for w in writes:
            condition: dict[str, Any] = (
                {"ConditionExpression": "attribute_not_exists(pk)"}
                if w.expected is None
                else {
                    "ConditionExpression": "rev = :rev",
                    "ExpressionAttributeValues": {":rev": _n(w.expected)},
                }
            )
            item_key = {"pk": _s(workload_pk(key)), "sk": _s(POD_PREFIX + w.name)}
            try:
                if w.pod is None:
                    if w.expected is None:
                        continue
                    self.client.delete_item(TableName=self.table, Key=item_key, **condition)
                else:
                    self.client.put_item(
                        TableName=self.table,
                        Item=self._pod_item(key, w.pod, (w.expected or 0) + 1, epoch),
                        **condition,
                    )
            except ClientError as exc:
                if _is_conflict(exc):
                    raise Conflict(f"{key} pod {w.name}") from exc
                raise

    def _pod_item(self, key: str, pod: Pod, rev: int, epoch: int) -> dict[str, Any]:
        item: dict[str, Any] = {
            "pk": _s(workload_pk(key)),
            "sk": _s(POD_PREFIX + pod.name),
            "workload": _s(key),
            "rev": _n(rev),
            "epoch": _n(epoch),
            "pod": _s(dumps(encode_pod(pod))),
        }
        if pod.node and not pod.retired:
            item["gsi1pk"] = _s(f"NODE#{pod.node}")
            item["gsi1sk"] = _s(f"{key}#{pod.name}")
        return item

    def _workload_item(
        self, w: Workload, version: int, epoch: int, outbox: Sequence[Effect], now: float
    ) -> dict[str, Any]:
        item: dict[str, Any] = {
            "pk": _s(workload_pk(w.key)),
            "sk": _s(STATE),
            "workload": _s(w.key),
            "version": _n(version),
            "epoch": _n(epoch),
            "phase": _s(w.phase.value),
            "queue": _s(w.queue),
            "state": _s(dumps(encode_workload(w))),
            "updatedAt": _n(now),
            "gsi1pk": _s(f"PHASE#{w.phase.value}"),
            "gsi1sk": _s(w.key),
        }
        if outbox:
            item["outbox"] = _s(dumps([encode_effect(e) for e in outbox]))
        if w.phase is Phase.FINISHED:
            item["expiresAt"] = _n(int(now) + self.history_ttl)
        return item

    def write_workload(
        self,
        before: Snapshot | None,
        after: Workload,
        epoch: int,
        outbox: Sequence[Effect],
        now: float,
    ) -> int:
        version = (before.version if before else 0) + 1
        try:
            self.client.put_item(
                TableName=self.table,
                Item=self._workload_item(after, version, epoch, outbox, now),
                **self._version_condition(before),
            )
        except ClientError as exc:
            if _is_conflict(exc):
                raise Conflict(after.key) from exc
            raise
        return version

    @staticmethod
    def _version_condition(before: Snapshot | None) -> dict[str, Any]:
        if before is None:
            return {"ConditionExpression": "attribute_not_exists(pk)"}
        return {
            "ConditionExpression": "version = :v",
            "ExpressionAttributeValues": {":v": _n(before.version)},
        }

    def clear_outbox(self, key: str, version: int) -> None:
        try:
            self.client.update_item(
                TableName=self.table,
                Key={"pk": _s(workload_pk(key)), "sk": _s(STATE)},
                UpdateExpression="REMOVE outbox",
                ConditionExpression="version = :v",
                ExpressionAttributeValues={":v": _n(version)},
            )
        except ClientError as exc:
            if _is_conflict(exc):
                raise Conflict(key) from exc
            raise

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
            )
        ]

    def get_workloads(
        self, keys: Iterable[str], unsettled: set[str] | None = None
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
                    "ProjectionExpression": "#s, outbox",
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
                request = reply.get("UnprocessedKeys") or {}
        return [found[k] for k in wanted if k in found]

    # ------------------------------------------------------------------ admission ledger

    def ledger(self) -> Ledger:
        item = self.client.get_item(TableName=self.table, Key=LEDGER_KEY, ConsistentRead=True).get(
            "Item"
        )
        if item is None:
            return Ledger()
        return Ledger(frozenset(json.loads(item["members"]["S"])), int(item["version"]["N"]))

    def _ledger_put(self, ledger: Ledger, members: frozenset[str]) -> dict[str, Any]:
        put: dict[str, Any] = {
            "TableName": self.table,
            "Item": {
                **LEDGER_KEY,
                "members": _s(json.dumps(sorted(members))),
                "version": _n(ledger.version + 1),
            },
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
        members: frozenset[str],
        now: float,
    ) -> int:
        """The admission and the ledger in one transaction, each on its version."""
        version = before.version + 1
        workload_put = {
            "TableName": self.table,
            "Item": self._workload_item(after, version, before.epoch, outbox, now),
            **self._version_condition(before),
        }
        try:
            self.client.transact_write_items(
                TransactItems=[{"Put": workload_put}, {"Put": self._ledger_put(ledger, members)}]
            )
        except ClientError as exc:
            if _is_conflict(exc):
                raise Conflict(f"admission of {after.key}") from exc
            raise
        return version

    def set_ledger(self, ledger: Ledger, members: frozenset[str]) -> None:
        try:
            self.client.put_item(**self._ledger_put(ledger, members))
        except ClientError as exc:
            if _is_conflict(exc):
                raise Conflict("ledger") from exc
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
