"""Node packing in the control plane: the Lambdas' pass packs a small gang onto the fullest
node, records it, and keeps its reservation there in the next pass."""

from __future__ import annotations

from muster.core import NodeObserved

from .conftest import Rig


def test_the_pass_packs_small_gangs_onto_the_fullest_node_and_keeps_them_there() -> None:
    # GIVEN three nodes with 8, 3 and 2 free GPUs, and the capacity check with packing
    rig = Rig(doc={"timeout": "60s", "capacityCheck": True, "nodePacking": True})
    for node, foreign in [("n1", 0), ("n2", 5), ("n3", 6)]:
        rig.plane().handle(NodeObserved(node, seq=1, gpus=8, foreign_gpus=foreign))
    # WHEN a 3-GPU gang is submitted and admitted
    rig.submit("ns/three", 1, gpus=3, shape=((1, 3),))
    assert rig.admit() == ["ns/three"]
    # THEN it went to n2 (3 free), not to the first node with room (n1)
    snap = rig.store.load("ns/three")
    assert snap is not None and snap.workload.domain == "hostname=n2"
    # AND while its pod is not bound, the next 3-GPU gang cannot take n2 again: it goes to n1
    rig.submit("ns/next", 1, gpus=3, shape=((1, 3),))
    assert rig.admit() == ["ns/next"]
    later = rig.store.load("ns/next")
    assert later is not None and later.workload.domain == "hostname=n1"
