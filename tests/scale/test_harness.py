"""The scale harness itself: DynamoDB's limits, the invocation budget, the Kubernetes stand-in."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest
from botocore.exceptions import ClientError
from muster.aws.dynamo import DynamoStore
from muster.aws.dynamo.table import is_conflict
from muster.core import Admit, Kind
from muster.harness.budget import InvocationTimedOut, SplitQueues, Workers
from muster.harness.clock import VirtualClock
from muster.harness.kube_standin import KubeStandIn
from muster.harness.limits import item_size, number_size
from muster.harness.moto_speed import faster_moto, item_backups
from muster.harness.scale_scenarios import running
from muster.harness.scale_seed import items_of
from muster.kube.adapter import ClusterUnavailable, KubernetesCluster
from muster.kube.http import ApiException
from muster.runtime.ports import PodWrite

from tests.scale.conftest import Table


def put(t: Table, sk: str, size: int) -> None:
    t.client.put_item(
        TableName=t.name, Item={"pk": {"S": "hot"}, "sk": {"S": sk}, "blob": {"S": "x" * size}}
    )


def test_item_sizes_follow_dynamodbs_rules() -> None:
    assert item_size({"pk": {"S": "ab"}}) == 4  # name + UTF-8 bytes
    assert item_size({"é": {"S": "é"}}) == 4
    assert number_size("12345") == 4  # (5 digits + 1) // 2 + 1
    assert number_size("-1.50") == 3  # "15", and a byte for the sign
    assert item_size({"m": {"M": {"a": {"BOOL": True}}}}) == 1 + 3 + 1 + 1 + 1
    assert item_size({"l": {"L": [{"N": "1"}, {"NULL": True}]}}) == 1 + 3 + (1 + 2) + (1 + 1)


def test_a_401_kb_item_is_refused_and_not_written(table: Table) -> None:
    with pytest.raises(ClientError) as caught:
        put(table, "big", 401 * 1024)
    error = caught.value.response["Error"]
    assert error["Code"] == "ValidationException"
    assert error["Message"] == "Item size has exceeded the maximum allowed size"
    assert table.limits.usage.too_large == 1
    key = {"pk": {"S": "hot"}, "sk": {"S": "big"}}
    assert "Item" not in table.raw.get_item(TableName=table.name, Key=key)
    # Under the limit (and under moto's own, about 405,000 bytes): written, in
    # ceil(399,374 / 1,024) write units.
    put(table, "big", 390 * 1024)
    assert table.limits.usage.write_units == 391
    assert table.limits.usage.largest == 399_374


def test_one_item_past_1000_write_units_in_a_second_is_throttled(table: Table) -> None:
    for i in range(100):  # 10 KB each: 10 write units, 1,000 in the second
        table.timeline.now = i * 0.004
        put(table, "one", 10 * 1024 - 20)
    assert table.limits.hottest_wcu() == 1000
    with pytest.raises(ClientError) as caught:
        put(table, "one", 10 * 1024 - 20)
    assert caught.value.response["Error"]["Code"] == "ProvisionedThroughputExceededException"
    assert not is_conflict(caught.value)
    assert table.limits.usage.throttled == 3  # botocore's three tries
    table.timeline.now = 1.0  # the next second: room again
    put(table, "one", 10 * 1024 - 20)


def test_the_same_writes_spread_over_time_are_not_throttled(table: Table) -> None:
    for i in range(300):
        table.timeline.now = i * 0.1  # ten a second: 100 write units a second
        put(table, "one", 10 * 1024 - 20)
    assert table.limits.usage.throttled == 0
    assert table.limits.hottest_wcu() == 100


def update(t: Table) -> dict:
    return {
        "Update": {
            "TableName": t.name,
            "Key": {"pk": {"S": "wl"}, "sk": {"S": "STATE"}},
            "UpdateExpression": "ADD readyCount :d",
            "ExpressionAttributeValues": {":d": {"N": "1"}},
        }
    }


def test_overlapping_transactions_on_one_item_conflict_as_on_aws(table: Table) -> None:
    table.timeline.who, table.timeline.now = "worker-a", 10.0
    table.client.transact_write_items(TransactItems=[update(table)])
    table.timeline.who, table.timeline.now = "worker-b", 10.002  # while a's is in flight
    with pytest.raises(ClientError) as caught:
        table.client.transact_write_items(TransactItems=[update(table)])
    response = caught.value.response
    assert response["Error"]["Code"] == "TransactionCanceledException"
    assert [r["Code"] for r in response["CancellationReasons"]] == ["TransactionConflict"]
    assert "[TransactionConflict]" in response["Error"]["Message"]
    assert is_conflict(caught.value)  # the store retries it as a lost race
    table.timeline.now = 10.004  # a's is done
    table.client.transact_write_items(TransactItems=[update(table)])
    # Transaction write units count twice: 2 x 1 unit x 2 committed.
    assert table.limits.usage.write_units == 4


def test_an_invocation_past_its_budget_fails_with_its_whole_batch() -> None:
    clock = VirtualClock(100.0)
    queues = SplitQueues(clock)
    workers = Workers(clock, queues)
    made: list[int] = []

    def handler(batch: list) -> list:
        for i in range(1000):  # 1,000 calls of 4 ms: 4 s, past a 1 s budget
            workers.spend(0.004, "dynamodb.PutItem")
            made.append(i)
        return []

    workers.add("ingest", handler, timeout=1.0, instances=1, queue="ingest")
    for i in range(3):
        queues.send("ingest", f"m{i}")
    try:
        workers.run(150.0)
    finally:
        workers.stop()
    (invocation,) = workers.invocations
    assert invocation.timed_out and invocation.duration == pytest.approx(1.0)
    assert invocation.failed == 3 and invocation.records == 3
    assert len(made) == 250  # the effects made before the timeout stay
    assert queues.waiting("ingest") == 3  # back on the queue, visible again later
    assert issubclass(InvocationTimedOut, BaseException)
    assert not issubclass(InvocationTimedOut, Exception)  # no handler's except catches it


def test_instances_interleave_their_calls_in_virtual_time() -> None:
    clock = VirtualClock(0.0)
    queues = SplitQueues(clock)
    workers = Workers(clock, queues)
    order: list[tuple[str, float]] = []

    def handler(batch: list) -> list:
        for _ in range(3):
            who, at = workers.spend(0.010, "sqs.send")
            order.append((who, round(at, 3)))
        return []

    workers.add("ingest", handler, timeout=30.0, instances=2, batch=1, queue="ingest")
    queues.send("ingest", "a")
    queues.send("ingest", "b")
    try:
        workers.run(10.0)
    finally:
        workers.stop()
    assert [at for _, at in order] == [0.0, 0.0, 0.01, 0.01, 0.02, 0.02]
    assert {who for who, _ in order} == {"ingest-0", "ingest-1"}
    assert [i.duration for i in workers.invocations] == pytest.approx([0.03, 0.03])


def test_the_kube_stand_in_answers_429_when_asked_and_counts_calls() -> None:
    kube = KubeStandIn()
    path = kube.add_workload(Kind.JOB, "ns/train", uid="u1")
    kube.throttle(1)
    with pytest.raises(ApiException) as caught:
        kube.get(path)
    assert caught.value.status == 429
    assert kube.get(path)["spec"] == {"suspend": True}
    assert kube.calls["get"] == 2 and kube.refused == 1
    # Through the adapter: throttled past its retries, the cluster is unavailable.
    adapter = KubernetesCluster(kube, records=lambda key: None, sleep=lambda s: None)  # type: ignore[arg-type]
    kube.throttle(100)
    with pytest.raises(ClusterUnavailable):
        adapter.admit(Admit("ns/train", 1, Kind.JOB, uid="u1"))
    assert kube.refused == 1 + adapter.attempts


def test_the_kube_stand_in_applies_merge_patches_on_their_resource_version() -> None:
    kube = KubeStandIn()
    path = kube.add_workload(Kind.JOB, "ns/train", uid="u1")
    version = kube.get(path)["metadata"]["resourceVersion"]
    kube.merge_patch(path, {"metadata": {"resourceVersion": version}, "spec": {"suspend": False}})
    assert kube.get(path)["spec"] == {"suspend": False}
    with pytest.raises(ApiException) as caught:
        kube.merge_patch(path, {"metadata": {"resourceVersion": version}, "spec": {}})
    assert caught.value.status == 409


def test_a_batching_window_gathers_a_batch_as_lambda_does() -> None:
    clock = VirtualClock(0.0)
    queues = SplitQueues(clock)
    workers = Workers(clock, queues)
    batches: list[tuple[float, int]] = []

    def handler(batch: list) -> list:
        batches.append((round(clock.now, 3), len(batch)))
        return []

    workers.add("ingest", handler, timeout=30.0, instances=1, batch=4, queue="ingest", window=1.0)
    queues.send("ingest", "a", 0.0)
    queues.send("ingest", "b", 0.3)  # the window from "a" ends at 1.0: both go then
    for i in range(4):  # four visible at 2.3: a full batch goes at once
        queues.send("ingest", f"c{i}", 2.0 + i * 0.1)
    queues.send("ingest", "d", 2.35)
    try:
        workers.run(10.0)
    finally:
        workers.stop()
    assert batches == [(1.0, 2), (2.3, 4), (3.35, 1)]


def test_transactions_backed_up_by_item_answer_as_moto_does(table: Table) -> None:
    def item(sk: str, n: int) -> dict:
        return {"pk": {"S": "wl"}, "sk": {"S": sk}, "n": {"N": str(n)}}

    def state() -> list:
        return table.raw.scan(TableName=table.name)["Items"]

    def transaction(n: int) -> None:
        table.raw.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": table.name, "Item": item("a", n)}},
                {
                    "Update": {
                        "TableName": table.name,
                        "Key": {"pk": {"S": "wl"}, "sk": {"S": "b"}},
                        "UpdateExpression": "SET n = :n",
                        "ConditionExpression": "n = :was",
                        "ExpressionAttributeValues": {":n": {"N": str(n)}, ":was": {"N": "1"}},
                    }
                },
                {"Put": {"TableName": table.name, "Item": item("c", n)}},
            ]
        )

    table.raw.put_item(TableName=table.name, Item=item("b", 1))
    with item_backups():
        transaction(2)  # b was 1: a, b and c written
        assert sorted(int(i["n"]["N"]) for i in state()) == [2, 2, 2]
        before = state()
        with pytest.raises(ClientError) as caught:
            transaction(3)  # b is 2 now: cancelled, nothing written
        assert caught.value.response["Error"]["Code"] == "TransactionCanceledException"
        assert state() == before
        table.raw.delete_item(TableName=table.name, Key={"pk": {"S": "wl"}, "sk": {"S": "a"}})
        table.raw.delete_item(TableName=table.name, Key={"pk": {"S": "wl"}, "sk": {"S": "c"}})
        with pytest.raises(ClientError):
            transaction(4)  # a and c absent before: absent after
        assert [i["sk"]["S"] for i in state()] == ["b"]
    from moto.dynamodb import models

    assert models.copy is copy  # moto as it was, outside


def test_queries_of_a_partition_answer_as_moto_does(table: Table) -> None:
    for p in range(4):
        for i in range(30):
            item = {"pk": {"S": f"WL#{p}"}, "sk": {"S": f"POD#{i:03d}"}, "n": {"N": str(i)}}
            if i % 3 == 0:
                item |= {"gsi1pk": {"S": f"NODE#{i % 2}"}, "gsi1sk": {"S": f"{p}#{i:03d}"}}
            table.raw.put_item(TableName=table.name, Item=item)

    def pages(**query: Any) -> list:
        out, start = [], None
        while True:
            more = {"ExclusiveStartKey": start} if start else {}
            reply = table.raw.query(TableName=table.name, Limit=7, **query, **more)
            out.append(reply["Items"])
            start = reply.get("LastEvaluatedKey")
            if not start:
                return out

    queries = [
        {
            "KeyConditionExpression": "pk = :pk AND sk >= :from",
            "ExpressionAttributeValues": {":pk": {"S": "WL#2"}, ":from": {"S": "POD#010"}},
        },
        {
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": "WL#1"}},
            "ScanIndexForward": False,
        },
        {
            "IndexName": "gsi1",
            "KeyConditionExpression": "gsi1pk = :g",
            "ExpressionAttributeValues": {":g": {"S": "NODE#0"}},
        },
        {
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": "WL#9"}},  # no such partition
        },
    ]
    expected = [pages(**q) for q in queries]
    assert sum(len(p) for p in expected[0]) == 20 and len(expected[2]) > 1
    with faster_moto():
        assert [pages(**q) for q in queries] == expected


def test_seeded_items_are_those_the_store_writes(table: Table) -> None:
    w = running("ns/train-00007", 7, 3, 500)
    DynamoStore(table.raw, table.name, "c").write_workload(
        None,
        replace(w, pods={}),
        0,
        (),
        100.0,
        pods=[PodWrite(p.name, p, None, w.uid) for p in w.pods.values()],
        ready_delta=3,
        live_delta=3,
    )
    written = sorted(table.raw.scan(TableName=table.name)["Items"], key=lambda i: i["sk"]["S"])
    assert written == sorted(items_of(w, now=100.0), key=lambda i: i["sk"]["S"])
    assert [i["gsi1pk"]["S"] for i in written[:3]] == ["NODE#node-0002"] * 3  # 8 pods to a node
