"""DynamoDB's limits on moto: items stay well under 400 KB whatever the input, only
real conflicts are retried as conflicts, and the ledger holds 10,000 active workloads."""

from __future__ import annotations

import time
from typing import Any

import pytest
from botocore.exceptions import ClientError
from muster.aws.dynamo import DynamoStore
from muster.aws.dynamo.table import is_conflict
from muster.core import (
    DeadlineReached,
    Kind,
    Phase,
    Pod,
    Publish,
    Timer,
    TimerKind,
    Workload,
    decide,
    parse_settings,
)
from muster.runtime.codec import dumps, encode_workload
from muster.runtime.ports import PodWrite
from muster.schema import MESSAGE_BYTES, NAME_BYTES, NAMESPACE_BYTES, REASON_BYTES, UID_BYTES

from .conftest import ControlPlaneOnMoto

ITEM_LIMIT = 400 * 1024


def _item_size(item: dict[str, Any]) -> int:
    """DynamoDB's item size: attribute names plus values (strings in UTF-8 bytes)."""
    size = 0
    for name, value in item.items():
        size += len(name.encode())
        for kind, v in value.items():
            size += len(v.encode()) if kind in ("S", "N") else len(str(v))
    return size


def _items(aws: ControlPlaneOnMoto) -> list[dict[str, Any]]:
    client = aws.session.client("dynamodb")
    table = aws.resources["MUSTER_TABLE_NAME"]
    items: list[dict[str, Any]] = []
    request: dict[str, Any] = {"TableName": table}
    while True:
        reply = client.scan(**request)
        items.extend(reply["Items"])
        if "LastEvaluatedKey" not in reply:
            return items
        request["ExclusiveStartKey"] = reply["LastEvaluatedKey"]


def _worst_pod(i: int) -> Pod:
    """Every field at its bound, in the characters that take the most bytes in JSON."""
    return Pod(
        name=(f"p{i}-" + "x" * NAME_BYTES)[:NAME_BYTES],
        seq=2**62,
        uid=("u" * UID_BYTES),
        phase="Pending",
        ready=False,
        node=(f"n{i}-" + "y" * NAME_BYTES)[:NAME_BYTES],
        reason='"' * REASON_BYTES,  # escaped: two bytes each
        message="\x01" * MESSAGE_BYTES,  # escaped: six bytes each
    )


def test_every_item_stays_well_under_400_kb_at_the_worst_case(aws: ControlPlaneOnMoto):
    # GIVEN a gang of 100 pods (more than the 20 not-ready pods an eviction keeps,
    # so a larger gang stores no more) with the longest names and the costliest
    # messages, whose deadline deactivates it (an eviction and a deactivation in one outbox)
    store = aws.plane("ingest").store
    assert isinstance(store, DynamoStore)
    key = "n" * NAMESPACE_BYTES + "/" + "w" * NAME_BYTES
    pods = {p.name: p for p in (_worst_pod(i) for i in range(100))}
    gang = Workload(
        key=key,
        queue="q" * 63,
        gang_size=100,
        gpus=800,
        kind=Kind.POD_GROUP,
        phase=Phase.ADMITTED,
        attempt=1,
        timer=Timer(TimerKind.STARTUP, 1, 1, 1_000.0),
        evictions={"PodsReadyTimeout/WaitForStart": 10**6},
    )
    version = store.write_workload(None, gang, 0, (), 1.0)
    for chunk in range(0, 100, 99):
        names = list(pods)[chunk : chunk + 99]
        snap = store.load(key)
        assert snap is not None
        store.write_workload(
            snap,
            snap.workload,
            snap.epoch,
            (),
            1.0,
            pods=[PodWrite(n, pods[n], None) for n in names],
        )
    snap = store.load(key)
    assert snap is not None and len(snap.workload.pods) == 100
    settings = parse_settings({"requeuingStrategy": {"backoffLimitCount": 0}})
    decision = decide(snap.workload, DeadlineReached(key, 1, TimerKind.STARTUP), settings, 2_000.0)
    assert decision.workload is not None
    # WHEN the decision is stored with its outbox, and its history written
    version = store.write_workload(snap, decision.workload, snap.epoch + 1, decision.effects, 2.0)
    for index, effect in enumerate(decision.effects):
        if isinstance(effect, Publish):
            store.append_history(key, version, index, effect.event, effect.detail, 2.0)
    # THEN every item of the table is well under DynamoDB's 400 KB
    sizes = sorted(_item_size(item) for item in _items(aws))
    assert sizes[-1] < ITEM_LIMIT // 2, sizes[-3:]
    stored = store.load(key)
    assert stored is not None and stored.workload.phase is Phase.DEACTIVATED
    assert len(dumps(encode_workload(stored.workload)).encode()) < 4096


