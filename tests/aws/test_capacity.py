"""The capacity view in the control plane: node items ordered by `seq`, and the check at admission."""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws
from muster.aws.dynamo import DynamoStore
from muster.core import NodeObserved, Outcome
from muster.core.capacity import NodeCapacity
from muster.local.resources import create_resources
from muster.runtime.memory import MemoryStore

from .conftest import Rig


def capacity(node: str, seq: int, gpus: int = 8, foreign: int = 0, **kw: object) -> NodeObserved:
    return NodeObserved(node, seq=seq, gpus=gpus, foreign_gpus=foreign, **kw)  # type: ignore[arg-type]


@pytest.fixture
def fit_rig() -> Rig:
    return Rig(doc={"timeout": "60s", "capacityCheck": True})


def test_a_gang_waits_for_room_and_is_admitted_when_a_newer_report_shows_it(fit_rig: Rig) -> None:
    rig = fit_rig
    # GIVEN one node of 8 GPUs, 6 of them held by pods Muster does not manage
    rig.plane().handle(capacity("n0", 10, foreign=6))
    rig.submit("ns/a", 1, gpus=8)
    # WHEN a pass runs: the gang of 1 x 8 does not fit
    assert rig.admit() == []
    assert rig.phase("ns/a") == "Pending"
    # AND a reordered, older report that says the node is free changes nothing
    rig.plane().handle(capacity("n0", 9, foreign=0))
    assert rig.metrics.total("IgnoredEvents", outcome=Outcome.STALE.value) == 1
    assert rig.store.capacity["n0"].foreign_gpus == 6
    assert rig.admit() == []
    # AND a newer report with less room asks for no pass
    rig.messages.admission_requests.clear()
    rig.plane().handle(capacity("n0", 11, foreign=7))
    assert rig.messages.admission_requests == []
    # WHEN the newer report says the others left, a pass is asked for and admits it
    rig.plane().handle(capacity("n0", 12, foreign=0))
    assert rig.messages.admission_requests == [("node capacity changed", None)]
    assert rig.admit() == ["ns/a"]


def test_bound_pods_of_a_running_gang_hold_their_gpus(fit_rig: Rig) -> None:
    rig = fit_rig
    rig.plane().handle(capacity("n0", 1))
    rig.plane().handle(capacity("n1", 1))
    rig.submit("ns/a", 2, gpus=8)  # 2 pods x 4 GPUs
    assert rig.admit() == ["ns/a"]
    rig.pod("ns/a", "a-0", 2, ready=True, node="n0")
    rig.pod("ns/a", "a-1", 3, ready=True, node="n0")
    assert rig.phase("ns/a") == "Running"
    # n0 is full (2 x 4 bound), n1 free: a gang of 2 x 8 does not fit; one of 1 x 8 does
    rig.submit("ns/big", 2, gpus=16)
    rig.submit("ns/one", 1, gpus=8)
    assert rig.admit() == ["ns/one"]
    assert rig.phase("ns/big") == "Pending"


def test_without_the_check_node_reports_change_nothing_about_admission(rig: Rig) -> None:
    rig.plane().handle(capacity("n0", 1, foreign=8))
    rig.submit("ns/a", 1, gpus=8)
    assert rig.admit() == ["ns/a"]
    assert ("node capacity changed", None) not in rig.messages.admission_requests


def test_muster_status_says_why_a_gang_waits_and_which_the_check_cannot_judge(
    fit_rig: Rig,
) -> None:
    from muster.admin.render import format_status
    from muster.admin.status import admission_outlook
    from muster.runtime import status

    rig = fit_rig
    rig.plane().handle(capacity("n0", 1, foreign=2))
    rig.submit("ns/a", 4, gpus=32)
    rig.submit("ns/pinned", 1, gpus=8, placement="nodeSelector")
    outlook = admission_outlook(rig.store, rig.settings())
    assert outlook["waiting"] == {
        "ns/a": "needs 4 \u00d7 8 GPUs on one node each; largest free block is 6"
    }
    doc = {**status(rig.store), "admission": outlook}
    text = format_status(doc)
    assert "Waiting: ns/a: needs 4 \u00d7 8 GPUs on one node each; largest free block is 6" in text
    assert (
        "Unchecked: ns/pinned: capacity check not applied: its pods set nodeSelector, which "
        "the check does not evaluate; judged on quota alone" in text
    )


@pytest.fixture
def dynamo() -> Iterator[DynamoStore]:
    with mock_aws():
        session = boto3.Session(
            region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
        )
        names = create_resources(session, "cap")
        yield DynamoStore(session.client("dynamodb"), names["MUSTER_TABLE_NAME"], "training")


def test_node_items_keep_the_newest_report(dynamo: DynamoStore) -> None:
    # GIVEN a report at seq 5
    first = NodeCapacity("node-2", 5, 8, True, None, 2)
    assert dynamo.put_node(first) == (True, None)
    # THEN an older or equal one loses; a newer one wins, and says what it replaced
    assert dynamo.put_node(NodeCapacity("node-2", 4, 8, True, None, 0)) == (False, first)
    assert dynamo.put_node(NodeCapacity("node-2", 5, 8, True, None, 0)) == (False, first)
    assert dynamo.put_node(NodeCapacity("node-2", 6, 8, False, "cordoned", 1)) == (True, first)
    assert dynamo.put_node(NodeCapacity("node-10", 1, 4, True, None, 0))[0]
    assert dynamo.nodes() == [
        NodeCapacity("node-10", 1, 4, True, None, 0),
        NodeCapacity("node-2", 6, 8, False, "cordoned", 1),
    ]
    # AND a node made schedulable again loses its reason
    assert dynamo.put_node(NodeCapacity("node-2", 7, 8, True, None, 1))[0]
    assert dynamo.nodes()[1].unschedulable is None


