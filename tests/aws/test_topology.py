"""Topology in the control plane: node items keep their labels, and the Lambdas' pass admits
a required gang inside one block or says in `muster status` why it waits."""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws
from muster.aws.dynamo import DynamoStore
from muster.core import NodeObserved
from muster.core.capacity import NodeCapacity
from muster.local.resources import create_resources

from .conftest import Rig

L2, L3 = "network-node-layer-2", "network-node-layer-3"


@pytest.fixture
def dynamo() -> Iterator[DynamoStore]:
    with mock_aws():
        session = boto3.Session(
            region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
        )
        names = create_resources(session, "topo")
        yield DynamoStore(session.client("dynamodb"), names["MUSTER_TABLE_NAME"], "training")


def test_node_items_keep_the_topology_labels_and_drop_them_when_gone(dynamo: DynamoStore) -> None:
    labelled = NodeCapacity("n1", 1, 8, topology=(("zone", "z1"), (L3, "nn-3")))
    assert dynamo.put_node(labelled)[0]
    assert dynamo.nodes() == [labelled]
    assert dynamo.put_node(NodeCapacity("n1", 2, 8))[0]
    assert dynamo.nodes() == [NodeCapacity("n1", 2, 8)]


def block(node: str, spine: str, name: str, seq: int = 1, foreign: int = 0) -> NodeObserved:
    return NodeObserved(
        node, seq=seq, gpus=8, foreign_gpus=foreign, topology=((L2, spine), (L3, name))
    )


@pytest.fixture
def tas() -> Rig:
    return Rig(doc={"timeout": "60s", "capacityCheck": True, "topologyLevels": [L2, L3]})


def test_the_pass_admits_a_required_gang_inside_one_block_and_records_it(tas: Rig) -> None:
    rig = tas
    for node, spine, name in [("n1", "s1", "b1"), ("n2", "s1", "b2"), ("n3", "s1", "b2")]:
        rig.plane().handle(block(node, spine, name))
    rig.submit("ns/a", 2, gpus=16, shape=((2, 8),), topology=f"required={L3}")
    assert rig.admit() == ["ns/a"]
    snap = rig.store.load("ns/a")
    assert snap is not None
    assert snap.workload.domain == "network-node-layer-2=s1,network-node-layer-3=b2"


def test_muster_status_says_why_a_required_gang_waits(tas: Rig) -> None:
    from muster.admin.render import format_status
    from muster.admin.status import admission_outlook
    from muster.runtime import status

    rig = tas
    for node, name in [("n1", "b1"), ("n2", "b1"), ("n3", "b2"), ("n4", "b2")]:
        rig.plane().handle(block(node, "s1", name, foreign=2 if node == "n4" else 0))
    rig.submit("ns/big", 3, gpus=24, shape=((3, 8),), topology=f"required={L3}")
    assert rig.admit() == []
    reason = (
        "needs 3 \u00d7 8 GPUs in one network-node-layer-3 block; "
        "the largest free block has room for 2"
    )
    outlook = admission_outlook(rig.store, rig.settings())
    assert outlook["waiting"] == {"ns/big": reason}
    assert f"Waiting: ns/big: {reason}" in format_status(
        {**status(rig.store), "admission": outlook}
    )
    # AND once a block has room (n4's foreign pods left, a third node joined b2), it is admitted
    rig.plane().handle(block("n4", "s1", "b2", seq=2))
    rig.plane().handle(block("n5", "s1", "b2"))
    assert rig.admit() == ["ns/big"]


class _Deployment:
    """What `describe_view` reads of a deployment: its store and its settings."""

    def __init__(self, rig: Rig) -> None:
        self.rig = rig

    def store(self) -> object:
        return self.rig.store

    def settings(self, _store: object) -> object:
        rig = self.rig

        class Effective:
            def effective(self) -> object:
                return rig.settings()

        return Effective()


def test_muster_describe_shows_where_a_gang_was_placed_and_why_another_waits(tas: Rig) -> None:
    from muster.admin.describe import describe_view
    from muster.admin.render import format_describe

    rig = tas
    for node, name in [("n1", "b1"), ("n2", "b1"), ("n3", "b2")]:
        rig.plane().handle(block(node, "s1", name))
    rig.submit("ns/a", 2, gpus=16, shape=((2, 8),), topology=f"required={L3}")
    rig.submit("ns/b", 2, gpus=16, shape=((2, 8),), topology=f"required={L3}")
    assert rig.admit() == ["ns/a"]
    placed = format_describe(describe_view(_Deployment(rig), "ns/a"))  # type: ignore[arg-type]
    b1 = "network-node-layer-2=s1,network-node-layer-3=b1"
    assert "  topology   required=network-node-layer-3\n" in placed
    assert f"  placed in  {b1}\n" in placed
    assert f"Admitted         attempt=1 domain={b1}" in placed
    waiting = format_describe(describe_view(_Deployment(rig), "ns/b"))  # type: ignore[arg-type]
    assert (
        "  waiting    needs 2 \u00d7 8 GPUs in one network-node-layer-3 block; "
        "the largest free block has room for 1\n"
    ) in waiting