def _client_error(code: str, reasons: list[str] | None = None, message: str = "") -> ClientError:
    response: dict[str, Any] = {"Error": {"Code": code, "Message": message}}
    if reasons is not None:
        response["CancellationReasons"] = [{"Code": r} for r in reasons]
    return ClientError(response, "TransactWriteItems")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("error", "conflict"),
    [
        (_client_error("ConditionalCheckFailedException"), True),
        (_client_error("TransactionCanceledException", ["None", "ConditionalCheckFailed"]), True),
        (_client_error("TransactionCanceledException", ["TransactionConflict", "None"]), True),
        (_client_error("TransactionCanceledException", ["ValidationError", "None"]), False),
        (
            _client_error(
                "TransactionCanceledException", ["None", "ItemCollectionSizeLimitExceeded"]
            ),
            False,
        ),
        (_client_error("TransactionCanceledException", ["ThrottlingError"]), False),
        (
            _client_error(
                "TransactionCanceledException",
                message="Transaction cancelled, please refer cancellation reasons for specific "
                "reasons [None, ConditionalCheckFailed]",
            ),
            True,
        ),
        (_client_error("ValidationException"), False),
        (_client_error("ProvisionedThroughputExceededException"), False),
    ],
)
def test_only_failed_conditions_and_transaction_conflicts_are_conflicts(error, conflict):
    assert is_conflict(error) is conflict


def test_a_real_failed_condition_in_a_transaction_on_moto_is_a_conflict(aws: ControlPlaneOnMoto):
    store = aws.plane("ingest").store
    assert isinstance(store, DynamoStore)
    w = Workload(key="ns/a", queue="q", gang_size=1)
    store.write_workload(None, w, 0, (), 1.0)
    snap = store.load("ns/a")
    assert snap is not None
    store.write_workload(snap, w, 0, (), 2.0)
    with pytest.raises(ClientError) as caught:
        store.client.transact_write_items(
            TransactItems=[
                {"Update": store._workload_update(snap, w, 0, (), 3.0, (0, 0))},
            ]
        )
    assert is_conflict(caught.value)


@pytest.mark.slow
def test_the_ledger_holds_ten_thousand_active_workloads(aws: ControlPlaneOnMoto):
    # GIVEN 10,000 running workloads with long names, one GPU each, under a quota of 10,001
    aws.settings = {"gpuQuota": 10_001}
    plane = aws.plane("admission")
    store = plane.store
    assert isinstance(store, DynamoStore)
    client = store.client
    started = time.monotonic()
    for start in range(0, 10_000, 25):
        requests = []
        for i in range(start, start + 25):
            w = Workload(
                key=f"team-{i % 50:02d}-research/llama-finetune-{i:05d}-" + "x" * 40,
                queue="default",
                gang_size=1,
                gpus=1,
                phase=Phase.RUNNING,
                attempt=1,
            )
            requests.append({"PutRequest": {"Item": _workload_item(w)}})
        client.batch_write_item(RequestItems={store.table: requests})
    seeded = time.monotonic() - started
    # WHEN two more one-GPU workloads ask to be admitted
    for name in ("ns/one", "ns/two"):
        store.write_workload(
            None, Workload(key=name, queue="default", gang_size=1, gpus=1), 0, (), 1.0
        )
    started = time.monotonic()
    admitted = plane.admission_pass()
    elapsed = time.monotonic() - started
    # THEN exactly one fits, and the ledger stays a few small items
    assert admitted == ["ns/one"], (seeded, elapsed)
    ledger = client.query(
        TableName=store.table,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": "ADMISSION"}},
    )["Items"]
    assert len(ledger) <= 2 and max(_item_size(i) for i in ledger) < 1024


def _workload_item(w: Workload) -> dict[str, Any]:
    """A workload item as `DynamoStore.write_workload` stores it, for fast seeding."""
    return {
        "pk": {"S": f"WL#{w.key}"},
        "sk": {"S": "STATE"},
        "workload": {"S": w.key},
        "version": {"N": "1"},
        "epoch": {"N": "0"},
        "phase": {"S": w.phase.value},
        "queue": {"S": w.queue},
        "state": {"S": dumps(encode_workload(w))},
        "updatedAt": {"N": "1"},
        "gsi1pk": {"S": f"PHASE#{w.phase.value}"},
        "gsi1sk": {"S": w.key},
        "readyCount": {"N": "1"},
    }