def test_the_memory_store_orders_node_reports_like_dynamodb() -> None:
    store = MemoryStore()
    assert store.put_node(NodeCapacity("n", 5, 8)) == (True, None)
    assert store.put_node(NodeCapacity("n", 5, 0)) == (False, NodeCapacity("n", 5, 8))
    assert store.put_node(NodeCapacity("n", 4, 0)) == (False, NodeCapacity("n", 5, 8))
    assert store.nodes() == [NodeCapacity("n", 5, 8)]


def test_a_burst_of_node_reports_asks_for_two_passes_and_each_report_gets_one_after_it(
    fit_rig: Rig,
) -> None:
    from muster.core.capacity import PACE_SECONDS

    rig = fit_rig
    plane = rig.plane()  # one function instance, warm across its records
    # WHEN 200 nodes report room for the first time within two seconds
    sent_at: list[float] = []
    for i in range(200):
        rig.clock.now = 1_000.0 + i * 0.01
        before = len(rig.messages.admission_requests)
        plane.handle(capacity(f"n{i}", i + 1))
        if len(rig.messages.admission_requests) > before:
            sent_at.append(rig.clock.now)
    # THEN two passes were asked for: one at once, one at the window's end
    assert rig.messages.admission_requests == [("node capacity changed", None)] * 2
    assert rig.messages.admission_delays[0] == 0.0
    due = [t + d for t, d in zip(sent_at, rig.messages.admission_delays, strict=True)]
    # AND every report but the first is older than the trailing pass
    assert due[1] == pytest.approx(1_000.0 + PACE_SECONDS)
    assert due[1] > rig.clock.now
    # WHEN a node reports room after the window
    rig.clock.now = 1_000.0 + PACE_SECONDS + 0.5
    plane.handle(capacity("n0", 500, foreign=0, gpus=16))
    # THEN it asks at once again
    assert len(rig.messages.admission_requests) == 3
    assert rig.messages.admission_delays[2] == 0.0


def test_a_node_not_ready_delivered_after_its_later_ready_leaves_the_gang_running(rig: Rig) -> None:
    # GIVEN a running gang on n0, and n0's Ready report at seq 20 applied
    rig.submit("ns/a", 2)
    assert rig.admit() == ["ns/a"]
    rig.pod("ns/a", "a-0", 2, ready=True, node="n0")
    rig.pod("ns/a", "a-1", 3, ready=True, node="n0")
    assert rig.phase("ns/a") == "Running"
    rig.plane().handle(capacity("n0", 20))
    # WHEN its NotReady of seq 10 arrives late (redelivered after a failed batch)
    late = rig.plane()
    outcomes = late.handle(capacity("n0", 10, ready=False))
    # THEN it is stale: no workload hears of it, no pod is marked down, no recovery starts
    assert outcomes == [Outcome.STALE]
    assert late.stats.events == 0
    assert rig.phase("ns/a") == "Running"
    snap = rig.store.load("ns/a")
    assert snap is not None
    assert not any(p.node_down for p in snap.workload.pods.values())
    # AND the same report delivered again is still heard by its pods (a redelivery
    # after a crash between the node's item and its pods)
    rig.plane().handle(capacity("n0", 30, ready=False))
    assert rig.phase("ns/a") == "Recovering"
    again = rig.plane()
    again.handle(capacity("n0", 30, ready=False))
    assert again.stats.events == 1


def _deleted(node: str, seq: int) -> NodeObserved:
    from muster.schema import NODE_DELETED

    return NodeObserved(
        node, ready=False, seq=seq, gpus=0, schedulable=False, unschedulable=NODE_DELETED
    )


@pytest.mark.parametrize("kind", ["memory", "dynamodb"])
def test_a_deleted_node_leaves_the_capacity_view_and_expires(kind: str) -> None:
    from contextlib import nullcontext

    from tests.aws.stores import dynamo_store

    with dynamo_store("nodes") if kind == "dynamodb" else nullcontext(MemoryStore()) as store:
        rig = Rig(store=store)  # type: ignore[arg-type]
        # GIVEN two nodes of 8 GPUs in the view
        rig.plane().handle(capacity("n0", 10))
        rig.plane().handle(capacity("n1", 10))
        assert [n.node for n in store.nodes()] == ["n0", "n1"]
        # WHEN the agent reports n0 deleted
        rig.plane().handle(_deleted("n0", 12))
        # THEN its GPUs leave the view at once
        assert [n.node for n in store.nodes()] == ["n1"]
        # AND a late report from before its deletion does not bring it back
        assert not store.put_node(NodeCapacity("n0", 11, 8, True, None, 0), rig.clock())[0]
        assert [n.node for n in store.nodes()] == ["n1"]
        # AND its item expires (DynamoDB's TTL, after the tombstone TTL)
        if isinstance(store, MemoryStore):
            assert store.expire(rig.clock() + store.tombstone_ttl) == 1
            assert "n0" not in store.capacity
        else:
            [item] = [
                i
                for i in store._query(
                    KeyConditionExpression="pk = :pk AND sk = :sk",
                    ExpressionAttributeValues={":pk": {"S": "NODES"}, ":sk": {"S": "NODE#n0"}},
                )
            ]
            assert int(item["expiresAt"]["N"]) == int(rig.clock()) + store.tombstone_ttl
        # WHEN a node of that name comes back (a newer report), it is in the view again
        rig.plane().handle(capacity("n0", 20))
        assert [n.node for n in store.nodes()] == ["n0", "n1"]
        if isinstance(store, DynamoStore):
            back = store.client.get_item(
                TableName=store.table, Key={"pk": {"S": "NODES"}, "sk": {"S": "NODE#n0"}}
            )["Item"]
            assert "expiresAt" not in back
