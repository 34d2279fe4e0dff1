"""The workload item (state, version, epoch, ready count, outbox), written with its pods."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from muster.aws.dynamo.pods import (
    PodItems,
    count_changes,
    listing_items,
    live_count_of,
    owner_of,
    pod_of,
)
from muster.aws.dynamo.quarantine import decode_quarantine
from muster.aws.dynamo.table import (
    EXPIRING_PK,
    LEDGER_KEY,
    MAX_TRANSACTION,
    POD_PREFIX,
    RECENT_PREFIX,
    STATE,
    is_conflict,
    number,
    string,
    workload_pk,
)
from muster.core import Effect, Phase, Pod, Workload
from muster.runtime import listing
from muster.runtime.codec import (
    decode_effect,
    decode_workload,
    dumps,
    encode_effect,
    encode_workload,
)
from muster.runtime.ports import Conflict, PodWrite, Stored, belongs, settle_pod, stops_holding

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef, UpdateTypeDef


def _count_deltas(write: PodWrite, before: Stored | None) -> tuple[int, int]:
    """How one pod write changes the numbers of pods counting ready and alive."""
    old = before.workload.pods.get(write.name) if before else None
    new = write.pod
    ready = int(bool(new and new.counts_ready)) - int(bool(old and old.counts_ready))
    return ready, int(bool(new and new.live)) - int(bool(old and old.live))


class WorkloadItems(PodItems):
    """A workload with its pods: loaded in one Query, written on its version."""

    def load(self, key: str) -> Stored | None:
        state: dict[str, Any] | None = None
        pods: list[dict[str, Any]] = []
        for item in self._query(
            KeyConditionExpression="pk = :pk AND sk >= :from",
            ExpressionAttributeValues={
                ":pk": string(workload_pk(key)),
                ":from": string(POD_PREFIX),
            },
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
            name = item["sk"]["S"].removeprefix(POD_PREFIX)
            revs[name] = int(item["rev"]["N"])
            pod = pod_of(item)
            if pod is not None and belongs(owner_of(item), workload.uid):
                settled[name] = settle_pod(pod, int(item["epoch"]["N"]), epoch)
        listed = listing.rebuilt(workload.listed_seq, listing_items(pods), workload.uid)
        outbox = tuple(decode_effect(e) for e in json.loads(state.get("outbox", {}).get("S", "[]")))
        return Stored(
            replace(workload, pods=settled, listed=listed),
            int(state["version"]["N"]),
            epoch,
            revs,
            outbox,
            int(state.get("readyCount", {}).get("N", "0")),
            int(state.get("failures", {}).get("N", "0")),
            decode_quarantine(state),
            "expiring" in state,
            live_count_of(state),
        )

    def _workload_update(
        self,
        before: Stored | None,
        after: Workload,
        epoch: int,
        outbox: Sequence[Effect],
        now: float,
        counts: tuple[int, int],
        expiring: bool = False,
    ) -> UpdateTypeDef:
        """An Update of the workload item on its version (transaction form).

        An update, not a put: the ready count is changed only by deltas, so a
        concurrent pod write's count is never overwritten; an eviction (a new
        epoch) resets it, since every pod of the attempt is then retired. Its
        state holds no pods and no pod listing (only its revision), so the item
        stays small whatever the gang's size.
        """
        version = (before.version if before else 0) + 1
        values: dict[str, Any] = {
            ":workload": string(after.key),
            ":version": number(version),
            ":epoch": number(epoch),
            ":phase": string(after.phase.value),
            ":queue": string(after.queue),
            ":state": string(dumps(encode_workload(after))),
            ":now": number(now),
            ":g1pk": string(f"PHASE#{after.phase.value}"),
            ":g1sk": string(after.key),
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
            values[":outbox"] = string(dumps([encode_effect(e) for e in outbox]))
        else:
            removes.append("outbox")
        if expiring:
            keep = "" if after.phase is Phase.FINISHED else after.uid
            record = {"at": int(now) + self.history_ttl, "keep": keep, "version": version}
            sets.append("expiring = :expiring")
            values[":expiring"] = string(dumps(record))
        if after.phase is Phase.FINISHED:
            sets.append("expiresAt = :expires")
            values[":expires"] = number(int(now) + self.history_ttl)
        else:
            removes.append("expiresAt")  # a new incarnation under a finished one's key
        ready_delta, live_delta = counts
        adds = ""
        if before is None or epoch != before.epoch:
            sets += ["readyCount = :ready", "liveCount = :live"]
            values[":ready"] = number(ready_delta)
            values[":live"] = number(live_delta)
        else:
            # A count an older item does not keep stays unkept until the next reset.
            adds, changes = count_changes(
                ready_delta, live_delta if before.live_count is not None else 0
            )
            values.update(changes)
        expression = "SET " + ", ".join(sets)
        if removes:
            expression += " REMOVE " + ", ".join(removes)
        if adds:
            expression += " " + adds
        update: UpdateTypeDef = {
            "TableName": self.table,
            "Key": {"pk": string(workload_pk(after.key)), "sk": string(STATE)},
            "UpdateExpression": expression,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
        }
        if before is None:
            update["ConditionExpression"] = "attribute_not_exists(pk)"
        else:
            update["ConditionExpression"] = "#version = :expected"
            values[":expected"] = number(before.version)
        return update

    def write_workload(
        self,
        before: Stored | None,
        after: Workload,
        epoch: int,
        outbox: Sequence[Effect],
        now: float,
        pods: Sequence[PodWrite] = (),
        ready_delta: int = 0,
        *,
        live_delta: int = 0,
        expiring: bool = False,
    ) -> int:
        stamps = listing.stamping(before, after, pods)
        # A reset (a new workload, a new epoch) sets the counts in the last transaction:
        # the chunks before it leave them alone.
        reset = before is None or epoch != before.epoch
        counts_live = before is not None and before.live_count is not None
        # (operation, its change of the ready count): the listing's stamps first, then
        # the pods; at most 100 items per transaction, each chunk keeping pods and
        # count in step, the workload item (and its expiry record) in the last.
        operations: list[tuple[TransactWriteItemTypeDef, tuple[int, int]]] = [
            (
                self._stamp_operation(
                    after.key, name, stamp, before.pod_revs.get(name) if before else None, after.uid
                ),
                (0, 0),
            )
            for name, stamp in sorted(stamps.others.items())
        ]
        operations.extend(
            (
                self._pod_operation(after.key, w, epoch, now, stamps.written.get(w.name)),
                (0, 0) if reset else _count_deltas(w, before),
            )
            for w in pods
        )
        last: list[TransactWriteItemTypeDef] = []
        if expiring:
            index = {
                "TableName": self.table,
                "Item": {
                    "pk": string(EXPIRING_PK),
                    "sk": string(workload_pk(after.key)),
                    "workload": string(after.key),
                },
            }
            last.append({"Put": index})  # type: ignore[typeddict-item]
        if stops_holding(before, after, outbox):
            # The ledger names every quota holder: this write ends the holding.
            entry = {"pk": LEDGER_KEY["pk"], "sk": string(RECENT_PREFIX + after.key)}
            last.append({"Delete": {"TableName": self.table, "Key": entry}})
        room = MAX_TRANSACTION - 1 - len(last)
        head = operations[: max(0, len(operations) - room)]
        tail = operations[len(head) :]
        try:
            for start in range(0, len(head), MAX_TRANSACTION - 1):
                chunk = head[start : start + MAX_TRANSACTION - 1]
                ready = sum(d for _, (d, _) in chunk)
                live = sum(d for _, (_, d) in chunk) if counts_live else 0
                ready_delta -= ready
                live_delta -= live
                self.client.transact_write_items(
                    TransactItems=[
                        *(op for op, _ in chunk),
                        {"Update": self._chunk_count_update(after.key, before, ready, live)},
                    ]
                )
            update = self._workload_update(
                before, after, epoch, outbox, now, (ready_delta, live_delta), expiring
            )
            if not tail and not last:
                self.client.update_item(**update)
            else:
                self.client.transact_write_items(
                    TransactItems=[*(op for op, _ in tail), *last, {"Update": update}]
                )
        except ClientError as exc:
            if is_conflict(exc):
                raise Conflict(after.key) from exc
            raise
        return (before.version if before else 0) + 1

    def _chunk_count_update(
        self, key: str, before: Stored | None, ready_delta: int, live_delta: int
    ) -> UpdateTypeDef:
        """A chunk's change of the counts, on the workload's version (the chunk's last item)."""
        expression, values = count_changes(ready_delta, live_delta)
        return {
            "TableName": self.table,
            "Key": {"pk": string(workload_pk(key)), "sk": string(STATE)},
            "UpdateExpression": expression or "SET #version = :expected",
            "ConditionExpression": "#version = :expected",
            "ExpressionAttributeNames": {"#version": "version"},
            "ExpressionAttributeValues": {
                **values,
                ":expected": number(before.version if before else 0),
            },
        }

    def clear_outbox(self, key: str, version: int) -> None:
        try:
            self.client.update_item(
                TableName=self.table,
                Key={"pk": string(workload_pk(key)), "sk": string(STATE)},
                UpdateExpression="REMOVE outbox, failures, lastError",
                ConditionExpression="version = :v",
                ExpressionAttributeValues={":v": number(version)},
            )
        except ClientError as exc:
            if is_conflict(exc):
                raise Conflict(key) from exc
            raise
